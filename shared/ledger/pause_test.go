package ledger

import (
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
)

// TestPausedSummary guards a report's pauses: none for a run that never
// paused; the ended pauses' time as the store summed it; a pause still
// standing at the run's end (a cancel while paused) counted to the end
// and named the last, ended by no one.
func TestPausedSummary(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	end := t0.Add(10 * time.Minute)
	if s := (Batch{}).PausedSummary(end); s != nil {
		t.Errorf("a run that never paused: %+v, want none", *s)
	}
	last := &api.PauseSpan{By: api.PauseByCaller, Since: t0, Until: t0.Add(time.Minute), EndedBy: api.PauseByCaller}
	var b Batch
	b.Pauses, b.PausedMs, b.LastPause = 2, 95_500, last
	s := b.PausedSummary(end)
	if s == nil || s.Pauses != 2 || s.Seconds != 95.5 || s.Last != last {
		t.Errorf("two ended pauses: %+v, want 2 pauses, 95.5 s, the stored last", s)
	}
	b.Pauses = 3
	b.Pause = &api.Pause{By: api.PauseByOutage, Since: end.Add(-30 * time.Second), Class: "http 502", Error: "HTTP 502", Probes: 1}
	s = b.PausedSummary(end)
	want := api.PauseSpan{By: api.PauseByOutage, Since: end.Add(-30 * time.Second), Until: end, Class: "http 502", Error: "HTTP 502", Probes: 1}
	if s == nil || s.Pauses != 3 || s.Seconds != 125.5 || s.Last == nil || *s.Last != want {
		t.Errorf("a pause standing at the end: %+v, want 3 pauses, 125.5 s, the standing one last to the end", s)
	}
	var old Batch // a row written before the pauses' time was kept
	old.Pauses = 1
	if s := old.PausedSummary(end); s == nil || s.Pauses != 1 || s.Seconds != 0 || s.Last != nil {
		t.Errorf("an old row's run: %+v, want 1 pause, no time, no last", s)
	}
}
