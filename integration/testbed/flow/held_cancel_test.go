package flow

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// A cancel while another delivery holds a pack (one of its items runs
// its retry) cannot wake the pack's suspended item: the wake gives up on
// the live lease, and the holder's own write moves on only the items it
// held itself. The item then has no message: before the finalize tick
// settled what a stop's wake left, the cancelled run never ended (a
// second cancel was needed, and nothing told the caller so). Now the
// next tick wakes it, and it ends cancelled, never called again.
func TestMemCancelWhileAPackIsBusyEndsAtTheTick(t *testing.T) {
	ctx := context.Background()
	const n = 7 // one pack (the rig's chunks hold 7)
	started, release := make(chan struct{}), make(chan struct{})
	r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		switch req.Key {
		case api.PositionalKey(0):
			return pipeline.Result{}, pipeline.Suspend("awaiting approval", time.Time{})
		case api.PositionalKey(1):
			if req.Attempt == 1 {
				return pipeline.Result{}, errors.New("HTTP 503: try later")
			}
			close(started)
			<-release
		}
		return pipeline.Result{Output: []byte(`{"ok":true}`)}, nil
	})
	r.wakeHeld()
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "b", Pipeline: "counted", Source: api.SourceSpec{Items: items(n)}, ItemsPerMessage: 10, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	for round := 0; r.callsOf(api.PositionalKey(1)) == 0; round++ {
		if round > 5 {
			t.Fatal("item 1 never called")
		}
		ds := r.queue.take()
		failed := r.worker.Handle(ctx, ds)
		for _, d := range ds {
			if slices.Contains(failed, d.MessageID) {
				d.ReceiveCount++
				r.queue.put([]worker.Delivery{d})
			}
		}
	}
	if it := memItem(t, r, "b", api.PositionalKey(0)); it.Outcome != api.OutcomeSuspended {
		t.Fatalf("item 0: %s, want suspended", it.Outcome)
	}
	// Item 1's retry: its delivery holds the pack while it runs.
	retry := r.queue.take()
	done := make(chan struct{})
	go func() { defer close(done); r.worker.Handle(ctx, retry) }()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatalf("item 1's retry never started (%d messages)", len(retry))
	}
	if _, err := r.ctl.Cancel(ctx, "b"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	close(release)
	<-done
	r.drain(t, ctx, 1)
	if it := memItem(t, r, "b", api.PositionalKey(0)); it.Outcome != api.OutcomeSuspended || it.Hold == nil || it.Hold.Woken != "" {
		t.Fatalf("item 0 after the cancel: %s (hold %+v); want still suspended, not woken (the case under test)", it.Outcome, it.Hold)
	}
	if _, err := r.fin.Finalize(ctx, "b", 1); !errors.Is(err, api.ErrNotFinished) {
		t.Fatalf("finalize before the tick: %v; want not finished (item 0 held)", err)
	}
	calls := r.callsOf(api.PositionalKey(0))
	if _, err := r.fin.Tick(ctx); err != nil {
		t.Fatalf("tick: %v", err)
	}
	r.drain(t, ctx, 1)
	fin, err := r.fin.Finalize(ctx, "b", 1)
	if err != nil {
		t.Fatalf("finalize after the tick: %v", err)
	}
	if c := fin.Report.Census; fin.Report.Status != api.StatusCancelled || c.Cancelled != 1 || c.Suspended != 0 || c.Total != n {
		t.Fatalf("report %s %+v; want cancelled, item 0 cancelled", fin.Report.Status, c)
	}
	if got := r.callsOf(api.PositionalKey(0)); got != calls {
		t.Errorf("item 0 called %d times after the tick, want none (a cancelled item settles uncalled)", got-calls)
	}
}

// A signal to a suspended item of a run being stopped is refused (409)
// saying why, where it answered that the item runs once more while the
// stop settled it cancelled, never called.
func TestSignalWhileTheRunStopsIsRefused(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{}, pipeline.Suspend("awaiting approval", time.Time{})
	})
	r.wakeHeld()
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "s", Pipeline: "counted", Source: api.SourceSpec{Items: items(3)}, ItemsPerMessage: 1}); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	if _, err := r.ctl.Cancel(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if page, err := r.ctl.Items(ctx, "s", api.OutcomeSuspended, "", 100); err != nil {
		t.Fatal(err)
	} else {
		if len(page.Items) == 0 {
			t.Fatal("no suspended item listed while the run stops")
		}
		for _, it := range page.Items {
			if !strings.HasPrefix(it.Next, "none: the run is stopping") {
				t.Errorf("%s listed suspended while the run stops, next %q; want none: the run is stopping", it.Key, it.Next)
			}
		}
	}
	calls := r.callsOf(api.PositionalKey(0))
	_, err := r.ctl.Signal(ctx, "s", api.PositionalKey(0), "", "", []byte(`1`))
	if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "stopping") {
		t.Fatalf("signal while the run stops: %v; want a conflict saying the run is stopping", err)
	}
	r.drain(t, ctx, 1)
	if got := r.callsOf(api.PositionalKey(0)); got != calls {
		t.Errorf("item 0 called %d more times, want none", got-calls)
	}
}
