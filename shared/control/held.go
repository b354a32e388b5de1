package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/held"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// WakeTime bounds the wakes one command makes before it answers (a lift,
// a cancel's wake of held items): 20 seconds, inside API
// Gateway's 29-second integration timeout ("Amazon API Gateway quotas").
// A command that did not wake every item says so (Done false); repeating
// it goes on (a cancel called again wakes what the last one left).
const WakeTime = 20 * time.Second

// Lift lifts the batch's halt on subject and wakes every item withheld
// under it: each runs once more, with the credential as its secret reads
// now. Idempotent: a lift of a subject whose halt was lifted already
// wakes the items still withheld under it (Lifted false). A finished
// batch keeps its halts (a resume's items would be withheld under them
// at once): its lift removes the halt and wakes nothing, a finished run
// holding no item (Lifted true, Woken 0, Done true); a resume then runs
// its items under the credential as it reads. Errors: *InputError
// naming "subject" when it is empty; ErrNotFound (wrapped) when the
// batch holds no halt on subject and subject is not the credential its
// items act under (a finished batch: when it holds no halt on subject);
// ErrConflict (wrapped) while the batch is submitting; ErrNotFound and
// ErrExpired for the batch.
func (c *Control) Lift(ctx context.Context, id, subject string) (api.LiftResult, error) {
	res := api.LiftResult{Subject: subject}
	if subject == "" {
		return res, &api.InputError{Field: "subject", Reason: "name the halt's subject, as the batch's halts and the withheld items show it"}
	}
	b, err := c.Get(ctx, id)
	if err != nil {
		return res, err
	}
	_, halted := b.Halts[subject]
	if b.Status.Finished() {
		return c.liftFinished(ctx, b, subject, halted)
	}
	if b.Status != api.StatusRunning {
		return res, fmt.Errorf("lift %s on %s: the batch is %s; its source is still being read and no item has run: %w", id, subject, b.Status, api.ErrConflict)
	}
	if !halted && subject != ledger.SecretSubject(b.Headers, b.Options) {
		return res, fmt.Errorf("lift %s: no halt on %s: %w", id, subject, api.ErrNotFound)
	}
	if halted {
		switch err := c.Store.Lift(ctx, c.liftMark(b, subject)); {
		case err == nil:
			res.Lifted = true
			c.Log.WarnContext(ctx, "halt lifted by a caller", "batch_id", id, "run", b.Run, "subject", subject)
		case !errors.Is(err, api.ErrConflict):
			return res, err
		}
	}
	if c.Wake == nil {
		return res, fmt.Errorf("lift %s: this function wakes no held items", id)
	}
	w, err := c.Wake.Wake(ctx, b, held.Filter{Outcome: api.OutcomeWithheld, Subject: subject, By: api.WakeLift}, WakeTime)
	res.Woken, res.AlreadyWoken, res.Done = w.Woken, w.Again, w.Done && err == nil
	if res.Lifted {
		now := c.now()
		ledger.AnnounceHalt(ctx, c.Bus, c.Log, ledger.HaltEvent{BatchID: id, Run: b.Run, Subject: subject, Since: b.Halts[subject].Since, Woken: w.Woken, At: now})
	}
	c.Log.InfoContext(ctx, "withheld items woken", "batch_id", id, "subject", subject, "woken", w.Woken, "units", w.Units, "done", res.Done)
	return res, err
}

// liftFinished lifts the halt on subject of finished batch b: its run
// holds no item to wake (a cancel settled them, a finish counted them),
// so only the halt goes, and a resume's items run under the credential
// as it reads instead of being withheld at once.
func (c *Control) liftFinished(ctx context.Context, b ledger.Batch, subject string, halted bool) (api.LiftResult, error) {
	res := api.LiftResult{Subject: subject, Done: true}
	if !halted {
		return res, fmt.Errorf("lift %s: the batch is %s and holds no halt on %s: %w", b.ID, b.Status, subject, api.ErrNotFound)
	}
	switch err := c.Store.Lift(ctx, c.liftMark(b, subject)); {
	case err == nil:
		res.Lifted = true
		c.Log.WarnContext(ctx, "halt lifted by a caller", "batch_id", b.ID, "run", b.Run, "status", string(b.Status), "subject", subject)
		ledger.AnnounceHalt(ctx, c.Bus, c.Log, ledger.HaltEvent{BatchID: b.ID, Run: b.Run, Subject: subject, Since: b.Halts[subject].Since, At: c.now()})
	case !errors.Is(err, api.ErrConflict): // ErrConflict: lifted by a call at the same time
		return res, err
	}
	return res, nil
}

