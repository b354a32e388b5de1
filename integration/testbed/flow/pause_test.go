package flow

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/pipeline/webhook"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/streak"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

func TestPauseCheckSchedule(t *testing.T) {
	since := time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)
	want := []time.Duration{30 * time.Second, 90 * time.Second, 210 * time.Second, 450 * time.Second, 750 * time.Second, 1050 * time.Second, 1350 * time.Second}
	for i, w := range want {
		if got := api.PauseCheckAt(since, i+1).Sub(since); got != w {
			t.Errorf("check %d at +%s, want +%s", i+1, got, w)
		}
	}
	p := api.Pause{By: api.PauseByOutage, Since: since}
	tests := []struct {
		name     string
		now      time.Duration
		probes   int
		next     int
		nextAt   time.Duration
		due      bool
		dueProbe int
		probeOut bool // the last check's probe is out: wait for its answer, not the next check
	}{
		{"at the pause", 0, 0, 1, 30 * time.Second, false, 0, false},
		{"before the first check", 29 * time.Second, 0, 1, 30 * time.Second, false, 0, false},
		{"at the first check", 30 * time.Second, 0, 2, 90 * time.Second, true, 1, false},
		{"first probe claimed", 31 * time.Second, 1, 2, 90 * time.Second, false, 1, true},
		{"first probe claimed, long answered", 61 * time.Second, 1, 2, 90 * time.Second, false, 1, false},
		{"a missed check: the latest is due", 100 * time.Second, 0, 3, 210 * time.Second, true, 2, false},
		{"long after", 3 * time.Hour, 5, 39, 3*time.Hour + 150*time.Second, true, 38, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := p
			p.Probes = tt.probes
			now := since.Add(tt.now)
			n, at := p.NextCheck(now)
			if n != tt.next || at.Sub(since) != tt.nextAt {
				t.Errorf("next check %d at +%s, want %d at +%s", n, at.Sub(since), tt.next, tt.nextAt)
			}
			if got, due := p.ProbeDue(now); due != tt.due || got != tt.dueProbe {
				t.Errorf("probe due %d %v, want %d %v", got, due, tt.dueProbe, tt.due)
			}
			lo, hi := at.Sub(now)+api.CheckGrace, min(at.Sub(now)+2*api.CheckGrace, api.MaxResendDelay)
			if tt.probeOut {
				lo, hi = api.CheckGrace, 2*api.CheckGrace
			}
			if w := p.Wait(now); w < lo || w > hi {
				t.Errorf("wait %s, want within [%s, %s]", w, lo, hi)
			}
			caller := p
			caller.By = api.PauseByCaller
			if _, due := caller.ProbeDue(now); due {
				t.Error("a caller's pause never probes")
			}
		})
	}
}

func TestFailureClass(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"webhook status", &webhook.StatusError{Key: "k", StatusCode: 502}, "http 502"},
		{"throttled", pipeline.Throttled("http", "503", 0, errors.New("503")), "throttled http 503"},
		{"refused", fmt.Errorf("post: %w", &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), "connection refused"},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), "connection reset"},
		{"dns", &net.DNSError{Err: "no such host", Name: "x.example"}, "dns"},
		{"deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), "timeout"},
		{"anything else", errors.New("boom"), "transient"},
	}
	for _, tt := range tests {
		if got := streak.Class(tt.err); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// A paused batch's probe that fails transiently keeps the item in flight
// with the pause's wait and counts no attempt; one that succeeds ends as
// any success; a transient ending carries its class, a throttled one none.
func TestConcludePausedProbe(t *testing.T) {
	now := time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)
	err502 := &webhook.StatusError{Key: "k", StatusCode: 502}
	a := ledger.Attempt{Number: 3, RunAttempts: 3, MaxAttempts: 3, Ran: true, Err: err502, Paused: true, PauseWait: time.Minute, Now: now}
	e := ledger.Conclude(a)
	if !e.Retry() || !e.Paused || e.Wait != time.Minute || e.Class != "http 502" {
		t.Fatalf("probe at max attempts failing: %+v, want a paused retry after 1m of class http 502", e)
	}
	s := ledger.Ended(ledger.ItemState{Attempt: 3, FirstAttempt: 1, Outcome: api.OutcomeInFlight}, e, now)
	if s.RunAttempts() != 2 {
		t.Errorf("run attempts after a failed probe %d, want 2: the probe does not count", s.RunAttempts())
	}
	a.Paused = false
	if e := ledger.Conclude(a); e.Outcome != api.OutcomeFailed || e.Class != "http 502" {
		t.Errorf("unpaused at max attempts: %+v, want failed of class http 502", e)
	}
	a.Err = pipeline.Throttled("http", "503", 0, errors.New("503"))
	a.RunAttempts = 1
	if e := ledger.Conclude(a); !e.Throttled || e.Class != "" {
		t.Errorf("throttled: %+v, want a throttled retry without a class", e)
	}
	a.Err = nil
	a.Paused = true
	if e := ledger.Conclude(a); e.Outcome != api.OutcomeSucceeded || e.Class != "" {
		t.Errorf("probe answered: %+v, want succeeded", e)
	}
}

