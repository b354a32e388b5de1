package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/lanebook"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/lifecycle"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// count adds the deliveries' terminal outcomes to their runs' counters
// and triggers finalize when a write completes the run: completion is
// detected without reading any counter. A batch whose threshold may stop
// the run early also has its failures judged, and the run stopped once
// they exceed the threshold. A lost write here only delays finalize until
// the scheduled tick: the census comes from the item rows.
//
// A run with counter lanes (Batch.CounterLanes) gets one CountLane write
// per message batch, whatever chunks its messages came from (countLanes);
// a run of a batch created before lanes, one CountChunk write per chunk
// (countChunks).
func (w *Worker) count(ctx context.Context, dones []done, weight int64) {
	type runKey struct {
		id  string
		run int
	}
	type sum struct {
		b        ledger.Batch
		outcomes map[api.Outcome]int64
		// spent is what the attempts of the deliveries reported spending
		// (done.attemptSpent), ended or not.
		cost, spent pipeline.CostSum
		health      health
		busy        time.Duration // the deliveries' done.busy
	}
	runs := map[runKey]*sum{}
	var order []runKey
	var chunked []done
	w.countWaits(ctx, dones)
	for _, d := range dones {
		switch {
		case d.outcome == "":
			continue // the live view's (countWaits)
		case d.items <= 0:
			continue // a message sent without its chunk: the tick counts it
		case d.batch.CounterLanes <= 0:
			if d.outcome.Terminal() {
				chunked = append(chunked, d)
			}
			continue
		}
		k := runKey{d.batch.ID, d.batch.Run}
		a := runs[k]
		if a == nil {
			a = &sum{b: d.batch, outcomes: map[api.Outcome]int64{}, cost: pipeline.CostSum{}, spent: pipeline.CostSum{}}
			runs[k] = a
			order = append(order, k)
		}
		a.health.add(d)
		a.busy += d.busy
		a.spent.Add(d.attemptSpent)
		if !d.outcome.Terminal() {
			continue // a retry or a hold: the pause's and the spend's, not the items'
		}
		a.outcomes[d.outcome] += weight
		a.cost.Add(d.cost)
	}
	for _, k := range order {
		a := runs[k]
		log := w.Log.With("batch_id", k.id, "run", k.run)
		w.countLanes(ctx, log, a.b, a.outcomes, a.cost, a.spent, a.health, a.busy)
		if ledger.SumOutcomes(a.outcomes) > 0 || len(a.spent) > 0 {
			w.judges().Budget(ctx, log, a.b)
			w.judges().Sample(ctx, log, a.b, true)
		}
	}
	w.countChunks(ctx, chunked, weight)
}

// countWaits adds the deliveries' items waiting for a retry (by the
// minute it is due), interrupted and timed-out attempts, and the items
// held and moved on (by held outcome) to their runs' wait
// counters: one CountWaits write per run, in a counter partition chosen
// at random. Only the live view reads them; a lost write loses its share.
func (w *Worker) countWaits(ctx context.Context, dones []done) {
	type runKey struct {
		id  string
		run int
	}
	waits := map[runKey]*ledger.WaitCount{}
	var order []runKey
	for _, d := range dones {
		if d.retryAt.IsZero() && !d.interrupted && !d.timedOut && d.heldBy == 0 {
			continue
		}
		k := runKey{d.batch.ID, d.batch.Run}
		c := waits[k]
		if c == nil {
			c = &ledger.WaitCount{BatchID: d.batch.ID, Run: d.batch.Run, Lane: rand.IntN(max(1, d.batch.CounterShards)), Due: map[int64]int64{}}
			waits[k] = c
			order = append(order, k)
		}
		if !d.retryAt.IsZero() {
			m := ledger.DueMinute(d.retryAt)
			c.Due[m]++
			switch {
			case d.throttled:
				if c.Throttled == nil {
					c.Throttled = map[int64]int64{}
				}
				c.Throttled[m]++
			case d.waitClass != "":
				if c.Causes == nil {
					c.Causes = map[string]ledger.WaitCause{}
				}
				w, ok := c.Causes[d.waitClass]
				if !ok {
					w = ledger.WaitCause{Error: pipeline.CutText(d.waitText, ledger.MaxWaitCauseBytes), Due: map[int64]int64{}}
				}
				w.Due[m]++
				c.Causes[d.waitClass] = w
			}
		}
		if d.interrupted {
			c.Interrupted++
		}
		if d.timedOut {
			c.TimedOut++
		}
		if d.heldBy != 0 {
			if c.Held == nil {
				c.Held = map[api.Outcome]int64{}
			}
			c.Held[d.heldAs] += d.heldBy
		}
	}
	for _, k := range order {
		c := waits[k]
		c.Token, c.Now = ledger.NewToken(), w.Clock.Now()
		if err := w.Store.CountWaits(ctx, *c); err != nil {
			w.Log.WarnContext(ctx, "count items waiting for a retry", "batch_id", k.id, "run", k.run, "error", err.Error())
		}
	}
}

