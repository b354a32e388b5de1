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
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/handler"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/shardmerge"
)

// Soak settings; BULKRUN_SOAK_ITEMS, BULKRUN_SOAK_SEED and
// BULKRUN_SOAK_LIMIT (a Go duration) override them, and
// BULKRUN_SOAK_KILL_AT, BULKRUN_SOAK_LOSE_FROM and BULKRUN_SOAK_LOSE_TO
// (percent of the items called: 25, 55, 80) move the crash windows.
const (
	soakItems = 5000
	soakSeed  = 1
	// soakLimit bounds the wait for the run to finish: on MiniStack
	// (≈ 150 conditional writes/s) 5,000 items take a few minutes, and
	// messages cut off by a crash come back after the visibility timeout
	// (6 × the 30 s item timeout `make soak` deploys).
	soakLimit = 20 * time.Minute
)

// soakRules are the steady faults of the soak, on the deployed functions'
// calls only (they sign with emulatorFunctionAccessKey): on each of
// DynamoDB, SQS and S3 ≈ 5 % of the calls fail (2.5 % throttled in the
// service's shape, 1.5 % answered 500, 1 % connection reset before the
// emulator sees them); 20 % of SendMessageBatch calls are sent twice (every
// message of them delivered twice) and 5 % come back as partial failures.
func soakRules() []faultproxy.Rule {
	fn := emulatorFunctionAccessKey
	rules := []faultproxy.Rule{
		{AccessKey: fn, Service: "sqs", Operations: []string{"SendMessageBatch"}, Kind: faultproxy.KindDuplicate, Rate: 0.2},
		{AccessKey: fn, Service: "sqs", Operations: []string{"SendMessageBatch"}, Kind: faultproxy.KindPartial, Rate: 0.05},
	}
	for _, svc := range []string{"dynamodb", "sqs", "s3"} {
		rules = append(rules,
			faultproxy.Rule{AccessKey: fn, Service: svc, Kind: faultproxy.KindThrottle, Rate: 0.025},
			faultproxy.Rule{AccessKey: fn, Service: svc, Kind: faultproxy.KindServerError, Rate: 0.015},
			faultproxy.Rule{AccessKey: fn, Service: svc, Kind: faultproxy.KindReset, Rate: 0.01},
		)
	}
	return rules
}

// outcomeWriteLost is the second crash window: the item function's write
// of a succeeded outcome reaches the emulator and the connection is reset
// before the answer, on every try of the call, so the invocation ends
// without acknowledging messages whose outcome is recorded.
var outcomeWriteLost = faultproxy.Rule{AccessKey: emulatorFunctionAccessKey, Service: "dynamodb", Operations: []string{"UpdateItem"},
	Contains: `{"S":"succeeded"}`, Kind: faultproxy.KindResetAfter, Rate: 1, Max: 60}

