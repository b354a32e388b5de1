package api

import "testing"

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		noun string
		want string
	}{
		{0, "item", "0 items"},
		{1, "item", "1 item"},
		{2, "item", "2 items"},
		{1, "corrected item", "1 corrected item"},
		{3, "corrected item", "3 corrected items"},
		{1, "failure", "1 failure"},
		{2, "batch", "2 batches"},
		{2, "entry", "2 entries"},
		{2, "day", "2 days"},
		{2, "class", "2 classes"},
	} {
		if got := Count(tc.n, tc.noun); got != tc.want {
			t.Errorf("Count(%d, %q) = %q, want %q", tc.n, tc.noun, got, tc.want)
		}
	}
}