// countLanes counts one message batch's terminal items of b's run: into
// one counter lane chosen at random among those this process does not
// know to be full, weighed by the room it knows each has left so that
// the lanes fill together (lanebook.Room.Pick), or, when they do not all
// fit, into as many as it takes. The write that fills a lane counts it
// done on the run row; the one that counts the last lane done triggers
// finalize.
//
// The early stop (a limited threshold, stop_on_threshold not false, no
// stop yet) reads each lane write's failures, a lower bound of the run's:
// the write whose lane's failures pass the threshold stops the run. So
// that failures spread over the lanes are seen too, every lane write that
// takes its lane's failures past a multiple of FailureQuantum adds those
// multiples to the run row's failures (another lower bound, at most
// lanes × (quantum − 1) ≤ tolerated/8 below the count), and the write
// that takes the run row past the threshold stops the run. A lane adds
// only its failures up to the tolerated count + 1 (past it the lane alone
// stopped the run), so the run row gets at most lanes × (8 × lanes + 2)
// failure writes in all, however fast items fail, and at most lanes + 1
// writes try to stop the run (items in flight at a stop finish anyway).
//
// The items' cost and spent sums go with the first of the writes that
// counts any of them, so that each is counted once, at most
// api.MaxCensusCostNames names per rollup (the rest folded, foldSum);
// a write the lane refuses for its names (a row past DynamoDB's 400 KB
// as a batch's items name ever more costs) is made again with its cost
// folded whole, so the items are counted. So does h, the
// attempts' health: an attempt answered ends the lane's failure-class
// streaks, else the transient failures add to them and the write that
// takes a streak past a multiple of PauseAfter pauses the batch
// (judgeStreaks). spent is what the message batch's attempts reported
// spending, ended or not (done.attemptSpent): a lane's s#{name} is the
// run's spend as its attempts happen, so that a budget sees the attempts
// of items still retrying or held. A message batch with no terminal item
// writes its streaks and that spend to a lane at random: one write, as a
// counted message batch's.
func (w *Worker) countLanes(ctx context.Context, log *slog.Logger, b ledger.Batch, outcomes map[api.Outcome]int64, cost, spent pipeline.CostSum, h health, busy time.Duration) {
	lanes := b.RunLanes()
	var busyMs int64 // only a sample without its estimate yet reads it
	if a := b.Approval; b.Run == 1 && a != nil && a.Estimate == nil {
		busyMs = busy.Milliseconds()
	}
	judge := b.Stop == "" && b.EarlyStop() && b.Threshold.Limited()
	var tolerated, quantum int64
	if judge {
		tolerated = b.Threshold.Tolerated(b.ItemCount)
		quantum = ledger.FailureQuantum(b.Threshold, b.ItemCount, lanes)
	}
	targets := make([]int64, max(1, lanes))
	for p := range targets {
		targets[p] = ledger.LaneTarget(b.RunItems(), lanes, p)
	}
	book := w.laneBook().Run(b.ID, b.Run, targets)
	left := make(map[api.Outcome]int64, len(outcomes))
	for o, n := range outcomes {
		left[o] = n
	}
	answered, streaks := h.answered, h.streaks()
	// At most api.MaxCensusCostNames names per rollup in one write, so
	// that its update expression stays within DynamoDB's 4 KB.
	cost, spent = cost.Fold(api.MaxCensusCostNames), spent.Fold(api.MaxCensusCostNames)
	folded := false
	if ledger.SumOutcomes(left) == 0 {
		if len(streaks) == 0 && len(spent) == 0 {
			return
		}
		p := rand.IntN(max(1, lanes))
		c := ledger.LaneCount{BatchID: b.ID, Run: b.Run, Lane: p, Target: ledger.LaneTarget(b.RunItems(), lanes, p),
			Outcomes: map[api.Outcome]int64{}, Spent: spent, Answered: answered, Streaks: streaks, BusyMs: busyMs, Token: ledger.NewToken(), Now: w.Clock.Now()}
		got, err := w.Store.CountLane(ctx, c)
		if ledger.Refused(err) && len(spent) > 0 {
			// Refused for its cost names, as an ended items' write may be:
			// made again with the spend folded whole, so that the streaks
			// and the spend are counted.
			c.Spent, c.Token = spent.Fold(0), ledger.NewToken()
			got, err = w.Store.CountLane(ctx, c)
		}
		if err != nil {
			log.WarnContext(ctx, "count failure streaks and the spend of retried or held attempts", "error", err.Error(), "lane", p)
			return
		}
		if len(streaks) > 0 {
			w.judgeStreaks(ctx, log, b, h, streaks, got.Streaks)
		}
		return
	}
	for try := 0; ledger.SumOutcomes(left) > 0; try++ {
		if try > 4*lanes+8 {
			log.WarnContext(ctx, "count progress: the lanes keep refusing the items", "items", ledger.SumOutcomes(left))
			return
		}
		p, room := book.Pick()
		if p < 0 {
			// Every lane is full and items are left: more items were
			// counted than the run has (a write counted twice). Finalize
			// counts the rows; it refuses while items are pending.
			log.ErrorContext(ctx, "count progress: every counter lane is full", "items", ledger.SumOutcomes(left))
			w.triggerFinalize(ctx, log, b)
			return
		}
		part := lanebook.Take(left, room)
		c := ledger.LaneCount{BatchID: b.ID, Run: b.Run, Lane: p, Target: ledger.LaneTarget(b.RunItems(), lanes, p),
			Outcomes: part, Failures: part[api.OutcomeFailed] + part[api.OutcomeQuarantined], Cost: cost, Spent: spent,
			Answered: answered, Streaks: streaks, BusyMs: busyMs, Token: ledger.NewToken(), Now: w.Clock.Now()}
		got, err := w.Store.CountLane(ctx, c)
		if ledger.Refused(err) && !folded && len(cost)+len(spent) > 0 {
			// The row (400 KB) or the expression (4 KB) would pass
			// DynamoDB's limit with these names: count the items, their
			// cost folded under pipeline.FoldedCost.
			log.WarnContext(ctx, "count progress: the lane refused the cost names; counted folded", "error", err.Error(), "lane", p)
			cost, spent, folded = cost.Fold(0), spent.Fold(0), true
			c.Cost, c.Spent, c.Token = cost, spent, ledger.NewToken()
			got, err = w.Store.CountLane(ctx, c)
		}
		switch {
		case errors.Is(err, api.ErrConflict):
			book.Set(p, got.Room)
			lanebook.Give(left, part)
			continue
		case err != nil:
			// Unknown or unavailable: the counters stop short of the
			// run's items and the tick finishes the run.
			log.WarnContext(ctx, "count progress", "error", err.Error(), "lane", p)
			return
		}
		book.Set(p, c.Target-got.Done)
		cost, spent, busyMs = nil, nil, 0 // counted with this write
		if len(streaks) > 0 {
			w.judgeStreaks(ctx, log, b, h, streaks, got.Streaks)
		}
		answered, streaks = false, nil
		var rc ledger.RunCount
		if got.Done == c.Target {
			rc.LanesDone = 1
		}
		before := got.Failures - c.Failures
		if judge && c.Failures > 0 {
			// Only a lane's failures up to tolerated + 1 go to the run row:
			// past that the lane alone has stopped the run.
			upto := func(f int64) int64 { return min(f, tolerated+1) / quantum }
			rc.Failures = (upto(got.Failures) - upto(before)) * quantum
			if w.crossed(b, before, got.Failures) {
				w.stopOnThreshold(ctx, log, b, got.Failures)
				judge = false
			}
		}
		if rc.LanesDone == 0 && rc.Failures == 0 {
			continue
		}
		rc.BatchID, rc.Run, rc.Token, rc.Now = b.ID, b.Run, ledger.NewToken(), w.Clock.Now()
		run, err := w.Store.CountRun(ctx, rc)
		if err != nil {
			log.WarnContext(ctx, "count run progress", "error", err.Error())
			continue
		}
		if judge && rc.Failures > 0 && w.crossed(b, run.Failures-rc.Failures, run.Failures) {
			w.stopOnThreshold(ctx, log, b, run.Failures)
			judge = false
		}
		if rc.LanesDone > 0 && run.LanesDone == int64(lanes) {
			w.triggerFinalize(ctx, log, b)
		}
	}
}