// recordingBus records the pause events put, and the Batch State Change
// events apart.
type recordingBus struct {
	mu      sync.Mutex
	types   []string
	events  []ledger.PauseEvent
	changes []api.StateChangeEvent
}

func (b *recordingBus) Put(_ context.Context, detailType string, detail any) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if detailType == api.DetailStateChange {
		b.changes = append(b.changes, detail.(api.StateChangeEvent))
		return nil
	}
	b.types = append(b.types, detailType)
	b.events = append(b.events, detail.(ledger.PauseEvent))
	return nil
}

// pauseRig is a rig whose pipeline fails with a 502 while down says so,
// counting the calls made while the batch was paused.
func pauseRig(t *testing.T, down func(now time.Time) bool) (*rig, *recordingBus) {
	var r *rig
	r = newRig(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		if down(r.clock.Now()) {
			return pipeline.Result{}, &webhook.StatusError{Key: req.Key, StatusCode: 502}
		}
		return pipeline.Result{Output: []byte(`{"ok":true}`)}, nil
	})
	bus := &recordingBus{}
	r.worker.Bus, r.ctl.Bus = bus, bus
	return r, bus
}

// step hands every queued message to the worker once, puts back the ones
// it failed, advances the clock by d and returns the batch row after.
func (r *rig) step(t *testing.T, ctx context.Context, id string, d time.Duration) ledger.Batch {
	t.Helper()
	ds := r.queue.take()
	failed := r.worker.Handle(ctx, ds)
	for _, dv := range ds {
		for _, f := range failed {
			if dv.MessageID == f {
				dv.ReceiveCount++
				r.queue.put([]worker.Delivery{dv})
			}
		}
	}
	r.clock.T = r.clock.T.Add(d)
	b, err := r.store.GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An outage of the downstream (every call a 502 for 3 minutes) pauses the
// batch after PauseAfter failed attempts in a row: no item starts and no
// attempt is used while it is paused, one item probes at each check, and
// the first probe after the outage unpauses it, and its downstream's pace
// starts again from pace.AdaptResume (the waiting units lease places in
// it, so they come back spread). Every item then succeeds, none failed,
// within its 3 attempts; the two events say so.
func TestOutagePausesProbesAndResumes(t *testing.T) {
	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			var start time.Time
			r, bus := pauseRig(t, func(now time.Time) bool { return now.Sub(start) < 3*time.Minute })
			start = r.clock.Now()
			id := fmt.Sprintf("outage-k%d", k)
			if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", MaxAttempts: 3, ItemsPerMessage: k,
				Source: api.SourceSpec{Items: items(60)}}); err != nil {
				t.Fatal(err)
			}
			var pausedAt, unpausedAt time.Time
			callsWhilePaused, probes := int64(0), 0
			for round := 0; ; round++ {
				if round > 500 {
					t.Fatal("the queue did not drain in 500 rounds")
				}
				before := r.totalCalls()
				was, _ := r.store.GetBatch(ctx, id)
				b := r.step(t, ctx, id, 5*time.Second)
				if was.Pause != nil {
					callsWhilePaused += r.totalCalls() - before
					probes = max(probes, b.Pauses) // one pause
					if b.Pause != nil {
						probes = b.Pause.Probes
					}
				}
				if b.Pause != nil && pausedAt.IsZero() {
					pausedAt = r.clock.Now()
					if b.Pause.By != api.PauseByOutage || b.Pause.Class != "http 502" {
						t.Errorf("pause %+v, want by outage, class http 502", *b.Pause)
					}
				}
				if was.Pause != nil && b.Pause == nil && unpausedAt.IsZero() {
					unpausedAt = r.clock.Now()
					probes = was.Pause.Probes + 1
				}
				if len(r.queue.msgs) == 0 {
					break
				}
			}
			if pausedAt.IsZero() || unpausedAt.IsZero() {
				t.Fatalf("paused at %v, unpaused at %v: want both", pausedAt, unpausedAt)
			}
			if unpausedAt.Before(start.Add(3 * time.Minute)) {
				t.Errorf("unpaused at +%s, during the outage", unpausedAt.Sub(start))
			}
			if callsWhilePaused > int64(probes) {
				t.Errorf("%d calls while paused with %d probes: only probes may call", callsWhilePaused, probes)
			}
			// The unpause started the downstream's pace again from
			// pace.AdaptResume in slow start, and the units that waited
			// leased their places in it: they came back spread.
			a, err := r.store.ReadAdapt(ctx, "pipeline:counted")
			if err != nil {
				t.Fatal(err)
			}
			if a.Limit != pace.AdaptResume || !a.Slow || a.Cut.Before(pausedAt) || a.Cut.After(unpausedAt) || a.Booked < 1 {
				t.Errorf("the downstream's adaptive row after the unpause: %+v; want %v a second in slow start from the unpause (between +%s and +%s), places booked",
					a, pace.AdaptResume, pausedAt.Sub(start), unpausedAt.Sub(start))
			}
			res, err := r.fin.Finalize(ctx, id, 1)
			if err != nil {
				t.Fatal(err)
			}
			if c := res.Report.Census; c.Succeeded != 60 || c.Failed != 0 {
				t.Fatalf("census %+v: want 60 succeeded, none failed", c)
			}
			if p := res.Report.Paused; p == nil || p.Pauses != 1 || p.Last == nil || p.Last.By != api.PauseByOutage || p.Last.EndedBy != api.PauseByOutage ||
				p.Last.Class == "" || p.Last.Probes != probes || p.Seconds <= 0 || p.Seconds > unpausedAt.Sub(pausedAt).Seconds()+60 {
				t.Errorf("report's pauses %+v: want 1 outage pause with its class and %d probes, ended by its probe, about %v", p, probes, unpausedAt.Sub(pausedAt))
			}
			if len(bus.types) != 2 || bus.types[0] != api.DetailPaused || bus.types[1] != api.DetailUnpaused ||
				bus.events[1].By != api.PauseByOutage || bus.events[0].EventID == bus.events[1].EventID {
				t.Errorf("events %v %+v: want Batch Paused then Batch Unpaused by the outage's probe", bus.types, bus.events)
			}
			t.Logf("paused at +%s, unpaused at +%s after %d probes; %d calls while paused",
				pausedAt.Sub(start), unpausedAt.Sub(start), probes, callsWhilePaused)
		})
	}
}

