package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/fanout"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pacer"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/source"
	"github.com/bulkrun/bulkrun/shared/tracklines"
)

// Tracks: a batch with max_concurrency N runs on at most N tracks
// (shared/pace), each a fan-out message carrying a ledger.Track. A
// delivery of a track takes the track's fence row (Store.TakeTrack), then
// runs its units one at a time through the same loop as a unit message
// (dispatch: take, run, conclude, write): the due units of its retries
// first, then its slice's next unit, then, its slice done, the next slice
// the run's claim counter hands out (Store.ClaimSlice). A unit that must
// wait (a scheduled retry, a throttled call, AWS unavailable, a unit
// under another delivery's lease) waits in the track's retries instead
// of on the queue, so a waiting unit costs nothing; the track sends
// itself again (a new message, its Seq one higher) when its invocation
// nears its deadline margin, or to come back when its earliest retry is
// due or its batch's pause is next checked. Counted every
// Worker.ProgressEvery (TrackProgressEvery, 10 s, by default) and at the
// end of a delivery, and at most every trackCountUnits units' items
// ended.

// trackCountUnits bounds how many of a track's ended items wait to be
// counted: 100 units' (100 × K items), so that a track of short units
// (100 units a second and more) writes its counter lane about once a
// second, not at each unit, at every K (at 100 items, a track at K = 10
// wrote its lane once per 10 units, twice the lane writes of the same
// run without max_concurrency).
const trackCountUnits = 100

// trackRun is one delivery's run of a track.
type trackRun struct {
	w      *Worker
	b      ledger.Batch
	msg    *ledger.Message    // the track message: msg.Track is the state sent on
	floor  time.Time          // units due by then are due (the track was sent to come back then)
	parked bool               // the unit just dispatched waits in the track
	sendOn bool               // the track claimed a slice: sent on before it runs it
	sliced *unitMessage       // the unit sliceUnit read last (unread puts it back)
	lines  *tracklines.Reader // the current slice's lines from Track.Pos
}

// park puts m's unit into the track's retries, due after wait, with
// requeued its AWS-unavailable count; it reports the unit handled.
func (tr *trackRun) park(m *unitMessage, wait time.Duration, requeued int) bool {
	r := m.ref
	r.DueMs = tr.w.Clock.Now().Add(max(wait, 0)).UnixMilli()
	r.Requeued = requeued
	tr.msg.Track.Retries = append(tr.msg.Track.Retries, r)
	tr.parked = true
	return true
}

// lateNotLearned marks the rate leases the units of a track received
// again carry as not to be learned from (ledger.TrackRetry.RateLeadMs
// −1): they are late by the visibility timeout of a holder that died or
// lapsed, not by the queue's lag (pacer.Arrived learned 27.8 s from it in
// the flow bed). A lease a dead holder used is stale by now and leased
// again (pacer.Lease.Late); a token booking that passed is readied by
// pacer.Pacer.Overdue.
func lateNotLearned(rs []ledger.TrackRetry) {
	for i := range rs {
		if rs[i].RateAtUs != 0 {
			rs[i].RateLeadMs = -1
		}
	}
}

// overdue readies the token bookings of the units waiting in tr, received
// again (pacer.Pacer.Overdue); unread, they are spent as they come.
func (tr *trackRun) overdue(ctx context.Context, log *slog.Logger) {
	rs := tr.msg.Track.Retries
	ms := make([]unitMessage, len(rs))
	cs := make([]pacer.Carried, len(rs))
	for i := range rs {
		ms[i] = unitMessage{track: tr, ref: rs[i]}
		cs[i] = &ms[i]
	}
	if err := tr.w.pacing().Overdue(ctx, tr.b, cs); err != nil {
		log.WarnContext(ctx, "token budget not read; the track's passed bookings are spent as they come", "error", err.Error())
		return
	}
	for i := range rs {
		rs[i] = ms[i].ref
	}
}

