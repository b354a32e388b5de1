package api

import (
	"strings"
	"testing"
)

// TestNextMoveOfAFailedItem: a failed or quarantined item's next move
// waits for the run's end only while the run goes; once it ended, the
// resume can come at once.
func TestNextMoveOfAFailedItem(t *testing.T) {
	for _, c := range []struct {
		o     Outcome
		ended bool
		want  string
	}{
		{OutcomeFailed, false, "correct its input (bulkrun correct) or resume the batch once its run ends"},
		{OutcomeFailed, true, "correct its input (bulkrun correct) or resume the batch (bulkrun resume)"},
		{OutcomeQuarantined, false, "release it (bulkrun release) and resume the batch once its run ends"},
		{OutcomeQuarantined, true, "release it (bulkrun release) and resume the batch (bulkrun resume)"},
		{OutcomeSucceeded, true, ""},
	} {
		if got := NextMove(c.o, nil, c.ended); got != c.want {
			t.Errorf("NextMove(%s, ended %v) = %q, want %q", c.o, c.ended, got, c.want)
		}
	}
	if got := NextMove(OutcomeWithheld, &Hold{Subject: "secret:x"}, true); !strings.Contains(got, "bulkrun lift") {
		t.Errorf("withheld: %q, want the lift named", got)
	}
}