func (r *rig) totalCalls() int64 {
	var n int64
	r.calls.Range(func(_, v any) bool { n += v.(interface{ Load() int64 }).Load(); return true })
	return n
}

// A caller's pause: no item runs until unpause; a paused batch is not
// forgotten (it is running) nor swept; a paused batch can be cancelled or
// stopped on its threshold (its waiting items end cancelled) and a
// finished run is not paused; a new run starts unpaused. Pause and unpause are idempotent,
// answer a finished batch as it is and refuse a submitting one.
func TestCallerPauseUnpauseCancelResume(t *testing.T) {
	ctx := context.Background()
	r, bus := pauseRig(t, func(time.Time) bool { return false })
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "held", Pipeline: "counted", MaxAttempts: 3, ItemsPerMessage: 1,
		Source: api.SourceSpec{Items: items(20)}}); err != nil {
		t.Fatal(err)
	}
	b, err := r.ctl.Pause(ctx, "held")
	if err != nil || b.Pause == nil || b.Pause.By != api.PauseByCaller {
		t.Fatalf("pause: %+v, %v", b.Pause, err)
	}
	if again, err := r.ctl.Pause(ctx, "held"); err != nil || !again.Pause.Since.Equal(b.Pause.Since) {
		t.Fatalf("pause again: %+v, %v: want the same pause", again.Pause, err)
	}
	if err := r.ctl.Forget(ctx, "held"); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("forget of a paused batch: %v, want a conflict (it is running: cancel first)", err)
	}
	for range 3 {
		r.step(t, ctx, "held", 10*time.Minute)
	}
	r.clock.T = r.clock.T.Add(48 * time.Hour) // past the rig's 1-hour retention
	if res, err := r.sweep.RunOnce(ctx); err != nil || res.Deleted != 0 {
		t.Fatalf("sweep while paused: %+v, %v: a running batch has no retention to end", res, err)
	}
	if _, err := r.ctl.Get(ctx, "held"); err != nil {
		t.Fatalf("a paused batch after the sweep: %v", err)
	}
	if n := r.totalCalls(); n != 0 {
		t.Fatalf("%d calls while paused by a caller, want 0", n)
	}
	pausedAt, unpausedAt := b.Pause.Since, r.clock.Now()
	if b, err = r.ctl.Unpause(ctx, "held"); err != nil || b.Pause != nil {
		t.Fatalf("unpause: %+v, %v", b.Pause, err)
	}
	if b, err = r.ctl.Unpause(ctx, "held"); err != nil || b.Pause != nil {
		t.Fatalf("unpause again: %+v, %v", b.Pause, err)
	}
	// The unpause ramps the downstream back up (pace.AdaptResume, slow
	// start), once: the second unpause found the batch running.
	if a, err := r.store.ReadAdapt(ctx, "pipeline:counted"); err != nil || a.Limit != pace.AdaptResume || !a.Slow || !a.Cut.Equal(r.clock.Now()) {
		t.Errorf("the downstream's adaptive row after the unpause: %+v, %v; want %v a second in slow start from now", a, err, pace.AdaptResume)
	}
	r.step(t, ctx, "held", time.Second)
	r.drain(t, ctx, 1)
	res, err := r.fin.Finalize(ctx, "held", 1)
	if err != nil || res.Report.Census.Succeeded != 20 {
		t.Fatalf("finalize: %+v, %v", res.Report.Census, err)
	}
	// The report says what the pause took: once, from the pause to the
	// unpause (the second unpause ended nothing), by a caller both ways.
	if p := res.Report.Paused; p == nil || p.Pauses != 1 || p.Seconds != unpausedAt.Sub(pausedAt).Seconds() || p.Last == nil ||
		p.Last.By != api.PauseByCaller || p.Last.EndedBy != api.PauseByCaller || !p.Last.Since.Equal(pausedAt) || !p.Last.Until.Equal(unpausedAt) {
		t.Errorf("report's pauses: %+v (last %+v); want 1 pause of %v by a caller, ended by a caller", p, p.Last, unpausedAt.Sub(pausedAt))
	}
	if b, err = r.ctl.Pause(ctx, "held"); err != nil || b.Pause != nil || b.Status != api.StatusCompleted {
		t.Fatalf("pause of a finished batch: %s %+v, %v: want it as it ended", b.Status, b.Pause, err)
	}
	if len(bus.types) != 2 || bus.events[0].By != api.PauseByCaller || bus.events[1].Paused {
		t.Errorf("events %v: want Batch Paused, Batch Unpaused by a caller", bus.types)
	}
	// The same changes as Batch State Change events, each once (the
	// repeated pause and unpause change nothing), the pause's start in
	// both event ids.
	if c := bus.changes; len(c) != 2 || c[0].Change != api.ChangePaused || c[1].Change != api.ChangeUnpaused || c[1].UnpausedBy != api.PauseByCaller ||
		c[0].Pause == nil || c[1].Pause == nil || !c[0].Pause.Since.Equal(c[1].Pause.Since) || c[0].EventID == c[1].EventID {
		t.Errorf("state changes %+v: want paused, then unpaused by a caller", c)
	}

	// A threshold stop while paused (items in flight at the pause failed
	// past it): the stop wins, the waiting items end cancelled.
	zero := int64(0)
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "held-threshold", Pipeline: "counted", MaxAttempts: 3, ItemsPerMessage: 1,
		Threshold: api.Threshold{FailureCount: &zero}, Source: api.SourceSpec{Items: items(20)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ctl.Pause(ctx, "held-threshold"); err != nil {
		t.Fatal(err)
	}
	tb, _ := r.store.GetBatch(ctx, "held-threshold")
	if err := r.store.Stop(ctx, ledger.StopMark{BatchID: "held-threshold", Run: tb.Run, Status: api.StatusThresholdExceeded, Detail: "1 failures > 0 tolerated"}); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	res, err = r.fin.Finalize(ctx, "held-threshold", 1)
	if err != nil || res.Report.Status != api.StatusThresholdExceeded || res.Report.Census.Cancelled != 20 {
		t.Fatalf("threshold stop while paused: %s %+v, %v: want threshold_exceeded, 20 cancelled", res.Report.Status, res.Report.Census, err)
	}
	// The pause stood at the run's end: counted to it, ended by no one.
	if p := res.Report.Paused; p == nil || p.Pauses != 1 || p.Last == nil || p.Last.EndedBy != "" || !p.Last.Until.Equal(res.Report.FinishedAt) ||
		p.Seconds != res.Report.FinishedAt.Sub(p.Last.Since).Seconds() {
		t.Errorf("report's pauses of a run that ended paused: %+v; want 1 pause to the run's end", p)
	}

	// Cancel while paused: the waiting items end cancelled.
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "held-cancel", Pipeline: "counted", MaxAttempts: 3, ItemsPerMessage: 10,
		Source: api.SourceSpec{Items: items(20)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ctl.Pause(ctx, "held-cancel"); err != nil {
		t.Fatal(err)
	}
	r.step(t, ctx, "held-cancel", time.Minute)
	if _, err := r.ctl.Cancel(ctx, "held-cancel"); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	res, err = r.fin.Finalize(ctx, "held-cancel", 1)
	if err != nil || res.Report.Status != api.StatusCancelled || res.Report.Census.Cancelled != 20 {
		t.Fatalf("cancel while paused: %s %+v, %v: want cancelled, 20 cancelled", res.Report.Status, res.Report.Census, err)
	}
	b, _ = r.store.GetBatch(ctx, "held-cancel")
	if b.Pause != nil {
		t.Errorf("a finished run is still paused: %+v", *b.Pause)
	}
	b, err = r.sub.Resume(ctx, "held-cancel")
	if err != nil || b.Pause != nil || b.Pauses != 0 {
		t.Fatalf("resume: %+v %d, %v: want a run not paused", b.Pause, b.Pauses, err)
	}
	r.drain(t, ctx, 1)
	if res, err = r.fin.Finalize(ctx, "held-cancel", 2); err != nil || res.Report.Census.Succeeded != 20 {
		t.Fatalf("run 2: %+v, %v", res.Report.Census, err)
	}
}

// The finalize tick counts the rows of a run whose counters stand still
// (a lost counter write) at every tick, but a paused run's only once per
// PausedStall: its items wait for the pause, and counting them every
// five minutes would read every row of a large batch for nothing.
func TestTickCountsAPausedRunHourly(t *testing.T) {
	ctx := context.Background()
	r, _ := pauseRig(t, func(time.Time) bool { return false })
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "tick-paused", Pipeline: "counted", MaxAttempts: 3, ItemsPerMessage: 1,
		Source: api.SourceSpec{Items: items(5)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ctl.Pause(ctx, "tick-paused"); err != nil {
		t.Fatal(err)
	}
	start := r.clock.Now()
	for _, tc := range []struct {
		at      time.Duration
		checked int
	}{{6 * time.Minute, 0}, {30 * time.Minute, 0}, {61 * time.Minute, 1}, {66 * time.Minute, 0}, {121 * time.Minute, 1}} {
		r.clock.T = start.Add(tc.at)
		res, err := r.fin.Tick(ctx)
		if err != nil || res.Checked != tc.checked || res.Finalized != 0 {
			t.Errorf("paused, counters still for %s: %+v, %v; want %d checked, none finalized", tc.at, res, err, tc.checked)
		}
	}
	if _, err := r.ctl.Unpause(ctx, "tick-paused"); err != nil {
		t.Fatal(err)
	}
	r.clock.T = start.Add(126 * time.Minute)
	if res, err := r.fin.Tick(ctx); err != nil || res.Checked != 1 {
		t.Errorf("unpaused, counters still: %+v, %v; want the run checked", res, err)
	}
}

// An outage pause's probe that the downstream answers with a suspension
// (not a transient failure) ends the pause, as any answer does: before,
// only a terminal ending counted, so each later probe suspended one more
// item and the run stayed paused.
func TestOutageProbeAnsweredBySuspensionEndsThePause(t *testing.T) {
	ctx := context.Background()
	var r *rig
	var start time.Time
	r = newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		if r.clock.Now().Sub(start) < 3*time.Minute {
			return pipeline.Result{}, &webhook.StatusError{Key: req.Key, StatusCode: 502}
		}
		return pipeline.Result{}, pipeline.Suspend("awaiting approval", time.Time{})
	})
	r.wakeHeld()
	start = r.clock.Now()
	const id = "probe-suspends"
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", MaxAttempts: 3, ItemsPerMessage: 1,
		Source: api.SourceSpec{Items: items(60)}}); err != nil {
		t.Fatal(err)
	}
	paused, probes := false, 0
	for round := 0; round < 200; round++ {
		was, _ := r.store.GetBatch(ctx, id)
		before := r.totalCalls()
		b := r.step(t, ctx, id, 5*time.Second)
		paused = paused || b.Pause != nil
		if was.Pause != nil && r.clock.Now().Sub(start) > 3*time.Minute && r.totalCalls() > before {
			probes++ // a probe the downstream answered
		}
		if paused && b.Pause == nil {
			break
		}
	}
	b, _ := r.store.GetBatch(ctx, id)
	switch {
	case !paused:
		t.Fatal("never paused on the outage")
	case b.Pause != nil:
		t.Fatalf("still paused (%+v) after %d probes answered with a suspension; want unpaused by the first", *b.Pause, probes)
	case probes != 1:
		t.Errorf("%d probes answered after the outage before the pause ended, want 1", probes)
	}
}