// hold readies the pacing of every unit waiting in tr while the track
// waits for its batch's pause to end (pacer.Hold), as a unit's message
// waiting for it does, and returns the earliest start of the token
// bookings they keep (zero: none), for pacer.HoldWait: kept, the
// bookings that passed while the batch waited were spent as the track
// ran its units again, at once.
func (tr *trackRun) hold(now time.Time) time.Time {
	var first time.Time
	rs := tr.msg.Track.Retries
	for i := range rs {
		m := &unitMessage{track: tr, ref: rs[i]}
		if at := pacer.Hold(m, now); !at.IsZero() && (first.IsZero() || at.Before(first)) {
			first = at
		}
		rs[i] = m.ref
	}
	return first
}

// runTrack runs a delivery of a track of b (see above) and says whether
// it may be acknowledged.
func (w *Worker) runTrack(ctx context.Context, log *slog.Logger, b ledger.Batch, msg *ledger.Message, d Delivery, inv *invocation) bool {
	t := msg.Track
	now := w.Clock.Now()
	took, err := w.Store.TakeTrack(ctx, ledger.TrackTake{BatchID: b.ID, Run: b.Run, Track: t.Index, Seq: t.Seq, Holder: ledger.NewToken(), Now: now, Lease: w.Lease, Clear: t.Merged})
	switch {
	case errors.Is(err, api.ErrConflict) && took.Held.IsZero():
		log.InfoContext(ctx, "track sent again since; this send acknowledged", "seq", t.Seq)
		return true
	case errors.Is(err, api.ErrConflict):
		log.InfoContext(ctx, "track under another delivery's lease; retried later", "seq", t.Seq)
		w.delay(ctx, log, d, took.Held.Sub(now))
		return false
	case err != nil:
		return w.sendAgain(ctx, log, d, &msg.Requeued, func() ([]byte, error) { return msg.Body() }, "take the track", err)
	}
	tr := &trackRun{w: w, b: b, msg: msg, floor: time.UnixMilli(t.UntilMs).UTC()}
	t.UntilMs, t.Merged = 0, nil
	if d.ReceiveCount > 1 {
		// Received again: its holder may have died, its lease lapsed.
		lateNotLearned(t.Retries)
	}
	tr.merge(took.Handed)
	if d.ReceiveCount > 1 {
		tr.overdue(ctx, log)
	}
	defer tr.closeLines()
	if d.DeadLetter {
		return w.deadTrack(ctx, log, tr, d)
	}
	var dones []done
	moved := false // this delivery ran or settled a unit
	counted := w.Clock.Now()
	every := w.ProgressEvery
	if every == 0 {
		every = TrackProgressEvery
	}
	count := func() {
		if len(dones) > 0 {
			w.count(ctx, dones, 1)
			dones = nil
		}
		counted = w.Clock.Now()
	}
	est := time.Second // the longest a unit of this delivery took
	for {
		if dl, ok := ctx.Deadline(); ctx.Err() != nil || ok && time.Until(dl) < inv.margin+est {
			count()
			return w.sendTrack(ctx, log, tr, d, 0, moved)
		}
		cur := w.beforeCall(ctx, inv, b)
		if cur.Stop == "" && cur.Status.Finished() {
			count()
			log.InfoContext(ctx, "track of a finished run; acknowledged")
			return true
		}
		now := w.Clock.Now()
		if cur.Pause != nil && cur.Stop == "" {
			if _, due := cur.Pause.ProbeDue(now); !due {
				count()
				return w.sendTrack(ctx, log, tr, d, pacer.HoldWait(cur.Pause.Wait(now), tr.hold(now), now), moved)
			}
		}
		m, wait, err := tr.next(ctx, cur.Stop != "")
		switch {
		case errors.Is(err, api.ErrConflict):
			count()
			log.InfoContext(ctx, "track claimed a slice since this send; acknowledged", "seq", t.Seq, "claims", t.Claims)
			return true
		case err != nil:
			count()
			log.WarnContext(ctx, "track: next unit", "error", pipeline.ErrorText(err))
			return w.sendTrack(ctx, log, tr, d, w.unavailableDelay(t.Idle+1), moved)
		case m == nil && tr.sendOn:
			count()
			return w.sendTrack(ctx, log, tr, d, 0, true)
		case m == nil && wait > 0:
			count()
			return w.sendTrack(ctx, log, tr, d, wait, moved)
		case m == nil:
			handed, err := w.retireTrack(ctx, log, tr)
			switch {
			case len(handed) > 0:
				tr.merge(handed)
				continue
			case err != nil:
				// Not retired: a hand-off would wait on a row no delivery
				// takes. The track is sent on; a later delivery retires it.
				count()
				return w.sendTrack(ctx, log, tr, d, w.unavailableDelay(t.Idle+1), moved)
			}
			count()
			return true
		}
		if cur.Run == 1 && cur.Approval.Holds() && cur.Stop == "" && !m.sample {
			count()
			return w.holdTrack(ctx, log, tr, cur, m, d, moved)
		}
		m.track, tr.parked, m.oks = tr, false, inv.oks
		start := w.Clock.Now()
		// A unit that waited was reserved before: its take tries the
		// takeover first, as a redelivered message's does.
		redelivered := 1
		if m.ref.DueMs > 0 {
			redelivered = 2
		}
		ack, dns := w.dispatch(ctx, log, cur, m, Delivery{MessageID: d.MessageID, ReceiveCount: redelivered}, inv)
		if !ack && !tr.parked {
			// Left to come back as a message would (a write fenced by a
			// later take, an outcome write that failed): it waits in the
			// track as long as a held unit does.
			tr.park(m, LiveLeaseRecheck, m.ref.Requeued)
		}
		est = max(est, w.Clock.Now().Sub(start))
		moved = true
		dones = append(dones, dns...)
		if len(dones) >= trackCountUnits*b.Pack() || every >= 0 && w.Clock.Now().Sub(counted) >= every {
			count()
		}
	}
}