// crossed reports whether failures counted going from before to after
// took the run past b's threshold.
func (w *Worker) crossed(b ledger.Batch, before, after int64) bool {
	return !b.Threshold.Judge(before, b.ItemCount).Exceeded && b.Threshold.Judge(after, b.ItemCount).Exceeded
}

// stopOnThreshold stops b's run: failures (a lower bound of the run's)
// exceed its threshold. Items not yet started end cancelled; without
// early stop finalize alone judges the threshold.
func (w *Worker) stopOnThreshold(ctx context.Context, log *slog.Logger, b ledger.Batch, failures int64) {
	v := b.Threshold.Judge(failures, b.ItemCount)
	err := lifecycle.StopRun(ctx, w.Store, b, b.Run, api.StatusThresholdExceeded, v.Detail)
	switch {
	case err == nil:
		log.WarnContext(ctx, "threshold exceeded: run stopping", "detail", v.Detail)
		w.wakeToSettle(ctx, log, b)
	case !errors.Is(err, api.ErrConflict):
		log.WarnContext(ctx, "stop run", "error", err.Error())
	}
}

// stopWakeTime bounds the wake of a stopped run's held items in the
// invocation that stopped it.
const stopWakeTime = 10 * time.Second

// wakeToSettle settles the held items of b's run, which this delivery
// has just stopped (held.Waker.Settle), within stopWakeTime. What it
// leaves (or an error) is logged; `bulkrun cancel` wakes it.
func (w *Worker) wakeToSettle(ctx context.Context, log *slog.Logger, b ledger.Batch) {
	if w.Wake == nil {
		return
	}
	res, err := w.Wake.Settle(ctx, b, stopWakeTime)
	if err != nil || !res.Done {
		log.WarnContext(ctx, "held items of the stopped run left held; bulkrun cancel settles them", "woken", res.Woken, "error", fmt.Sprint(err))
		return
	}
	if res.Woken > 0 {
		log.InfoContext(ctx, "held items of the stopped run woken to settle", "woken", res.Woken)
	}
}