// TestCallerPauseOverAnOutageKeepsItsTime guards a caller's pause that
// replaces an outage pause: the outage's time is kept (its 100 s, then
// the caller's 20 s), it is the last pause until the caller's ends, and
// the live estimate leaves both out.
func TestCallerPauseOverAnOutageKeepsItsTime(t *testing.T) {
	ctx := context.Background()
	r, _ := pauseRig(t, func(time.Time) bool { return false })
	const id = "outage-then-caller"
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", MaxAttempts: 3, ItemsPerMessage: 1,
		Source: api.SourceSpec{Items: items(20)}}); err != nil {
		t.Fatal(err)
	}
	b, _ := r.store.GetBatch(ctx, id)
	outageAt := r.clock.Now()
	if err := r.store.Pause(ctx, ledger.PauseMark{BatchID: id, Run: b.Run, By: api.PauseByOutage, Class: "http 502", Error: "502", Now: outageAt}); err != nil {
		t.Fatal(err)
	}
	r.clock.T = r.clock.T.Add(100 * time.Second)
	if v, err := r.ctl.Pause(ctx, id); err != nil || v.Pause == nil || v.Pause.By != api.PauseByCaller {
		t.Fatalf("a caller's pause over the outage's: %+v, %v", v.Pause, err)
	}
	b, _ = r.store.GetBatch(ctx, id)
	if s := b.PausedSummary(r.clock.Now()); s == nil || s.Pauses != 2 || s.Seconds != 100 || s.Last == nil || s.Last.By != api.PauseByCaller {
		t.Errorf("while the caller's pause stands: %+v; want 2 pauses, 100 s so far, the caller's standing", s)
	}
	r.clock.T = r.clock.T.Add(20 * time.Second)
	if _, err := r.ctl.Unpause(ctx, id); err != nil {
		t.Fatal(err)
	}
	b, _ = r.store.GetBatch(ctx, id)
	s := b.PausedSummary(r.clock.Now())
	if s == nil || s.Pauses != 2 || s.Seconds != 120 || s.Last == nil || s.Last.By != api.PauseByCaller || s.Last.EndedBy != api.PauseByCaller {
		t.Errorf("after the unpause: %+v (last %+v); want 2 pauses, 120 s, the caller's last", s, s.Last)
	}
}