// sendTrack sends the track on as a new message (Seq + 1) delivered after
// wait (at most api.MaxResendDelay; the earliest of its retries, or its
// batch's next pause check, when later) and says whether this delivery
// may be acknowledged. moved: this delivery ran or settled a unit;
// sends in a row without are bounded by ledger.MaxResends, past which the
// track waits on this message (a receive per wait), so that a track that
// never moves ends in the dead-letter queue.
func (w *Worker) sendTrack(ctx context.Context, log *slog.Logger, tr *trackRun, d Delivery, wait time.Duration, moved bool) bool {
	t := tr.msg.Track
	wait = min(max(wait, 0), api.MaxResendDelay)
	cut := wait > pace.TrackLookEvery
	switch {
	case moved:
		t.Idle, t.Looks = 0, 0
	case cut:
		// A wait cut to look for hand-offs counts as the share of an idle
		// send its time is.
		if t.Looks++; t.Looks >= int(api.MaxResendDelay/pace.TrackLookEvery) {
			t.Idle, t.Looks = t.Idle+1, 0
		}
	default:
		t.Idle++
	}
	wait = min(wait, pace.TrackLookEvery)
	if t.Idle > ledger.MaxResends {
		log.WarnContext(ctx, "track sent again too often without moving; it waits on its message", "idle", t.Idle)
		if err := w.Queue.Delay(ctx, d.ReceiptHandle, wait); err != nil {
			log.WarnContext(ctx, "delay message", "error", err.Error())
		}
		return false
	}
	t.Seq++
	if wait > 0 {
		t.UntilMs = w.Clock.Now().Add(wait).UnixMilli()
	}
	body, err := tr.msg.Body()
	if err == nil {
		err = w.Queue.Requeue(ctx, body, wait)
	}
	if err != nil {
		// Unsent: this delivery comes back after its visibility timeout
		// and runs the track from where this one took it.
		log.WarnContext(ctx, "send the track on", "error", err.Error())
		return false
	}
	w.Metrics.Resent(tr.b.Pipeline, "track", tr.b.ID, tr.b.Run)
	// Where it goes on: its slice, and the manifest index of the slice's
	// next unit once the slice was read (a slice just claimed is read by
	// the next delivery).
	args := []any{"seq", t.Seq, "retry_in_ms", wait.Milliseconds(), "retries", len(t.Retries), "slice", t.Slice}
	if t.Span.Length > 0 {
		args = append(args, "next_index", t.At)
	}
	log.InfoContext(ctx, "track sent on", args...)
	return true
}