func (w *Worker) triggerFinalize(ctx context.Context, log *slog.Logger, b ledger.Batch) {
	if err := w.Trigger.Finalize(ctx, b.ID, b.Run); err != nil {
		log.WarnContext(ctx, "trigger finalize", "error", err.Error())
	}
}

func (w *Worker) laneBook() *lanebook.Book { return made(&w.lanes) }

// countChunks is count for batches created before counter lanes: each
// chunk's terminal items go to the chunk's counter, one write per chunk
// per message batch; the write that completes a chunk adds it to the run
// row's chunks done, and the one that completes the last chunk triggers
// finalize. With the early stop armed, each write with failures also
// adds them to the run row and judges the total.
func (w *Worker) countChunks(ctx context.Context, dones []done, weight int64) {
	type chunkKey struct {
		id           string
		run          int
		first, items int64
	}
	type sum struct {
		b           ledger.Batch
		outcomes    map[api.Outcome]int64
		failures    int64
		cost, spent pipeline.CostSum
	}
	agg := map[chunkKey]*sum{}
	var order []chunkKey
	for _, d := range dones {
		k := chunkKey{d.batch.ID, d.batch.Run, d.first, d.items}
		a := agg[k]
		if a == nil {
			a = &sum{b: d.batch, outcomes: map[api.Outcome]int64{}, cost: pipeline.CostSum{}, spent: pipeline.CostSum{}}
			agg[k] = a
			order = append(order, k)
		}
		a.outcomes[d.outcome] += weight
		if d.outcome == api.OutcomeFailed || d.outcome == api.OutcomeQuarantined {
			a.failures += weight
		}
		a.cost.Add(d.cost)
		a.spent.Add(d.spent)
	}
	for _, k := range order {
		a := agg[k]
		log := w.Log.With("batch_id", k.id, "run", k.run)
		judge := a.failures > 0 && a.b.Stop == "" && a.b.EarlyStop() && a.b.Threshold.Limited()
		c, err := w.Store.CountChunk(ctx, ledger.ChunkCount{BatchID: k.id, Run: k.run, First: k.first, Items: k.items,
			Chunks: a.b.RunChunks(), Shards: max(1, a.b.CounterShards), Outcomes: a.outcomes, Failures: a.failures,
			RunFailures: judge, Cost: a.cost, Spent: a.spent, Now: w.Clock.Now()})
		if err != nil {
			log.WarnContext(ctx, "count progress", "error", err.Error())
			continue
		}
		if judge && a.b.Threshold.Judge(c.Failures, a.b.ItemCount).Exceeded {
			w.stopOnThreshold(ctx, log, a.b, c.Failures)
		}
		if c.RunDone {
			w.triggerFinalize(ctx, log, a.b)
		}
	}
}
