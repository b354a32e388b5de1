package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
)

// A wake that goes on over several calls counts each item once: the
// server's second call goes over the items its first woke again (found
// woken, counted in already_woken) before it wakes more, so summing the
// answers' woken would count those twice. Three calls: 40 woken (5 of
// them woken by an earlier raise), then 40 found woken + 30 new, then 70
// found woken + 10 new: 80 items moved on, 5 of them already woken.
func TestWakeAllCountsEachItemOnce(t *testing.T) {
	answers := []struct{ woken, already int64 }{{40, 5}, {70, 40}, {80, 70}}
	for _, path := range []string{"ceilings", "halts/lift"} {
		calls := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasSuffix(r.URL.Path, "/"+path) {
				http.NotFound(w, r)
				return
			}
			a := answers[calls]
			calls++
			done := calls == len(answers)
			w.Header().Set("Content-Type", "application/json")
			if path == "ceilings" {
				_ = json.NewEncoder(w).Encode(api.CeilingsResult{Ceilings: api.Ceilings{SpendUSD: 2}, Woken: a.woken, AlreadyWoken: a.already, Still: 3, Done: done})
				return
			}
			_ = json.NewEncoder(w).Encode(api.LiftResult{Subject: "s", Lifted: calls == 1, Woken: a.woken, AlreadyWoken: a.already, Done: done})
		}))
		c := testClient(t, srv)
		var woken, already int64
		var done bool
		if path == "ceilings" {
			res, err := c.SetCeilingsAll(context.Background(), "b1", api.Ceilings{SpendUSD: 2})
			if err != nil || res.Still != 3 {
				t.Fatalf("SetCeilingsAll: %+v %v", res, err)
			}
			woken, already, done = res.Woken, res.AlreadyWoken, res.Done
		} else {
			res, err := c.LiftAll(context.Background(), "b1", "s")
			if err != nil || !res.Lifted {
				t.Fatalf("LiftAll: %+v %v", res, err)
			}
			woken, already, done = res.Woken, res.AlreadyWoken, res.Done
		}
		srv.Close()
		if calls != 3 || woken != 80 || already != 5 || !done {
			t.Errorf("%s: %d calls, woken %d, already woken %d, done %v; want 3 calls, 80, 5, done", path, calls, woken, already, done)
		}
	}
}
