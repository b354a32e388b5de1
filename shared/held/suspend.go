package held

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Woke is s, a held item, woken by by at now (Hold.Woken); a signal
// also keeps the attempt it ends (ItemState.Signalled), where its
// payload waits (SignalKey). The stores and a pack's wake apply it.
func Woke(s ledger.ItemState, by api.Wake, now time.Time) ledger.ItemState {
	s.Hold.Woken, s.UpdatedAt = by, now
	if by == api.WakeSignal {
		s.Signalled = s.Attempt
	}
	return s
}

// Due reports whether s is suspended in run, not woken, and its wake
// time (Hold.WakeAt) has come at now.
func Due(s ledger.ItemState, run int, now time.Time) bool {
	return s.Run == run && s.Outcome == api.OutcomeSuspended && s.Hold.Woken == "" &&
		!s.Hold.WakeAt.IsZero() && !now.Before(s.Hold.WakeAt)
}

// WakeDue is s woken by its timer when it is Due, else s as it is. A
// pack's take applies it to the items it read before it plans them: the
// take's write, fenced by the pack's attempt, records the wake and the
// start at once, so a concurrent signal finds the item taken.
func WakeDue(s ledger.ItemState, run int, now time.Time) ledger.ItemState {
	if Due(s, run, now) {
		return Woke(s, api.WakeTimer, now)
	}
	return s
}

// TimerDelay is how long the timer message of s (suspended in run, not
// woken, with a wake time still ahead at now) waits on the queue: the
// time left, at most api.MaxWakeHop (a longer wait takes another hop).
// ok is false when s needs no timer message.
func TimerDelay(s ledger.ItemState, run int, now time.Time) (time.Duration, bool) {
	if s.Run != run || s.Outcome != api.OutcomeSuspended || s.Hold.Woken != "" || s.Hold.WakeAt.IsZero() {
		return 0, false
	}
	return min(max(s.Hold.WakeAt.Sub(now), 0), api.MaxWakeHop), true
}

// SignalKey is where the payload of the signal that ended item key's
// suspension at attempt waits in b's current run:
// batches/{id}/held/{run}/signals/{run id}-{attempt}.json.
func SignalKey(b ledger.Batch, key string, attempt int) string {
	return MessageKey(b, fmt.Sprintf("signals/%s-%d", ledger.RunID(b.ID, key), attempt))
}

// ReadSignal returns the payload of the signal that ended s's suspension
// (s.Signalled), nil when none did or the signal carried none.
func ReadSignal(ctx context.Context, blobs ledger.Blobs, b ledger.Batch, s ledger.ItemState) (json.RawMessage, error) {
	if s.Signalled == 0 {
		return nil, nil
	}
	body, err := blobs.Get(ctx, SignalKey(b, s.Key, s.Signalled))
	if errors.Is(err, api.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the signal of %s/%s: %w", b.ID, s.Key, err)
	}
	if bytes.Equal(bytes.TrimSpace(body), []byte("null")) {
		return nil, nil
	}
	return body, nil
}

// CheckSignal checks a signal's payload and token: the payload empty
// (none) or one JSON value of at most api.MaxSignalPayloadBytes, the
// token at most api.MaxSuspendTokenBytes. Errors are *api.InputError
// naming the field.
func CheckSignal(payload json.RawMessage, token string) error {
	switch {
	case len(payload) > api.MaxSignalPayloadBytes:
		return &api.InputError{Field: "payload", Reason: fmt.Sprintf("%d bytes, more than %d", len(payload), api.MaxSignalPayloadBytes)}
	case len(bytes.TrimSpace(payload)) > 0 && !json.Valid(payload):
		return &api.InputError{Field: "payload", Reason: "not valid JSON"}
	case len(token) > api.MaxSuspendTokenBytes:
		return &api.InputError{Field: "token", Reason: fmt.Sprintf("%d bytes, more than %d", len(token), api.MaxSuspendTokenBytes)}
	}
	return nil
}

