package blob

import (
	"testing"

	"github.com/bulkrun/bulkrun/shared/submit"
)

// Prefix listing with unusual keys: keys listed with EncodingType=url come
// back as stored, in S3's form encoding ("+" for a space) and MiniStack's
// ("%20"); keys XML cannot carry are recognised so that forget deletes
// them one by one. Guards the prefix source, forget and the sweep.
func TestListedKeysDecode(t *testing.T) {
	tests := []struct{ listed, want string }{
		{"ctl%01char.txt", "ctl\x01char.txt"},
		{"space+name.txt", "space name.txt"},        // S3
		{"space%20name.txt", "space name.txt"},      // MiniStack
		{"plus%2Bsign.txt", "plus+sign.txt"},        // both
		{"pct%2541.txt", "pct%41.txt"},              // a literal %41
		{"na%C3%AFve/%E6%97%A5.txt", "naïve/日.txt"}, // non-ASCII, "/" kept
		{"tab%09here", "tab\there"},
	}
	for _, tt := range tests {
		got, err := DecodeListedKey(tt.listed)
		if err != nil || got != tt.want {
			t.Errorf("DecodeListedKey(%q) = %q %v, want %q", tt.listed, got, err, tt.want)
		}
	}
	if _, err := DecodeListedKey("bad%zz"); err == nil {
		t.Error("DecodeListedKey(bad%zz): no error")
	}
	safe := map[string]bool{"plain": true, "tab\there": true, "line\nbreak\r": true, "naïve 日本": true, "ctl\x01": false, "nul\x00": false, "esc\x1b": false, "\uFFFE": false, "\uFFFF": false}
	for key, want := range safe {
		if got := xmlSafe(key); got != want {
			t.Errorf("xmlSafe(%q) = %v, want %v", key, got, want)
		}
	}
}

// The adapter is the submit engine's store of parts (a compile-time
// check, kept in a test so that the adapter imports no engine).
var (
	_ submit.PartBlobs     = (*Store)(nil)
	_ submit.BucketRegions = (*Store)(nil)
)
