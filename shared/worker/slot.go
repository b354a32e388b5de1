package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	mrand "math/rand/v2"
	"time"

	"github.com/bulkrun/bulkrun/internal/retry"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Per-batch concurrency (SubmitRequest.MaxConcurrency): a batch with a
// limit N has N slots, each a row of its own (Store.AcquireSlot). An item
// takes a free slot before its reservation and frees it once its outcome
// (or its release for a retry) is written; a crashed holder's slot frees
// itself when its lease (the item lease) ends.
const (
	// SlotTries is how many random slots an item tries before it waits.
	SlotTries = 3
	// SlotWait is the shortest wait of an item that found no free slot;
	// the wait is jittered in [SlotWait, 4×SlotWait].
	SlotWait = time.Second
)

// slotWait is the jittered wait of an item that found every slot it tried
// taken: 2.5 × SlotWait ± 60 %.
func slotWait() time.Duration {
	return retry.Schedule{Interval: SlotWait * 5 / 2, Jitter: 0.6}.Delay(1)
}

// slotsToTry returns up to SlotTries distinct slots in [0, n), at random.
func slotsToTry(n int) []int {
	p := mrand.Perm(n)
	return p[:min(n, SlotTries)]
}

// seat is what a unit of a batch with max_concurrency runs under: a slot
// (slot ≥ 0: a slot row, or, fence, the fence row of a retired track of
// its run) held by holder, or none (slot −1: no limit, or a track's own
// unit); handed: the unit was handed to a track of its run, which runs
// it, and the delivery runs nothing.
type seat struct {
	slot   int
	fence  bool
	holder string
	handed bool
	hopAt  time.Time // a timer hop of a track's unit not due yet: sends the next hop, runs nothing
}

// acquireSlot seats the unit of m when the batch has a limit (its items
// then run one at a time), or reports ok false when every slot tried is
// taken. Seating counts no attempt: it happens before the reservation.
//
// A unit a track of the run made (its held items woken, its message sent
// again) is handed to a live track (Store.HandToTrack), which runs it
// next, or runs under a retired track's fence row as a slot
// (Store.TakeTrackSlot): every running unit holds a track, so the batch
// never passes its limit. Up to SlotTries tracks are tried, at random.
// Other units take one of the batch's slot rows, as before tracks.
func (w *Worker) acquireSlot(ctx context.Context, b ledger.Batch, m *unitMessage) (seat, bool, error) {
	if b.MaxConcurrency <= 0 || m.track != nil {
		return seat{slot: -1}, true, nil
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	holder := ledger.RunID(b.ID, m.Items[0].Key) + "#" + hex.EncodeToString(nonce[:])
	if u := m.trackUnitOf(); u != nil && u.Tracks > 0 && m.Run == b.Run && u.Count > 0 && u.Length > 0 {
		now := w.Clock.Now()
		if m.hopAt != nil && *m.hopAt > now.UnixMilli() {
			// An early timer hop: no track turn for a unit with nothing due.
			return seat{slot: -1, hopAt: time.UnixMilli(*m.hopAt).UTC()}, true, nil
		}
		unit := u.TrackRetry
		unit.DueMs, unit.Requeued, unit.RateAtUs, unit.RateLeadMs, unit.RatePos, unit.TokensAtUs, unit.TokensUs, unit.TokensDrift = 0, 0, 0, 0, 0, 0, 0, 0
		id := hex.EncodeToString(nonce[:])
		for _, j := range slotsToTry(u.Tracks) {
			retired, err := w.Store.HandToTrack(ctx, ledger.TrackHand{BatchID: b.ID, Run: b.Run, Track: j, ID: id, Unit: unit, Now: now})
			if err == nil {
				return seat{slot: -1, handed: true}, true, nil
			}
			if !errors.Is(err, api.ErrConflict) {
				return seat{slot: -1}, false, err
			}
			if !retired {
				continue // no row yet: its first delivery has not come
			}
			err = w.Store.TakeTrackSlot(ctx, ledger.TrackSlot{BatchID: b.ID, Run: b.Run, Track: j, Holder: holder, Now: now, Lease: w.Lease})
			if err == nil {
				return seat{slot: j, fence: true, holder: holder}, true, nil
			}
			if !errors.Is(err, api.ErrConflict) {
				return seat{slot: -1}, false, err
			}
		}
		return seat{slot: -1}, false, nil
	}
	for _, i := range slotsToTry(b.MaxConcurrency) {
		err := w.Store.AcquireSlot(ctx, b.ID, i, holder, w.Clock.Now(), w.Lease)
		if err == nil {
			return seat{slot: i, holder: holder}, true, nil
		}
		if !errors.Is(err, api.ErrConflict) {
			return seat{slot: -1}, false, err
		}
	}
	return seat{slot: -1}, false, nil
}

// freeSlot frees the slot of st (none: nothing), even when the
// invocation's context has ended; a slot not freed is freed by its lease.
func (w *Worker) freeSlot(ctx context.Context, log *slog.Logger, b ledger.Batch, st seat) {
	if st.slot < 0 {
		return
	}
	ctx2 := context.WithoutCancel(ctx)
	var err error
	if st.fence {
		err = w.Store.FreeTrackSlot(ctx2, ledger.TrackSlot{BatchID: b.ID, Run: b.Run, Track: st.slot, Holder: st.holder})
	} else {
		err = w.Store.FreeSlot(ctx2, b.ID, st.slot, st.holder)
	}
	if err != nil {
		log.WarnContext(ctx, "free concurrency slot; its lease frees it", "slot", st.slot, "track", st.fence, "error", pipeline.ErrorText(err))
	}
}

// slotsTaken sends the message of an item that found no free slot again,
// as a new message after slotWait, and acknowledges this one: no attempt
// was counted and the receive count starts again from 0, so waiting for a
// slot never brings an item toward max_attempts or the dead-letter queue.
// If the new message cannot be sent, this one comes back after the wait.
func (w *Worker) slotsTaken(ctx context.Context, log *slog.Logger, d Delivery, m *unitMessage) bool {
	return w.resendWaiting(ctx, log, d, m, slotWait(), "slot")
}

// resendWaiting sends m again as a new message after wait, for reason
// ("slot": every concurrency slot tried is taken; "rate": its batch's
// rate), counting a slot wait (SlotWaits, bounded by ledger.MaxResends,
// past which it waits on this message instead, a receive).
func (w *Worker) resendWaiting(ctx context.Context, log *slog.Logger, d Delivery, m *unitMessage, wait time.Duration, reason string) bool {
	if *m.slotWaits >= ledger.MaxResends {
		// The loop's own bound: wait on this message instead, a receive.
		log.WarnContext(ctx, "waiting ("+reason+"); message delayed, not sent again", "slot_waits", *m.slotWaits, "retry_in_ms", wait.Milliseconds())
		if derr := w.Queue.Delay(ctx, d.ReceiptHandle, wait); derr != nil {
			log.WarnContext(ctx, "delay message", "error", derr.Error())
		}
		return false
	}
	*m.slotWaits++
	body, err := m.body()
	if err == nil {
		if err = w.Queue.Requeue(ctx, body, wait); err == nil {
			w.Metrics.Resent("", reason, m.BatchID, m.Run)
			log.DebugContext(ctx, "waiting ("+reason+"); message sent again", "retry_in_ms", wait.Milliseconds())
			return true
		}
	}
	log.WarnContext(ctx, "send the message again", "error", err.Error())
	if derr := w.Queue.Delay(ctx, d.ReceiptHandle, wait); derr != nil {
		log.WarnContext(ctx, "delay message", "error", derr.Error())
	}
	return false
}
