package contactsheet

import "testing"

func TestCut(t *testing.T) {
	tests := []struct {
		name      string
		s         string
		n         int
		wantStart string // cutStart
		wantEnd   string // cutEnd
	}{
		{"fits", "cat.png", 13, "cat.png", "cat.png"},
		{"exact", "abcdefghijklm", 13, "abcdefghijklm", "abcdefghijklm"},
		{"long", "images/photo-0042.png", 13, "..to-0042.png", "images/phot.."},
		{"runes, not bytes", "été/tête-à-tête.png", 10, "..tête.png", "été/tête.."},
		{"no room", "abcdef", 2, "", ""},
		{"empty", "", 5, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cutStart(tt.s, tt.n); got != tt.wantStart {
				t.Errorf("cutStart(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.wantStart)
			}
			if got := cutEnd(tt.s, tt.n); got != tt.wantEnd {
				t.Errorf("cutEnd(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.wantEnd)
			}
		})
	}
}