// retireTrack ends a track whose units all ended: its fence row moves
// past every send of it (Seq + 1), so that a duplicate of its message, or
// its run's fan-out sent again, finds it stale instead of waiting for the
// lease of a delivery that is gone, and the row becomes a slot for the
// run's woken units (Store.TakeTrackSlot). A track that units were handed
// to since its take is not retired: it answers them, to run first.
//
// It answers the hand-offs that refused the retire, or an error when the
// track was not retired for another reason (AWS unavailable: the caller
// sends the track on, so that its row does not take hand-offs no
// delivery will run); a later send having taken the row is no error.
func (w *Worker) retireTrack(ctx context.Context, log *slog.Logger, tr *trackRun) ([]ledger.TrackHanded, error) {
	t := tr.msg.Track
	took, err := w.Store.TakeTrack(ctx, ledger.TrackTake{BatchID: tr.b.ID, Run: tr.b.Run, Track: t.Index, Seq: t.Seq + 1, Holder: ledger.TrackRetired, Now: w.Clock.Now(), Clear: t.Merged})
	switch {
	case err != nil && len(took.Handed) > 0:
		log.InfoContext(ctx, "track not retired: units were handed to it", "seq", t.Seq, "handed", len(took.Handed))
		return took.Handed, nil
	case errors.Is(err, api.ErrConflict) && took.Held.IsZero():
		log.InfoContext(ctx, "track taken by a later send; this delivery ends", "seq", t.Seq)
		return nil, nil
	case err != nil:
		log.WarnContext(ctx, "retire the track; sent on to retire it later", "error", err.Error())
		return nil, err
	}
	log.InfoContext(ctx, "track done: no slice left to claim", "seq", t.Seq)
	return nil, nil
}

// merge takes the units handed to the track (Store.HandToTrack) into its
// retries, due now, each hand-off once (a unit that waits in them
// already is made due now, not added again), and records the hand-offs
// in Merged, for the next take to remove from the fence row. Handed
// units may take the track past pace.MaxTrackRetries, by at most
// ledger.MaxHandoffs: each is a woken unit that runs next.
func (tr *trackRun) merge(handed []ledger.TrackHanded) {
	t := tr.msg.Track
	now := tr.w.Clock.Now().UnixMilli()
	for _, h := range handed {
		if slices.Contains(t.Merged, h.ID) {
			continue
		}
		t.Merged = append(t.Merged, h.ID)
		if i := slices.IndexFunc(t.Retries, func(r ledger.TrackRetry) bool { return r.First == h.Unit.First }); i >= 0 {
			t.Retries[i].DueMs = min(t.Retries[i].DueMs, now) // woken: due now
			continue
		}
		u := h.Unit
		u.DueMs = now
		t.Retries = append(t.Retries, u)
	}
}

// next returns the track's next unit to run: its earliest retry due (any,
// when its run is stopping), else its slice's next unit, else, its slice
// done and fewer than pace.MaxTrackRetries units waiting, the first unit
// of the next slice it claims. With none to run now it returns the wait
// until its earliest retry is due (0: the track is done).
func (tr *trackRun) next(ctx context.Context, stopping bool) (*unitMessage, time.Duration, error) {
	t := tr.msg.Track
	now := tr.w.Clock.Now()
	if i := tr.due(now, stopping); i >= 0 {
		r := t.Retries[i]
		t.Retries = slices.Delete(t.Retries, i, i+1)
		m, err := tr.retryUnit(ctx, r)
		if err != nil {
			t.Retries = append(t.Retries, r)
		}
		return m, 0, err
	}
	for {
		if tr.sendOn {
			return nil, 0, nil
		}
		if t.Span.Length == 0 && !t.Done {
			if err := tr.loadSlice(ctx); err != nil {
				return nil, 0, err
			}
			continue
		}
		if len(t.Retries) >= pace.MaxTrackRetries {
			break // no new unit until a waiting one is due
		}
		if !t.Done && t.At < t.Span.FirstIndex+t.Span.Count {
			return tr.sliceUnit(ctx)
		}
		if t.Done {
			break
		}
		if err := tr.claim(ctx); err != nil {
			return nil, 0, err
		}
	}
	if len(t.Retries) == 0 {
		return nil, 0, nil
	}
	first := slices.MinFunc(t.Retries, func(a, b ledger.TrackRetry) int { return int(a.DueMs - b.DueMs) })
	return nil, max(first.Due().Sub(now), time.Second), nil
}