// TestSoak runs `make soak`: 5,000 items through the deployed stack
// behind the fault proxy with the faults of soakRules, and two crash
// windows: when the pipeline has been called for 25 % of the items the
// item function's processes are killed (SIGKILL) mid-run, and from 55 % to
// 80 % the outcome writes are lost as in outcomeWriteLost. It prints the census, the pipeline calls and the
// injected faults by kind, and checks that the census equals the rows,
// that every item succeeded (throttling and 5xx never fail an item), and
// that each succeeded item had exactly one successful pipeline call (the
// call of its recorded attempt; an attempt never calls twice).
func TestSoak(t *testing.T) {
	ctx := context.Background()
	faults := stackFaults(t)
	n := envInt(t, "BULKRUN_SOAK_ITEMS", soakItems)
	seed := int64(envInt(t, "BULKRUN_SOAK_SEED", soakSeed))
	limit := soakLimit
	if v := os.Getenv("BULKRUN_SOAK_LIMIT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("BULKRUN_SOAK_LIMIT: %v", err)
		}
		limit = d
	}
	// The crash windows, in percent of the items called: the kill, and
	// the opening and closing of the lost outcome writes.
	killAt, openAt, closeAt := int64(envInt(t, "BULKRUN_SOAK_KILL_AT", 25)), int64(envInt(t, "BULKRUN_SOAK_LOSE_FROM", 55)), int64(envInt(t, "BULKRUN_SOAK_LOSE_TO", 80))
	itemFn, err := env.stack.Get(config.OutputItemFunction)
	if err != nil {
		t.Fatal(err)
	}
	hook := newSoakHook(t)
	id := newID(t)

	// The manifest: one JSONL line per item, uploaded by the test (not
	// faulted), submitted by object.
	var manifest bytes.Buffer
	for i := range n {
		fmt.Fprintf(&manifest, "{\"id\":\"s-%05d\",\"n\":%d}\n", i, i)
	}
	// Under it-sources/, a prefix the emulator stack allows as a source
	// (DefaultEmulatorSourcePrefixes); soak/ is not one.
	src := "it-sources/soak/" + id + ".jsonl"
	if _, err := env.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &env.bucket, Key: &src, Body: bytes.NewReader(manifest.Bytes())}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		env.s3.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &env.bucket, Key: &src})
	})

	injected := map[faultproxy.Kind]int64{}
	byCall := map[string]int64{}
	collect := func() {
		s, err := faults.status()
		if err != nil {
			t.Logf("read faults: %v", err)
			return
		}
		for k, v := range s.Injected {
			injected[k] += v
		}
		for c, m := range s.ByCall {
			for _, v := range m {
				byCall[c] += v
			}
		}
	}
	setRules := func(rules []faultproxy.Rule) {
		collect()
		faults.set(t, faultproxy.Config{Seed: seed, Rules: rules})
	}
	faults.set(t, faultproxy.Config{Seed: seed, Rules: soakRules()})
	start := time.Now()
	// lostWrites is how many outcome writes window 2 has lost so far: it
	// stays open past 80 % until at least one was (a short soak's items
	// may all be called between two polls).
	lostWrites := func() int64 {
		s, err := faults.status()
		if err != nil {
			return 0
		}
		return s.Injected[faultproxy.KindResetAfter]
	}

	// Submit is idempotent: the same id and manifest answer the same batch,
	// so a submit cut by an injected fault is simply repeated.
	req := api.SubmitRequest{BatchID: id, Pipeline: "webhook", KeyField: "id",
		Source:  api.SourceSpec{Object: "s3://" + env.bucket + "/" + src},
		Options: json.RawMessage(fmt.Sprintf(`{"url": %q, "timeout_ms": 10000}`, hook.url))}
	var submitErrs []string
	for try := 0; ; try++ {
		_, err := env.api.Submit(ctx, req)
		if err == nil {
			break
		}
		submitErrs = append(submitErrs, err.Error())
		if try == 9 {
			t.Fatalf("submit failed 10 times: %v", submitErrs)
		}
		time.Sleep(time.Second)
	}
	b, err := env.store.GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}

	// Watch progress by the pipeline calls the hook has seen (the counters,
	// read directly and not faulted, are printed too) and open the crash
	// windows.
	var (
		killed           []int
		killedAt         time.Time
		window2, closed2 bool
		lastLog          time.Time
		finished         bool
	)
	deadline := start.Add(limit)
	for time.Now().Before(deadline) {
		p, err := env.store.Progress(ctx, id, b.Run, max(1, b.CounterShards))
		if err != nil {
			t.Logf("progress: %v", err)
		}
		done := int64(hook.total())
		if killed == nil && done >= int64(n)*killAt/100 {
			killed = killItemProcesses(t, itemFn)
			killedAt = time.Now()
			t.Logf("crash window 1 at %d calls: killed item function processes %v", done, killed)
		}
		if !window2 && done >= int64(n)*openAt/100 {
			window2 = true
			setRules(append([]faultproxy.Rule{outcomeWriteLost}, soakRules()...))
			t.Logf("crash window 2 at %d calls: outcome writes lost (reset after the write), at most %d", done, outcomeWriteLost.Max)
		}
		if window2 && !closed2 && done >= int64(n)*closeAt/100 && lostWrites() > 0 {
			closed2 = true
			setRules(soakRules())
			t.Logf("crash window 2 closed at %d calls", done)
		}
		if time.Since(lastLog) >= 15*time.Second {
			lastLog = time.Now()
			last := "none"
			if !p.UpdatedAt.IsZero() {
				last = fmt.Sprintf("%.0fs", p.UpdatedAt.Sub(start).Seconds())
			}
			t.Logf("%4.0fs  pipeline calls %d for %d items  counters: done %d failures %d, last written at %s", time.Since(start).Seconds(), done, n, p.Done, p.Failures, last)
		}
		row, err := env.store.GetBatch(ctx, id)
		if err == nil {
			b = row // an S3 source is read in the background: run and shards come later
		}
		if err == nil && row.Run >= 1 && row.Status.Finished() {
			finished = true
			break
		}
		// Often enough to open the windows near their marks when a short
		// soak's items run in seconds.
		time.Sleep(250 * time.Millisecond)
	}
	collect()
	faults.set(t, faultproxy.Config{})
	elapsed := time.Since(start)

	// The census of the finished run, through the API, and from the rows.
	var view handler.BatchView
	for try := 0; try < 10; try++ {
		if view, err = env.api.Status(ctx, id); err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	rows := rowsCensus(t, id)
	if b, err = env.store.GetBatch(ctx, id); err != nil {
		t.Fatal(err)
	}
	attempts := map[string]int{}
	outcomes := map[string]api.Outcome{}
	reasons := map[string]int{}
	// Item rows or pack rows, as the stack's items per message made them.
	if err := shardmerge.Merge(ctx, env.store, id, b.ListShards, "", shardmerge.Options{Packed: b.Pack() > 1}, func(it ledger.Item) error {
		attempts[it.Key], outcomes[it.Key] = it.Attempt, it.Outcome
		if it.Outcome == api.OutcomeFailed {
			reasons[string(it.Reason)+": "+firstLine(it.Error)]++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(outcomes) != n {
		t.Errorf("scanned %d items, want %d", len(outcomes), n)
	}

	calls := hook.snapshot()
	var totalCalls, extraCalls, doubleAttempt, noRecordedCall int
	for key, as := range calls {
		totalCalls += len(as)
		extraCalls += len(as) - 1
		seen := map[int]bool{}
		for _, a := range as {
			if seen[a] {
				doubleAttempt++
				t.Errorf("%s: attempt %d called the pipeline twice (calls by attempt %v)", key, a, as)
			}
			seen[a] = true
		}
		if outcomes[key] == api.OutcomeSucceeded && !seen[attempts[key]] {
			noRecordedCall++
			t.Errorf("%s: succeeded with attempt %d, but no call of that attempt (calls by attempt %v)", key, attempts[key], as)
		}
	}
	for key, o := range outcomes {
		if o == api.OutcomeSucceeded && len(calls[key]) == 0 {
			noRecordedCall++
			t.Errorf("%s: succeeded without a pipeline call", key)
		}
	}

	// The printout `make soak` shows.
	var b2 strings.Builder
	fmt.Fprintf(&b2, "\n=== soak: %d items, seed %d, %s, finished %v (status %s)\n", n, seed, elapsed.Round(time.Second), finished, view.Status)
	if b.Pause != nil {
		fmt.Fprintf(&b2, "paused: %+v\n", *b.Pause)
	}
	if view.Census != nil {
		fmt.Fprintf(&b2, "census (%s): %s\n", view.CensusSource, censusLine(*view.Census))
	}
	fmt.Fprintf(&b2, "census from rows: %s\n", censusLine(rows))
	fmt.Fprintf(&b2, "pipeline calls: %d for %d items (%d beyond one per item; attempts that called twice: %d; succeeded items without a call of their recorded attempt: %d)\n",
		totalCalls, len(calls), extraCalls, doubleAttempt, noRecordedCall)
	fmt.Fprintf(&b2, "crash window 1: killed %d item function processes", len(killed))
	if len(killed) > 0 {
		fmt.Fprintf(&b2, " at %s", killedAt.Sub(start).Round(time.Second))
	}
	fmt.Fprintf(&b2, "; crash window 2: %d outcome writes lost\n", injected[faultproxy.KindResetAfter])
	kinds := make([]string, 0, len(injected))
	var all int64
	for k, v := range injected {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, v))
		all += v
	}
	sort.Strings(kinds)
	fmt.Fprintf(&b2, "injected faults by kind (%d): %s\n", all, strings.Join(kinds, ", "))
	cs := make([]string, 0, len(byCall))
	for c, v := range byCall {
		cs = append(cs, fmt.Sprintf("%s %d", c, v))
	}
	sort.Strings(cs)
	fmt.Fprintf(&b2, "injected faults by call: %s\n", strings.Join(cs, ", "))
	if len(submitErrs) > 0 {
		fmt.Fprintf(&b2, "submit retried %d times: %s\n", len(submitErrs), firstLine(submitErrs[0]))
	}
	if len(reasons) > 0 {
		rs := make([]string, 0, len(reasons))
		for r, c := range reasons {
			rs = append(rs, fmt.Sprintf("%d × %s", c, r))
		}
		sort.Strings(rs)
		fmt.Fprintf(&b2, "failed items by reason:\n  %s\n", strings.Join(rs, "\n  "))
	}
	fmt.Print(b2.String())

	// The checks.
	if !finished {
		t.Fatalf("the run did not finish within %v", limit)
	}
	if view.Census == nil || !sameCounts(*view.Census, rows) {
		t.Errorf("census %+v != rows %+v", view.Census, rows)
	}
	if rows.Total != int64(n) || rows.Succeeded != int64(n) {
		t.Errorf("%d of %d items succeeded; throttling, 5xx and crashes must never fail an item", rows.Succeeded, n)
	}
	// The windows must have happened for the soak to mean anything.
	if len(killed) == 0 {
		t.Errorf("crash window 1 killed no item function process")
	}
	if injected[faultproxy.KindResetAfter] == 0 || injected[faultproxy.KindThrottle] == 0 || injected[faultproxy.KindDuplicate] == 0 {
		t.Errorf("faults missing: %v", injected)
	}
}

// killItemProcesses SIGKILLs the item function's processes of this
// checkout's emulator: those whose environment names the function and
// whose working directory is under .ministack/tmp of this checkout (other
// checkouts run their own emulators with the same function names).
func killItemProcesses(t *testing.T, fn string) []int {
	t.Helper()
	wd, _ := os.Getwd()
	tmp := filepath.Join(filepath.Dir(wd), ".ministack", "tmp") + string(filepath.Separator)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("list processes: %v", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		if err != nil || !strings.HasPrefix(cwd, tmp) {
			continue
		}
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !bytes.Contains(environ, []byte("\x00AWS_LAMBDA_FUNCTION_NAME="+fn+"\x00")) && !bytes.HasPrefix(environ, []byte("AWS_LAMBDA_FUNCTION_NAME="+fn+"\x00")) {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// soakHook is the webhook receiver of the soak: it answers 200 after a
// few milliseconds (so that crashes catch calls in flight) and records the
// attempt of every call per item key.
type soakHook struct {
	url   string
	mu    sync.Mutex
	calls map[string][]int
	n     int
}

func newSoakHook(t *testing.T) *soakHook {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &soakHook{url: "http://" + ln.Addr().String() + "/soak", calls: map[string][]int{}}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return h
}

func (h *soakHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, _ := url.PathUnescape(r.Header.Get("Bulkrun-Item-Key"))
	attempt, _ := strconv.Atoi(r.Header.Get("Bulkrun-Attempt"))
	time.Sleep(5 * time.Millisecond)
	h.mu.Lock()
	h.calls[key] = append(h.calls[key], attempt)
	h.n++
	h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"ok":true}`))
}

func (h *soakHook) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func (h *soakHook) snapshot() map[string][]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string][]int, len(h.calls))
	for k, v := range h.calls {
		out[k] = append([]int{}, v...)
	}
	return out
}

func censusLine(c api.Census) string {
	return fmt.Sprintf("total %d  succeeded %d  failed %d  quarantined %d  cancelled %d  in_flight %d  pending %d",
		c.Total, c.Succeeded, c.Failed, c.Quarantined, c.Cancelled, c.InFlight, c.Pending)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
