package held_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/held"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// TestSuspendedTimer guards the timer of a suspended item: due at its
// wake time and not before, never when woken or of another run; the
// timer message waits the time left, at most a hop; a timer wake keeps
// no signal, a signal's keeps the attempt it ends.
func TestSuspendedTimer(t *testing.T) {
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	s := func(wake time.Duration, woken api.Wake) ledger.ItemState {
		st := ledger.ItemState{Key: "k", Run: 2, Outcome: api.OutcomeSuspended, Attempt: 4, Hold: api.Hold{Since: now, Woken: woken}}
		if wake != 0 {
			st.Hold.WakeAt = now.Add(wake)
		}
		return st
	}
	tests := []struct {
		name    string
		s       ledger.ItemState
		run     int
		due     bool
		delay   time.Duration
		timerOK bool
	}{
		{"no wake time", s(0, ""), 2, false, 0, false},
		{"ahead, within a hop", s(5*time.Second, ""), 2, false, 5 * time.Second, true},
		{"ahead, past a hop", s(time.Hour, ""), 2, false, api.MaxWakeHop, true},
		{"its time came", s(-time.Second, ""), 2, true, 0, true},
		{"woken by a signal", s(-time.Second, api.WakeSignal), 2, false, 0, false},
		{"another run", s(-time.Second, ""), 3, false, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := held.Due(tt.s, tt.run, now); got != tt.due {
				t.Errorf("Due %v, want %v", got, tt.due)
			}
			d, ok := held.TimerDelay(tt.s, tt.run, now)
			if ok != tt.timerOK || d != tt.delay {
				t.Errorf("TimerDelay %s %v, want %s %v", d, ok, tt.delay, tt.timerOK)
			}
			w := held.WakeDue(tt.s, tt.run, now)
			if tt.due != (w.Hold.Woken == api.WakeTimer) || w.Signalled != 0 {
				t.Errorf("WakeDue: %+v", w)
			}
		})
	}
	if w := held.Woke(s(0, ""), api.WakeSignal, now); !w.Woken() || w.Signalled != 4 {
		t.Errorf("a signal's wake: %+v, want woken with the attempt it ends", w)
	}
}

// TestCheckSignal guards the bounds of a signal, each error naming its
// field.
func TestCheckSignal(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		token   string
		field   string
	}{
		{"none", "", "", ""},
		{"a JSON value", `{"approved":true}`, "t-1", ""},
		{"at the bound", `"` + strings.Repeat("x", api.MaxSignalPayloadBytes-2) + `"`, "", ""},
		{"past the bound", `"` + strings.Repeat("x", api.MaxSignalPayloadBytes-1) + `"`, "", "payload"},
		{"not JSON", `{"a":`, "", "payload"},
		{"a long token", "", strings.Repeat("t", api.MaxSuspendTokenBytes+1), "token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := held.CheckSignal(json.RawMessage(tt.payload), tt.token)
			var ie *api.InputError
			switch {
			case tt.field == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.field != "" && (!errors.As(err, &ie) || ie.Field != tt.field):
				t.Errorf("error %v, want an input error naming %q", err, tt.field)
			}
		})
	}
}