// due is the position of the earliest retry due at now (or at the time
// the track was sent to come back), or of any when stopping; −1: none.
func (tr *trackRun) due(now time.Time, stopping bool) int {
	at := max(now.UnixMilli(), tr.floor.UnixMilli())
	best := -1
	for i, r := range tr.msg.Track.Retries {
		if (stopping || r.DueMs <= at) && (best < 0 || r.DueMs < tr.msg.Track.Retries[best].DueMs) {
			best = i
		}
	}
	return best
}

// claim takes the run's next slice for the track (Store.ClaimSlice, its
// claim Claims + 1) from the claim counter it claims from (its home
// counter, pace.HomeCounter, first). An answer past the run's last slice
// drains that counter for the track, which moves on to the next counter
// in turn, reading it first (Store.SliceCounter) and passing it by when
// it is drained too and holds no claim of this one (a drained counter
// stays drained, so a delivery run again from the same message passes by
// the same counters and claims the same slices); once it found every
// counter drained it is done, and claims no more. The track is sent on
// (sendOn) before it runs a slice it claimed, so that every delivery of
// the track starts from its last claim or the one before, which
// ClaimSlice answers again.
func (tr *trackRun) claim(ctx context.Context) error {
	t := tr.msg.Track
	l, _, err := tr.layout(ctx)
	if err != nil {
		return err
	}
	counters := max(t.Counters, 1)
	for t.Drained < counters {
		if t.Drained > 0 {
			c, err := tr.w.Store.SliceCounter(ctx, ledger.SliceCounterRead{BatchID: tr.b.ID, Run: tr.b.Run, Track: t.Index, Counters: t.Counters, Counter: t.Counter})
			if err != nil {
				return fmt.Errorf("read a claim counter: %w", err)
			}
			if c.TrackClaim != t.Claims+1 && l.CounterDrained(t.Tracks, counters, t.Counter, c.Claims) {
				t.Drain()
				continue
			}
		}
		n, err := tr.w.Store.ClaimSlice(ctx, ledger.SliceClaim{BatchID: tr.b.ID, Run: tr.b.Run, Track: t.Index, Claim: t.Claims + 1,
			Counters: t.Counters, Counter: t.Counter, Now: tr.w.Clock.Now()})
		if err != nil {
			return fmt.Errorf("claim a slice: %w", err)
		}
		t.Claims++
		g := pace.ClaimNumber(t.Tracks, counters, t.Counter, n)
		switch _, _, _, empty, ok := l.Slice(g); {
		case !ok:
			t.Drain()
			continue
		case empty:
			continue // a number a short chunk leaves without items
		}
		tr.closeLines()
		t.Slice, t.Span, t.At, t.Pos = g, source.Chunk{}, 0, 0
		tr.sendOn = true
		return nil
	}
	t.Done = true
	return nil
}

// layout is the run's slice layout (pace.LayoutOf) from its fan-out
// chunks (the run's chunk table, read once per process) and the slice
// size the track carries (pace.SliceSizeItems of the run for a track
// sent before tracks carried it).
func (tr *trackRun) layout(ctx context.Context) (pace.Layout, []source.Chunk, error) {
	chunks, err := tr.w.trackBook().Chunks(ctx, tr.w.Blobs, tr.msg.ManifestKey)
	if err != nil {
		return pace.Layout{}, nil, err
	}
	spans := make([]pace.Span, len(chunks))
	for i, c := range chunks {
		spans[i] = pace.Span{First: c.FirstIndex, Count: c.Count}
	}
	size := tr.msg.Track.Size
	if size <= 0 {
		size = pace.SliceSizeItems(tr.b.Pack(), pace.SpanItems(spans), tr.b.MaxConcurrency)
	}
	return pace.LayoutOf(spans, size), chunks, nil
}