// Signal signals suspended item key of b's current run: it keeps the
// payload (SignalKey, a write only if absent: the first signal's payload
// is the one the next attempt gets; a signal repeated with the same
// payload before the wake answers as the first), wakes the item (a conditional
// write: still suspended in this run, under the attempt that suspended
// it, not woken; with token, held under that token) and sends its
// unit's saved message again. Idempotent: a repeated signal finds the
// item woken and answers Woken false with what woke it, sending its
// message again (harmless: only a woken item is taken, once). Errors:
// *api.InputError (payload, token); ErrNotFound (wrapped) for an item
// without a row; ErrConflict (wrapped) for an item not suspended in the
// run, or held under another token; ErrUnavailable when its pack is
// held by a delivery (call again).
//
// signalID, when not empty, names the signal: once a signal so named has
// woken the item, a marker under the run's held prefix
// (SignalIDKey) answers the same signal sent again (a client's retry
// after a lost answer) Woken false, by signal, without a wake — else a
// retry arriving after the item ran and was suspended again would wake
// that suspension, and the item would run once more than signalled.
func (w *Waker) Signal(ctx context.Context, b ledger.Batch, key, signalID, token string, payload json.RawMessage) (api.SignalResult, error) {
	res := api.SignalResult{Key: key}
	if err := CheckSignal(payload, token); err != nil {
		return res, err
	}
	if err := CheckSignalID(signalID); err != nil {
		return res, err
	}
	if signalID != "" {
		if _, err := w.Blobs.Get(ctx, SignalIDKey(b, key, signalID)); err == nil {
			res.By = api.WakeSignal // this signal was delivered: its retry
			return res, nil
		} else if !errors.Is(err, api.ErrNotFound) {
			return res, fmt.Errorf("signal %s/%s: read its marker: %w", b.ID, key, err)
		}
	}
	it, err := w.Store.LocateItem(ctx, b.ID, b.ListShards, key)
	if errors.Is(err, api.ErrNotFound) && b.Pack() > 1 {
		// A pack's item is found by its attention entry, which goes once
		// it moved on: say so, not only "not found".
		return res, fmt.Errorf("signal %s/%s: no such item, or one of a pack that is no longer suspended (it ran since: bulkrun items %s shows it): %w", b.ID, key, b.ID, err)
	}
	if err != nil {
		return res, fmt.Errorf("signal %s/%s: %w", b.ID, key, err)
	}
	switch {
	case it.Run != b.Run || it.Outcome != api.OutcomeSuspended || it.Hold == nil:
		return res, fmt.Errorf("signal %s/%s: the item is %s in run %d, not suspended: %w", b.ID, key, it.Outcome, it.Run, api.ErrConflict)
	case token != "" && it.Hold.Subject != token:
		return res, fmt.Errorf("signal %s/%s: the token does not match the one its suspension returned: %w", b.ID, key, api.ErrConflict)
	case it.Hold.Woken != "":
		res.By = it.Hold.Woken
	default:
		body := []byte(bytes.TrimSpace(payload))
		if len(body) == 0 {
			body = []byte("null")
		}
		perr := w.Blobs.PutIfAbsent(ctx, SignalKey(b, key, it.Attempt), "application/json", body)
		if perr != nil && !errors.Is(perr, api.ErrConflict) {
			return res, fmt.Errorf("signal %s/%s: keep its payload: %w", b.ID, key, perr)
		}
		res.Woken = perr == nil
		if !res.Woken {
			// An earlier signal's payload stands; the same payload again is
			// this signal's own retry (a 503 while its pack was held).
			kept, gerr := w.Blobs.Get(ctx, SignalKey(b, key, it.Attempt))
			res.Woken = gerr == nil && bytes.Equal(kept, body)
			if !res.Woken {
				res.By = api.WakeSignal
			}
		}
	}
	if _, err := w.WakeOne(ctx, b, key, it.Attempt, Filter{Outcome: api.OutcomeSuspended, Subject: token, By: api.WakeSignal}); err != nil {
		if errors.Is(err, api.ErrConflict) && res.By != "" {
			return res, nil // moved on since: taken by its next attempt
		}
		return api.SignalResult{Key: key}, err
	}
	if signalID != "" {
		// Written once the wake is: a retry after an error above wakes
		// (only this suspension: the wake is fenced to its attempt).
		err := w.Blobs.PutIfAbsent(ctx, SignalIDKey(b, key, signalID), "application/json", []byte(strconv.Itoa(it.Attempt)))
		if err != nil && !errors.Is(err, api.ErrConflict) {
			return api.SignalResult{Key: key}, fmt.Errorf("signal %s/%s: the item is woken, but its signal's marker was not kept (a retry of this signal could wake a later suspension): %w", b.ID, key, err)
		}
	}
	return res, nil
}

// MaxSignalIDBytes bounds a signal's ID (wire.SignalRequest.ID).
const MaxSignalIDBytes = 64

// CheckSignalID checks a signal's ID: empty (none), or 1–MaxSignalIDBytes
// of A–Z, a–z, 0–9, "-" and "_"; else an *api.InputError naming
// signal_id.
func CheckSignalID(id string) error {
	if len(id) > MaxSignalIDBytes {
		return &api.InputError{Field: "signal_id", Reason: fmt.Sprintf("%d bytes, more than %d", len(id), MaxSignalIDBytes)}
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return &api.InputError{Field: "signal_id", Reason: fmt.Sprintf("%q: want A–Z, a–z, 0–9, - and _", id)}
		}
	}
	return nil
}

// SignalIDKey is where the marker of the signal named id to item key of
// b's current run is kept once it woke the item (its content: the
// attempt it ended), under the run's held prefix, removed with the batch.
func SignalIDKey(b ledger.Batch, key, id string) string {
	return MessageKey(b, fmt.Sprintf("signals/%s-id-%s", ledger.RunID(b.ID, key), id))
}
