//go:build integration

package integration

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// finishingReceiver is a webhook receiver that is slow but finishes every
// call, and deduplicates on Idempotency-Key as docs/pipelines.md asks:
// a call whose key's effect is stored is answered from the store (a
// replay); a call that comes while an earlier call of the same key is
// still being worked on cannot be, so it does the work a second time
// and answers twice (a duplicate answer).
type finishingReceiver struct {
	slow func(key string) bool // a first call of key takes hold
	hold time.Duration

	mu         sync.Mutex
	working    map[string]int // calls of a run id being worked on now
	stored     map[string]bool
	calls      int // calls that reached the receiver
	firsts     int // calls of a run id not called before
	replays    int // calls answered from the store
	duplicates int // calls that came while an earlier one still worked
	held       int // calls held longer than the batch's timeout_ms
}

func (s *finishingReceiver) serve(r *http.Request) int {
	run := r.Header.Get("Idempotency-Key")
	key, _ := url.PathUnescape(r.Header.Get("Bulkrun-Item-Key"))
	s.mu.Lock()
	s.calls++
	first := !s.stored[run] && s.working[run] == 0
	if _, seen := s.working[run]; !seen {
		s.firsts++
	}
	switch {
	case s.stored[run]:
		s.replays++
		s.mu.Unlock()
		return http.StatusOK
	case s.working[run] > 0:
		s.duplicates++
	}
	s.working[run]++
	hold := first && s.slow(key)
	if hold {
		s.held++
	}
	s.mu.Unlock()
	if hold {
		time.Sleep(s.hold)
	}
	s.mu.Lock()
	s.working[run]--
	s.stored[run] = true
	s.mu.Unlock()
	return http.StatusOK
}

// TestIncidentSlowReceiver follows "A receiver hangs" for a receiver
// that is slow but finishes: in a batch of 300 items with timeout_ms
// 2000, the receiver works 5 s on the first call of every third item
// (and answers it, to no one: bulkrun stopped waiting at 2 s), and
// answers every other call at once. What bulkrun spent is what the
// receiver counted: the report's run_spent calls equal the calls that
// reached it, timed-out ones included; while the run goes, `bulkrun
// status` shows the timed-out attempts (live.timed_out, an attention
// line naming the class); no item's second call comes while its first
// still runs at the receiver (its retry waits at least twice
// timeout_ms), so a receiver deduplicating on Idempotency-Key answers
// every repeat from its store. Guards docs/pipelines.md, "Receiving
// webhook calls", and docs/operations.md, "A receiver hangs".
func TestIncidentSlowReceiver(t *testing.T) {
	// Serial beside the other tests (its timed-out calls hold item
	// invocations for timeout_ms each), its two runs at once: each has its
	// own batch and receiver route, and its checks are counts, not times.
	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			t.Parallel()
			finishingReceiverRun(t, k)
		})
	}
}

func finishingReceiverRun(t *testing.T, k int) {
	run := runbookCLI(t)
	id := newID(t)
	const n = 300
	rcv := &finishingReceiver{hold: 5 * time.Second, working: map[string]int{}, stored: map[string]bool{},
		slow: func(key string) bool {
			i, _ := strconv.Atoi(strings.TrimPrefix(key, "k"))
			return i%3 == 0
		}}
	hook := env.hook.routeRequest(id, rcv.serve)
	src := filepath.Join(t.TempDir(), "items.jsonl")
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf(`{"k":"k%03d"}`, i))
	}
	if err := os.WriteFile(src, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if out, code := run("submit", src, "--id", id, "--pipeline", "webhook", "--key-field", "k", "--items-per-message", strconv.Itoa(k),
		"--options", fmt.Sprintf(`{"url":%q,"timeout_ms":2000}`, hook),
		"--retry", "interval_seconds=1,backoff_rate=2,max_delay_seconds=20,jitter=0"); code != 0 {
		t.Fatalf("submit: exit %d: %s", code, out)
	}
	sawTimedOut := false
	for {
		v := statusJSON(t, run, id)
		if v.Status.Finished() {
			break
		}
		t.Logf("t+%3.0fs %s; timed out %d", time.Since(start).Seconds(), liveLine(v), timedOut(v))
		if l := v.Live; l != nil && l.TimedOut > 0 && v.NeedsAttention && strings.Contains(strings.Join(l.Attention, ";"), "attempts timed out (failure class timeout") {
			sawTimedOut = true
		}
		if time.Since(start) > 5*time.Minute {
			t.Fatalf("%s not finished after 5 minutes", id)
		}
		time.Sleep(time.Second)
	}
	v := waitCLI(t, run, id, time.Minute)
	rcv.mu.Lock()
	calls, firsts, replays, dups, held := rcv.calls, rcv.firsts, rcv.replays, rcv.duplicates, rcv.held
	rcv.mu.Unlock()
	spent := v.Census.RunSpent.Text("calls")
	t.Logf("K=%d, %d items in %s: %s; run_spent calls %s, cost calls %s; the receiver: %d calls (%d items, %d held past timeout_ms), %d answered from its store, %d duplicate answers (a call while the same item's earlier call still worked)",
		k, n, time.Since(start).Round(time.Second), v.Status, spent, v.Census.Cost.Text("calls"), calls, firsts, held, replays, dups)
	if v.Status != api.StatusCompleted || v.Census.Succeeded != n {
		t.Errorf("finished %s %+v, want completed with %d succeeded", v.Status, v.Census, n)
	}
	if spent != strconv.Itoa(calls) {
		t.Errorf("run_spent calls %s, the receiver counted %d calls", spent, calls)
	}
	if !sawTimedOut {
		t.Errorf("the live view never showed the timed-out attempts")
	}
	if dups != 0 {
		t.Errorf("%d calls came while the same item's earlier call was still being worked on, want none", dups)
	}
}

func timedOut(v wire.BatchView) int64 {
	if v.Live == nil {
		return 0
	}
	return v.Live.TimedOut
}