// loadSlice reads where the track's slice lies: its fan-out chunk (the
// run's chunk table) and its bytes (the chunk's slices, written by the
// first track that needs them); the chunk's first slice counts the chunk
// fanned out. A slice number past the run's last (a claim's answer, as a
// release before claim checked its answers sent it) drains the counter
// it came from, as claim does; an empty slice number is claimed past.
func (tr *trackRun) loadSlice(ctx context.Context) error {
	t := tr.msg.Track
	l, chunks, err := tr.layout(ctx)
	if err != nil {
		return err
	}
	ci, j, _, empty, ok := l.Slice(t.Slice)
	switch {
	case !ok && t.Slice >= int64(t.Tracks):
		t.Drain()
		return tr.claim(ctx)
	case !ok:
		t.Done = true
		return nil
	case empty:
		return tr.claim(ctx)
	}
	cuts, err := tr.w.trackBook().Slices(ctx, tr.w.Blobs, tr.msg.ManifestKey, chunks[ci], l.Size)
	if err != nil {
		return err
	}
	if j >= int64(len(cuts)) {
		return fmt.Errorf("slice %d of the chunk at %d: it has %d", j, chunks[ci].FirstIndex, len(cuts))
	}
	c := chunks[ci]
	tr.msg.Chunk = &c
	t.Span, t.At, t.Pos = cuts[j], cuts[j].FirstIndex, cuts[j].Offset
	if j == 0 {
		// The chunk's first slice started: its items count as fanned out
		// in the run (the live view's; once per chunk and run, whatever
		// the repeats).
		fc := fanout.CountOf(tr.b, c.FirstIndex, c.Count, tr.w.Clock.Now())
		if err := tr.w.Store.CountFanned(ctx, fc); err != nil {
			tr.w.Log.WarnContext(ctx, "count the chunk's items fanned out", "batch_id", tr.b.ID, "error", err.Error(), "first", c.FirstIndex)
		}
	}
	return nil
}

// sliceUnit reads the slice's next unit from the manifest (one ranged
// read per slice and delivery) and moves the track past it.
func (tr *trackRun) sliceUnit(ctx context.Context) (*unitMessage, time.Duration, error) {
	t := tr.msg.Track
	if tr.lines == nil {
		rc, err := tr.w.Blobs.OpenRange(ctx, tr.msg.ManifestKey, t.Pos, t.Span.Offset+t.Span.Length-t.Pos)
		if err != nil {
			return nil, 0, fmt.Errorf("read slice %d: %w", t.Slice, err)
		}
		tr.lines = tracklines.NewReader(rc, t.Pos)
	}
	k := int64(tr.b.Pack())
	n := min(k, t.Span.FirstIndex+t.Span.Count-t.At)
	m, err := tr.unit(*tr.msg.Chunk, t.At, n, tr.lines)
	if err != nil {
		tr.closeLines()
		return nil, 0, err
	}
	t.At, t.Pos = t.At+n, m.ref.Offset+m.ref.Length
	tr.sliced = m
	return m, 0, nil
}

// unread puts m, the unit next returned, back: a unit of the slice moves
// the track back to it (Track.At, Pos: the next delivery reads it again);
// any other waits in the track's retries, due after wait.
func (tr *trackRun) unread(m *unitMessage, wait time.Duration) {
	if tr.sliced != m {
		tr.park(m, wait, m.ref.Requeued)
		return
	}
	t := tr.msg.Track
	t.At, t.Pos = m.ref.First, m.ref.Offset
	tr.sliced = nil
	tr.closeLines()
}

// retryUnit reads a waiting unit's lines again.
func (tr *trackRun) retryUnit(ctx context.Context, r ledger.TrackRetry) (*unitMessage, error) {
	rc, err := tr.w.Blobs.OpenRange(ctx, tr.msg.ManifestKey, r.Offset, r.Length)
	if err != nil {
		return nil, fmt.Errorf("read the unit at %d: %w", r.First, err)
	}
	defer rc.Close()
	m, err := tr.unit(source.Chunk{FirstIndex: r.ChunkFirst, Count: r.ChunkItems}, r.First, r.Count, tracklines.NewReader(rc, r.Offset))
	if err != nil {
		return nil, err
	}
	m.ref = r
	tr.markUnit(m)
	return m, nil
}

// markUnit records on m's message where its unit lies (its TrackUnit), so
// that a wake sending the message again hands it back to a track.
func (tr *trackRun) markUnit(m *unitMessage) {
	if m.trackUnit == nil {
		return
	}
	u := m.ref
	u.DueMs, u.Requeued, u.RateAtUs, u.RateLeadMs, u.RatePos, u.TokensAtUs, u.TokensUs, u.TokensDrift = 0, 0, 0, 0, 0, 0, 0, 0
	*m.trackUnit = &ledger.TrackUnit{Tracks: tr.msg.Track.Tracks, TrackRetry: u}
}

