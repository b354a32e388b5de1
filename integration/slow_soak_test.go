//go:build integration && soak

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bulkrun/bulkrun/shared/api"
)

// Settings of TestSlowReceiver (`make soak-slow`); BULKRUN_SLOW_ITEMS,
// BULKRUN_SLOW_SECONDS (how long a slow call takes; 0: no call is slow),
// BULKRUN_SLOW_FOR (a Go duration: how long after the submit calls are
// slow) and BULKRUN_SLOW_LIMIT (a Go duration, the wait for the run)
// override them.
const (
	slowItems   = 3000
	slowSeconds = 20
	slowFor     = 3 * time.Minute
	slowLimit   = 30 * time.Minute
)

// webhookDefaultTimeout is the webhook's timeout_ms when a batch sets
// none (docs/pipelines.md, the pipelines' table): 10 s.
const webhookDefaultTimeout = 10 * time.Second

// TestSlowReceiver measures a receiver that is slow but finishes every
// call (docs/pipelines.md, "Receiving webhook calls";
// docs/operations.md, "A receiver hangs"): a webhook batch of
// BULKRUN_SLOW_ITEMS items with the webhook's default timeout_ms
// (10 s), whose receiver takes BULKRUN_SLOW_SECONDS (20 s) over every call
// that starts in the first BULKRUN_SLOW_FOR (3 minutes) after the submit
// and answers every later call at once. A slow call times out on
// bulkrun's side and is still done by the receiver (its late answer goes
// to no one); the item's retry reaches it too. The receiver logs every
// call. Then:
//   - the report's run_spent calls equal the calls the receiver got,
//     timed-out ones included;
//   - no item's call starts while an earlier call of the same item is
//     still being worked on at the receiver (a retry after a timeout waits
//     at least twice timeout_ms, and the receiver takes twice timeout_ms),
//     so a receiver deduplicating on Idempotency-Key answers every repeat
//     from its store;
//   - while calls are slow the live view counts timed-out attempts;
//   - every item succeeds, each key called at least once.
//
// With BULKRUN_SLOW_SECONDS=0 no call is slow: one call per item, and
// run_spent equals the receiver's count. It prints a table of the figures.
func TestSlowReceiver(t *testing.T) {
	ctx := context.Background()
	n := envInt(t, "BULKRUN_SLOW_ITEMS", slowItems)
	slowSec := slowSeconds
	if v := os.Getenv("BULKRUN_SLOW_SECONDS"); v != "" {
		s, err := strconv.Atoi(v)
		if err != nil || s < 0 {
			t.Fatalf("BULKRUN_SLOW_SECONDS=%q: want a whole number of seconds, 0 or more", v)
		}
		slowSec = s
	}
	slowDur := time.Duration(slowSec) * time.Second
	window := envDuration(t, "BULKRUN_SLOW_FOR", slowFor)
	limit := envDuration(t, "BULKRUN_SLOW_LIMIT", slowLimit)
	if slowDur == 0 {
		window = 0
	}

	rcv := newSlowLog(t)
	id := newID(t)
	var manifest bytes.Buffer
	for i := range n {
		fmt.Fprintf(&manifest, "{\"id\":\"s-%06d\",\"n\":%d}\n", i, i)
	}
	src := "it-sources/slow/" + id + ".jsonl"
	if _, err := env.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &env.bucket, Key: &src, Body: bytes.NewReader(manifest.Bytes())}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		env.s3.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &env.bucket, Key: &src})
	})
	// No timeout_ms: the webhook's default, 10 s, half of a slow call.
	req := api.SubmitRequest{BatchID: id, Pipeline: "webhook", KeyField: "id",
		Source:  api.SourceSpec{Object: "s3://" + env.bucket + "/" + src},
		Options: json.RawMessage(fmt.Sprintf(`{"url": %q}`, rcv.url))}
	start := time.Now()
	rcv.slowUntil(start.Add(window), slowDur)
	if _, err := env.api.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}

	// The run, watched through the API: the live view's timed-out
	// attempts and the pauses.
	deadline := start.Add(limit)
	var (
		maxTimedOut, lastTimedOut int64
		pauses                    int
		pauseClasses              = map[string]bool{}
		lastLog                   time.Time
	)
	for {
		v, err := env.api.Status(ctx, id)
		if err == nil {
			if v.Status.Finished() {
				break
			}
			if v.Live != nil {
				lastTimedOut = v.Live.TimedOut
				maxTimedOut = max(maxTimedOut, v.Live.TimedOut)
			}
			pauses = max(pauses, v.Pauses)
			if v.Pause != nil {
				pauseClasses[v.Pause.Class] = true
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not finished after %v: %+v %v; receiver %d calls", id, limit, v.Batch, err, rcv.count())
		}
		if time.Since(lastLog) >= 15*time.Second {
			lastLog = time.Now()
			paused := ""
			if v.Pause != nil {
				paused = fmt.Sprintf(", paused (%s, %d probes)", v.Pause.Class, v.Pause.Probes)
			}
			t.Logf("%4.0fs  %s; timed out %d%s; receiver: %d calls, %d ended", time.Since(start).Seconds(), v.Status, lastTimedOut, paused, rcv.count(), rcv.ended())
		}
		time.Sleep(2 * time.Second)
	}
	runEnd := time.Now()
	v, err := env.api.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	report, err := env.api.Report(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	census := rowsCensus(t, id)
	// A late answer of the last slow calls may still be on its way: they
	// were sent (and counted) before the run ended, only their end is
	// waited for, for the overlap figure.
	rcv.waitIdle(slowDur + 5*time.Second)
	calls := rcv.snapshot()

	// The figures.
	perKey := map[string][]slowCall{}
	var slowCalls, lateAnswers int
	for _, c := range calls {
		perKey[c.key] = append(perKey[c.key], c)
		if c.slow {
			slowCalls++
		}
		if !c.end.IsZero() && c.end.Sub(c.start) > webhookDefaultTimeout {
			lateAnswers++
		}
	}
	var twice, overlapping, overlapCalls, maxCalls int
	for _, cs := range perKey {
		maxCalls = max(maxCalls, len(cs))
		if len(cs) > 1 {
			twice++
		}
		sort.Slice(cs, func(i, j int) bool { return cs[i].start.Before(cs[j].start) })
		// A call overlaps when an earlier call of its key had not ended
		// when it started.
		var latestEnd time.Time
		unended, overlapped := false, false
		for i, c := range cs {
			if i > 0 && (unended || c.start.Before(latestEnd)) {
				overlapCalls++
				overlapped = true
			}
			if c.end.IsZero() {
				unended = true
			} else if c.end.After(latestEnd) {
				latestEnd = c.end
			}
		}
		if overlapped {
			overlapping++
		}
	}
	spentCalls := report.Census.RunSpent.Text("calls")
	viewSpent := ""
	if v.Census != nil {
		viewSpent = v.Census.RunSpent.Text("calls")
	}

	var out strings.Builder
	fmt.Fprintf(&out, "\n=== slow receiver: %d items, %v per call for the first %v, timeout_ms default (%v), batch %s\n",
		n, slowDur, window, webhookDefaultTimeout, id)
	row := func(name string, v any) { fmt.Fprintf(&out, "  %-62s %v\n", name, v) }
	row("items (N)", n)
	row("receiver: calls", len(calls))
	row("receiver: distinct keys", len(perKey))
	row("receiver: keys called more than once", fmt.Sprintf("%d (%.1f %%)", twice, 100*float64(twice)/float64(max(n, 1))))
	row("receiver: most calls of one key", maxCalls)
	row("receiver: slow calls (started in the slow window)", slowCalls)
	row("receiver: calls answered after the timeout (late answers)", lateAnswers)
	row("receiver: calls started while the key's earlier call worked", fmt.Sprintf("%d (keys: %d)", overlapCalls, overlapping))
	row("run_spent calls (report) / (status)", fmt.Sprintf("%s / %s", spentCalls, viewSpent))
	row("live view: timed_out (highest seen)", maxTimedOut)
	row("pauses (classes)", fmt.Sprintf("%d %v", pauses, keysOf(pauseClasses)))
	row("status / census (report)", fmt.Sprintf("%s / %s", v.Status, censusLine(report.Census)))
	row("census (rows)", censusLine(census))
	row("run ended", fmt.Sprintf("%.1fs", runEnd.Sub(start).Seconds()))
	fmt.Print(out.String())

	// The checks.
	if spentCalls != strconv.Itoa(len(calls)) {
		t.Errorf("run_spent calls %s, the receiver got %d calls", spentCalls, len(calls))
	}
	if viewSpent != spentCalls {
		t.Errorf("run_spent calls: status %s, report %s", viewSpent, spentCalls)
	}
	if overlapCalls != 0 {
		t.Errorf("%d calls (of %d keys) started while an earlier call of the same key was still being worked on, want none", overlapCalls, overlapping)
	}
	if v.Status != api.StatusCompleted || report.Census.Succeeded != int64(n) || report.Census.Total != int64(n) {
		t.Errorf("finished %s, report census %s, want completed with %d succeeded", v.Status, censusLine(report.Census), n)
	}
	if census.Succeeded != int64(n) || census.Total != int64(n) {
		t.Errorf("rows census %s, want %d succeeded", censusLine(census), n)
	}
	if len(perKey) != n {
		t.Errorf("the receiver got %d distinct keys, want %d", len(perKey), n)
	}
	if slowDur == 0 && len(calls) != n {
		t.Errorf("no call was slow, yet the receiver got %d calls for %d items", len(calls), n)
	}
	if slowDur > webhookDefaultTimeout && slowCalls > 0 && maxTimedOut == 0 {
		t.Errorf("%d calls took %v (over timeout_ms), yet the live view never counted a timed-out attempt", slowCalls, slowDur)
	}
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		t.Fatalf("%s=%q: want a Go duration", name, v)
	}
	return d
}

func keysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// slowLog is a webhook receiver that finishes every call and logs it: a
// call that starts before until takes hold (the receiver does the work
// even when the caller stopped waiting), any later one is answered at
// once.
type slowLog struct {
	url   string
	mu    sync.Mutex
	until time.Time
	hold  time.Duration
	calls []slowCall
	done  int
}

type slowCall struct {
	key, run   string
	slow       bool
	start, end time.Time
}

func newSlowLog(t *testing.T) *slowLog {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &slowLog{url: "http://" + ln.Addr().String() + "/slow"}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return h
}

func (h *slowLog) slowUntil(until time.Time, hold time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.until, h.hold = until, hold
}

func (h *slowLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, _ := url.PathUnescape(r.Header.Get("Bulkrun-Item-Key"))
	now := time.Now()
	h.mu.Lock()
	i := len(h.calls)
	slow := h.hold > 0 && now.Before(h.until)
	hold := h.hold
	h.calls = append(h.calls, slowCall{key: key, run: r.Header.Get("Idempotency-Key"), slow: slow, start: now})
	h.mu.Unlock()
	if slow {
		time.Sleep(hold) // the work goes on when the caller stops waiting
	}
	h.mu.Lock()
	h.calls[i].end = time.Now()
	h.done++
	h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"ok":true}`))
}

func (h *slowLog) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.calls)
}

func (h *slowLog) ended() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.done
}

// waitIdle waits, at most d, until every call logged so far has ended.
func (h *slowLog) waitIdle(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		h.mu.Lock()
		idle := h.done == len(h.calls)
		h.mu.Unlock()
		if idle {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// snapshot returns the calls so far, in the order they started.
func (h *slowLog) snapshot() []slowCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slowCall(nil), h.calls...)
}