// wakeToCancel settles every held item of b's stopped run
// (held.Waker.Settle) within WakeTime; what it leaves, the finalize
// tick wakes (finalize.Finalizer.Settle), or a cancel called again.
func (c *Control) wakeToCancel(ctx context.Context, b ledger.Batch) {
	if c.Wake == nil {
		return
	}
	w, err := c.Wake.Settle(ctx, b, WakeTime)
	if err != nil {
		c.Log.WarnContext(ctx, "wake held items to cancel them; the finalize tick (or a cancel called again) goes on", "batch_id", b.ID, "error", err.Error())
		return
	}
	if w.Woken > 0 || !w.Done {
		c.Log.InfoContext(ctx, "held items woken to cancel", "batch_id", b.ID, "woken", w.Woken, "done", w.Done)
	}
}

// Signal signals suspended item key of batch id (held.Waker.Signal): it
// runs once more, its next attempt given payload (JSON, at most
// api.MaxSignalPayloadBytes; empty: none). token, when not empty, must
// be the token its suspension returned. Idempotent: a repeated signal
// answers Woken false with what woke the item. Errors: *InputError
// naming "key", "payload" or "token"; ErrConflict (wrapped) when the
// batch is not running or the item is not suspended (or under another
// token); ErrUnavailable when its pack is held by a delivery (call
// again); ErrNotFound and ErrExpired for the batch or the item.
// signalID, when not empty, names the signal (held.Waker.Signal): a
// signal sent again under it is answered as delivered, not delivered to
// a later suspension.
func (c *Control) Signal(ctx context.Context, id, key, signalID, token string, payload []byte) (api.SignalResult, error) {
	if key == "" {
		return api.SignalResult{}, &api.InputError{Field: "key", Reason: "name the suspended item's key"}
	}
	if err := held.CheckSignal(payload, token); err != nil {
		return api.SignalResult{Key: key}, err
	}
	if err := held.CheckSignalID(signalID); err != nil {
		return api.SignalResult{Key: key}, err
	}
	b, err := c.Get(ctx, id)
	if err != nil {
		return api.SignalResult{Key: key}, err
	}
	if b.Status != api.StatusRunning {
		return api.SignalResult{Key: key}, fmt.Errorf("signal %s/%s: the batch is %s; only a running batch holds suspended items: %w", id, key, b.Status, api.ErrConflict)
	}
	if b.Stop != "" {
		// Woken now, the item would settle cancelled, not run: say so
		// rather than answer that it runs once more.
		return api.SignalResult{Key: key}, fmt.Errorf("signal %s/%s: the run is stopping (%s): its suspended items end cancelled without a call, a signal runs nothing; resume the batch once it has ended: %w", id, key, b.Stop, api.ErrConflict)
	}
	if c.Wake == nil {
		return api.SignalResult{Key: key}, fmt.Errorf("signal %s: this function wakes no held items", id)
	}
	res, err := c.Wake.Signal(ctx, b, key, signalID, token, payload)
	if err == nil {
		c.Log.InfoContext(ctx, "suspended item signalled", "batch_id", id, "key", key, "woken", res.Woken, "by", string(res.By))
	}
	return res, err
}

// liftMark is the lift of b's halt on subject now, the halt as b holds it.
func (c *Control) liftMark(b ledger.Batch, subject string) ledger.LiftMark {
	h := b.Halts[subject]
	h.Subject = subject
	return ledger.LiftMark{BatchID: b.ID, Halt: h, At: c.now()}
}