// unit reads the n lines of the unit at manifest index first of chunk
// from lines and makes them the unit the fan-out would have sent (an item
// or pack message, by ledger.Packer).
func (tr *trackRun) unit(chunk source.Chunk, first, n int64, lines *tracklines.Reader) (*unitMessage, error) {
	var body []byte
	p, err := ledger.NewPacker(tr.b.ID, tr.b.Run, tr.msg.ManifestKey, chunk, tr.b.Pack(), func(b []byte, _ []string) error {
		body = b
		return nil
	})
	if err != nil {
		return nil, err
	}
	p.SetPriority(tr.b.Weight())
	if tr.b.Run == 1 {
		p.SetSample(int64(tr.b.Sample))
	}
	p.Skip(first - chunk.FirstIndex)
	ref := ledger.TrackRetry{First: first, Count: n, ChunkFirst: chunk.FirstIndex, ChunkItems: chunk.Count}
	for i := range n {
		l, off, length, err := lines.Next()
		if err != nil {
			return nil, fmt.Errorf("the unit at %d, line %d: %w", first, i, err)
		}
		if i == 0 {
			ref.Offset = off
		}
		ref.Length = off + length - ref.Offset
		if err := p.Add(l, off, length); err != nil {
			return nil, err
		}
	}
	if err := p.Flush(); err != nil {
		return nil, err
	}
	m, _, err := decodeMessage(body)
	if err != nil {
		return nil, fmt.Errorf("the unit at %d: %w", first, err)
	}
	m.ref = ref
	tr.markUnit(m)
	return m, nil
}

func (tr *trackRun) closeLines() {
	if tr.lines != nil {
		tr.lines.Close()
		tr.lines = nil
	}
}

// trackBook is the process's book of chunk tables and slices (made on
// first use).
func (w *Worker) trackBook() *tracklines.Book { return made(&w.tracks) }

// deadTrack handles a track message dead-lettered (its deliveries kept
// failing: a unit that crashes or hangs the invocation). The unit at its
// place, the likeliest cause, is recorded failed (dead-lettered) if it
// was never reserved in the run, as a dead-lettered fan-out's items are,
// and the track goes on past it as a new message, so that its other units
// still run and the run ends.
func (w *Worker) deadTrack(ctx context.Context, log *slog.Logger, tr *trackRun, d Delivery) bool {
	t := tr.msg.Track
	if t.Span.Length == 0 || t.At >= t.Span.FirstIndex+t.Span.Count {
		return w.sendTrack(ctx, log, tr, d, 0, true)
	}
	m, _, err := tr.sliceUnit(ctx)
	if err != nil {
		log.ErrorContext(ctx, "dead-lettered track: read its unit", "error", err.Error())
		return false
	}
	keys := make([]string, len(m.Items))
	for i, it := range m.Items {
		keys[i] = it.Key
	}
	text := fmt.Sprintf("the track running the item exceeded the items queue's receive limit (%d receives)", d.ReceiveCount)
	n, err := w.settleUnstarted(ctx, tr.b, source.Chunk{FirstIndex: m.ChunkFirst, Count: m.ChunkItems}, m.ref.First, keys, api.ReasonDeadLettered, text)
	if err != nil {
		log.ErrorContext(ctx, "dead-lettered track: settle its unit", "error", err.Error())
		return false
	}
	if n > 0 {
		w.count(ctx, []done{{batch: tr.b, outcome: api.OutcomeFailed, first: m.ChunkFirst, items: m.ChunkItems}}, n)
		w.Metrics.DeadLetters(tr.b.Pipeline, n, tr.b.ID, tr.b.Run)
		w.Metrics.ItemsRecorded(tr.b.Pipeline, string(api.OutcomeFailed), n, tr.b.ID, tr.b.Run)
	} else {
		// Reserved in the run: it waits in the track like any unit.
		tr.park(m, LiveLeaseRecheck, m.ref.Requeued)
	}
	log.WarnContext(ctx, "track dead-lettered; its unit recorded failed and the track sent on", "first", m.ref.First, "items", n)
	return w.sendTrack(ctx, log, tr, d, 0, true)
}
