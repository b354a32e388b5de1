package pipeline_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestCutTextBoundsErrorTexts guards the bounded-texts product line: an
// error text quoted on an item row, in a log, a listing or a result is at
// most the cap, valid UTF-8, cut on a rune boundary, and says how much was
// cut.
func TestCutTextBoundsErrorTexts(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		max      int
		want     string // exact result when set
		wantCut  bool
		wantHead string // the kept text starts with this
	}{
		{name: "short text unchanged", in: "HTTP 500: boom", max: 4096, want: "HTTP 500: boom"},
		{name: "exactly at the cap unchanged", in: strings.Repeat("a", 100), max: 100, want: strings.Repeat("a", 100)},
		{name: "ASCII cut", in: strings.Repeat("a", 400<<10), max: 4096, wantCut: true, wantHead: "aaaa"},
		{name: "two-byte runes never split", in: strings.Repeat("é", 5000), max: 4096, wantCut: true, wantHead: "éé"},
		{name: "four-byte runes never split", in: strings.Repeat("😀", 3000), max: 4097, wantCut: true, wantHead: "😀"},
		{name: "invalid UTF-8 replaced", in: "bad \xff\xfe byte", max: 4096, want: "bad \uFFFD byte"},
		{name: "tiny cap raised to 64", in: strings.Repeat("x", 200), max: 1, wantCut: true, wantHead: "xxxx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := pipeline.CutText(tt.in, tt.max)
			if tt.want != "" && got != tt.want {
				t.Fatalf("CutText = %q, want %q", got, tt.want)
			}
			if !utf8.ValidString(got) {
				t.Fatalf("CutText returned invalid UTF-8: %q", got[max(0, len(got)-40):])
			}
			if len(got) > max(tt.max, 64) {
				t.Fatalf("CutText returned %d bytes, more than %d", len(got), max(tt.max, 64))
			}
			if cut := strings.Contains(got, "bytes cut]"); cut != tt.wantCut {
				t.Fatalf("cut marker %v, want %v: %q", cut, tt.wantCut, got[max(0, len(got)-40):])
			}
			if !strings.HasPrefix(got, tt.wantHead) {
				t.Fatalf("CutText = %.40q…, want it to start with %q", got, tt.wantHead)
			}
			if tt.wantCut {
				kept := got[:strings.LastIndex(got, "… [")]
				if !strings.HasPrefix(tt.in, kept) || !strings.HasSuffix(got, fmt.Sprintf("… [%d bytes cut]", len(tt.in)-len(kept))) {
					t.Fatalf("kept %d bytes but the marker says %q", len(kept), got[len(kept):])
				}
			}
		})
	}
	if got := pipeline.ErrorText(errors.New(strings.Repeat("z", 1<<20))); len(got) > pipeline.MaxErrorTextBytes {
		t.Fatalf("ErrorText kept %d bytes, cap %d", len(got), pipeline.MaxErrorTextBytes)
	}
}

// TestRetryAfterIsTransientWithADelay guards the pipeline contract's
// "retry after d": a *RetryAfterError is transient, carries its delay
// (clamped to MaxRetryAfter) through wrapping, and a permanent wrap wins.
func TestRetryAfterIsTransientWithADelay(t *testing.T) {
	base := errors.New("HTTP 429")
	tests := []struct {
		name      string
		err       error
		wantClass pipeline.Class
		wantDelay time.Duration
		wantOK    bool
	}{
		{"plain", pipeline.RetryAfter(base, 20*time.Second), pipeline.ClassTransient, 20 * time.Second, true},
		{"wrapped", fmt.Errorf("call: %w", pipeline.RetryAfter(base, time.Minute)), pipeline.ClassTransient, time.Minute, true},
		{"clamped", pipeline.RetryAfter(base, 48*time.Hour), pipeline.ClassTransient, pipeline.MaxRetryAfter, true},
		{"negative is zero", pipeline.RetryAfter(base, -time.Second), pipeline.ClassTransient, 0, true},
		{"permanent wins", pipeline.Permanent(pipeline.RetryAfter(base, time.Second)), pipeline.ClassPermanent, time.Second, true},
		{"none", base, pipeline.ClassTransient, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c := pipeline.Classify(tt.err); c != tt.wantClass {
				t.Errorf("Classify = %s, want %s", c, tt.wantClass)
			}
			d, ok := pipeline.RetryDelay(tt.err)
			if d != tt.wantDelay || ok != tt.wantOK {
				t.Errorf("RetryDelay = %s, %v; want %s, %v", d, ok, tt.wantDelay, tt.wantOK)
			}
			if !errors.Is(tt.err, base) || tt.err.Error() != base.Error() && !strings.Contains(tt.err.Error(), base.Error()) {
				t.Errorf("%v does not wrap %v", tt.err, base)
			}
		})
	}
	if pipeline.RetryAfter(nil, time.Second) != nil {
		t.Error("RetryAfter(nil) is not nil")
	}
}
