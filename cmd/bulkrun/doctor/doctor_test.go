package doctor

import (
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// TestDoctorNamesABatchThatDoesNotMove: doctor's batches check names a
// running batch whose live view calls it stalled (no item ended for
// longer than a call can run while items are in flight), with how long
// and the command that lists those items; one that moves, or is younger
// than three finalize ticks, it leaves alone; every item done without a
// report, or items left with no message in the queues, it names as
// before.
func TestDoctorNamesABatchThatDoesNotMove(t *testing.T) {
	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	view := func(pending, inFlight int64, live *api.LiveView) wire.BatchView {
		return wire.BatchView{Batch: api.Batch{ID: "b1", Status: api.StatusRunning},
			Census: &api.Census{Pending: pending, InFlight: inFlight}, Live: live}
	}
	for _, tt := range []struct {
		name   string
		v      wire.BatchView
		age    time.Duration
		queued int
		want   string
	}{
		{"moving", view(0, 40, &api.LiveView{InFlight: 40, LastProgressAt: now.Add(-time.Second)}), time.Hour, 40, ""},
		{"stalled: no item ended for 7 minutes", view(0, 40, &api.LiveView{InFlight: 40, LastProgressAt: now.Add(-7 * time.Minute), Stalled: true}), 8 * time.Minute, 40,
			"no item ended for 7m0s, 40 items in flight: bulkrun items b1 --outcome in_flight"},
		{"every item done, no report", view(0, 0, &api.LiveView{}), 20 * time.Minute, 0,
			"every item done, no report: see the finalize-tick alarms"},
		{"every item done, young", view(0, 0, &api.LiveView{}), 5 * time.Minute, 0, ""},
		{"items left, queues empty", view(10, 5, &api.LiveView{InFlight: 5, LastProgressAt: now}), 20 * time.Minute, 0,
			"15 items left, no message in the queues: bulkrun resume b1"},
		{"items left, queues unknown", view(10, 5, &api.LiveView{InFlight: 5, LastProgressAt: now}), 20 * time.Minute, -1, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := notMoving(tt.v, tt.age, tt.queued, now); got != tt.want {
				t.Errorf("notMoving = %q, want %q", got, tt.want)
			}
		})
	}
}
