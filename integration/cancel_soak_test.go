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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/shardmerge"
)

// Settings of TestCancelAtHalf (`make soak-cancel`);
// BULKRUN_CANCEL_ITEMS, BULKRUN_CANCEL_CALL_MS, BULKRUN_CANCEL_AT (percent
// of the items succeeded when the cancel is sent) and BULKRUN_CANCEL_LIMIT
// (a Go duration, the wait for each run) override them.
const (
	cancelItems  = 3000
	cancelCallMS = 5000
	cancelAt     = 50
	cancelLimit  = 25 * time.Minute
)

// TestCancelAtHalf measures what a cancel guarantees on a large batch
// (docs/operations.md, "Batches and their runs": the row "stop a run"):
// a webhook batch of BULKRUN_CANCEL_ITEMS items whose receiver answers
// 200 after BULKRUN_CANCEL_CALL_MS, cancelled through the API once about
// half of them succeeded. The batch row carries no time of its stop, so the test
// reads the row (strongly consistent) in a loop while the cancel goes: the
// stop was recorded after the start of the last read that did not show it
// and before the end of the first that did (the cancel's answer comes
// later still). The receiver's own log (its clock, the test process's)
// then shows:
//   - no call started after the cancel answered (the bound it asserts, the
//     row having no time of its stop); the calls that started after the
//     bracket's end are counted and shown with how late they were and
//     with this process's own stalls (its receiver logs a call when its
//     handler runs);
//   - one call per succeeded item, none twice, and every other item
//     cancelled (succeeded + cancelled = N);
//   - a resume calls exactly the cancelled keys, each once, and the batch
//     ends with N succeeded.
//
// It prints a table of the figures.
func TestCancelAtHalf(t *testing.T) {
	ctx := context.Background()
	n := envInt(t, "BULKRUN_CANCEL_ITEMS", cancelItems)
	callDur := time.Duration(envInt(t, "BULKRUN_CANCEL_CALL_MS", cancelCallMS)) * time.Millisecond
	at := envInt(t, "BULKRUN_CANCEL_AT", cancelAt)
	limit := cancelLimit
	if v := os.Getenv("BULKRUN_CANCEL_LIMIT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("BULKRUN_CANCEL_LIMIT: %v", err)
		}
		limit = d
	}
	rcv := newCallLog(t, callDur)
	id := newID(t)

	var manifest bytes.Buffer
	for i := range n {
		fmt.Fprintf(&manifest, "{\"id\":\"c-%06d\",\"n\":%d}\n", i, i)
	}
	src := "it-sources/cancel/" + id + ".jsonl"
	if _, err := env.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &env.bucket, Key: &src, Body: bytes.NewReader(manifest.Bytes())}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		env.s3.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &env.bucket, Key: &src})
	})
	req := api.SubmitRequest{BatchID: id, Pipeline: "webhook", KeyField: "id",
		Source:  api.SourceSpec{Object: "s3://" + env.bucket + "/" + src},
		Options: json.RawMessage(fmt.Sprintf(`{"url": %q, "timeout_ms": %d}`, rcv.url, 3*callDur.Milliseconds()))}
	start := time.Now()
	if _, err := env.api.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}

	// Run 1 until about half of the items were answered (a succeeded
	// item's call has ended; its row follows within milliseconds).
	target := n * at / 100
	deadline := start.Add(limit)
	var lastLog time.Time
	for rcv.answered() < target {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d calls answered after %v; the cancel was to be sent at %d", rcv.answered(), n, limit, target)
		}
		if time.Since(lastLog) >= 15*time.Second {
			lastLog = time.Now()
			t.Logf("%4.0fs  calls started %d, answered %d of %d", time.Since(start).Seconds(), rcv.started(), rcv.answered(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The cancel, and when it was recorded: after the start of the last
	// strongly consistent read of the row that did not show its stop
	// (missed), and before the end of the first that did (recorded).
	// Readers: four, staggered, so that the bracket stays narrow when the
	// emulator answers slowly.
	var (
		watchMu          sync.Mutex
		missed, recorded time.Time
	)
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watchers sync.WaitGroup
	for i := range 4 {
		watchers.Add(1)
		go func() {
			defer watchers.Done()
			time.Sleep(time.Duration(i) * 5 * time.Millisecond)
			for watchCtx.Err() == nil {
				began := time.Now()
				b, err := env.store.GetBatch(watchCtx, id)
				ended := time.Now()
				watchMu.Lock()
				switch {
				case err != nil:
				case b.Stop == "" && began.After(missed):
					missed = began
				case b.Stop != "" && (recorded.IsZero() || ended.Before(recorded)):
					recorded = ended
				}
				done := !recorded.IsZero()
				watchMu.Unlock()
				if done {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	stalls := watchStalls(watchCtx)
	sent := time.Now()
	v, err := env.api.Cancel(ctx, id)
	returned := time.Now()
	if err != nil || v.Stop != api.StatusCancelled {
		stopWatch()
		t.Fatalf("cancel: %+v %v", v.Batch, err)
	}
	waited := make(chan struct{})
	go func() { watchers.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(30 * time.Second):
	}
	time.Sleep(time.Second) // the stall monitor covers a second past the bracket
	stopWatch()
	watchers.Wait()
	if recorded.IsZero() || recorded.After(returned) {
		t.Logf("the stop was read back only after the cancel answered; the answer stands for when it was recorded")
		recorded = returned
	}
	if missed.Before(sent) {
		missed = sent
	}
	t.Logf("cancel sent at %.3fs, recorded between %.3fs and %.3fs, answered at %.3fs (%d calls answered)",
		sent.Sub(start).Seconds(), missed.Sub(start).Seconds(), recorded.Sub(start).Seconds(), returned.Sub(start).Seconds(), rcv.answered())

	b1 := waitRunEnd(t, id, 1, deadline)
	run1End := time.Now()
	outcomes, reasons := itemOutcomes(t, id)
	census1 := rowsCensus(t, id)
	calls1 := rcv.snapshot()

	// Run 2: the resume.
	resumeAt := time.Now()
	if _, err := env.api.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitRunEnd(t, id, 2, time.Now().Add(limit))
	run2End := time.Now()
	census2 := rowsCensus(t, id)
	calls := rcv.snapshot()

	// The figures.
	var before, inFlight, sentToMissed, bracket, afterRecorded, afterReturned int
	perKey1 := map[string]int{}
	for _, c := range calls1 {
		perKey1[c.key]++
		if !c.start.After(missed) && (c.end.IsZero() || c.end.After(missed)) {
			inFlight++
		}
		switch {
		case c.start.After(recorded):
			afterRecorded++
			if c.start.After(returned) {
				afterReturned++
			}
		case c.start.After(missed):
			bracket++
		case c.start.After(sent):
			sentToMissed++
		default:
			before++
		}
	}
	resumed := map[string]int{}
	var resumeCalls int
	for _, c := range calls[len(calls1):] {
		if c.start.Before(resumeAt) {
			t.Errorf("call of %s started at %.3fs, after run 1 ended and before the resume", c.key, c.start.Sub(start).Seconds())
			continue
		}
		resumed[c.key]++
		resumeCalls++
	}
	var succeeded, cancelled, other, twice int
	var cancelledKeys []string
	for key, o := range outcomes {
		switch o {
		case api.OutcomeSucceeded:
			succeeded++
		case api.OutcomeCancelled:
			cancelled++
			cancelledKeys = append(cancelledKeys, key)
		default:
			other++
		}
	}
	for _, c := range perKey1 {
		if c > 1 {
			twice++
		}
	}

	var out strings.Builder
	fmt.Fprintf(&out, "\n=== cancel at %d %%: %d items, %v per call, batch %s\n", at, n, callDur, id)
	row := func(name string, v any) { fmt.Fprintf(&out, "  %-58s %v\n", name, v) }
	row("items (N)", n)
	row("calls started before the cancel was sent", before)
	row("calls started after it was sent, before it was recorded", sentToMissed)
	row("calls in flight when it was recorded (started, not ended)", inFlight)
	row("calls started while it was being recorded (bracket)", bracket)
	row("calls started after the bracket's end", afterRecorded)
	row("  of them after the cancel answered", afterReturned)
	row("keys called twice in run 1", twice)
	row("run 1: succeeded / cancelled / other", fmt.Sprintf("%d / %d / %d (status %s, stop reasons %v)", succeeded, cancelled, other, b1.Status, reasons))
	row("run 1: receiver calls", len(calls1))
	row("resume: calls / distinct keys", fmt.Sprintf("%d / %d", resumeCalls, len(resumed)))
	row("after the resume: succeeded of N", census2.Succeeded)
	row("cancel sent / recorded between / answered", fmt.Sprintf("%.3fs / %.3fs–%.3fs / %.3fs", sent.Sub(start).Seconds(), missed.Sub(start).Seconds(), recorded.Sub(start).Seconds(), returned.Sub(start).Seconds()))
	row("run 1 ended / resume ended", fmt.Sprintf("%.1fs / %.1fs", run1End.Sub(start).Seconds(), run2End.Sub(start).Seconds()))
	fmt.Print(out.String())

	// The checks. The row carries no time of its stop, so the cancel's
	// answer is the bound no call may start after; calls that started
	// after the bracket's end are shown with how late they were and
	// with this process's longest stall around the cancel (its receiver
	// logs a call when its handler runs, so a stall delays the log).
	if afterRecorded != 0 {
		var late []string
		var latest time.Duration
		within := map[string]int{}
		for _, c := range calls1 {
			if !c.start.After(recorded) {
				continue
			}
			d := c.start.Sub(recorded)
			latest = max(latest, d)
			switch {
			case d < 10*time.Millisecond:
				within["<10ms"]++
			case d < 100*time.Millisecond:
				within["<100ms"]++
			case d < time.Second:
				within["<1s"]++
			default:
				within[">=1s"]++
			}
			if len(late) < 10 {
				late = append(late, fmt.Sprintf("%s +%dms", c.key, d.Milliseconds()))
			}
		}
		t.Logf("%d calls started after the bracket's end (the latest %v after it; by lateness %v), e.g. %s; this process's longest stall within a second of the bracket: %v",
			afterRecorded, latest, within, strings.Join(late, ", "), stalls.longest(missed.Add(-time.Second), recorded.Add(time.Second)))
	}
	if afterReturned != 0 {
		t.Errorf("%d calls started after the cancel answered", afterReturned)
	}
	if len(outcomes) != n || succeeded+cancelled != n || other != 0 {
		t.Errorf("run 1: %d items: %d succeeded + %d cancelled + %d other, want %d = succeeded + cancelled", len(outcomes), succeeded, cancelled, other, n)
	}
	if census1.Succeeded != int64(succeeded) || census1.Cancelled != int64(cancelled) {
		t.Errorf("run 1 census %s, rows say %d succeeded, %d cancelled", censusLine(census1), succeeded, cancelled)
	}
	if b1.Status != api.StatusCancelled || cancelled == 0 {
		t.Errorf("run 1 ended %s with %d cancelled, want cancelled with items cancelled", b1.Status, cancelled)
	}
	if len(calls1) != succeeded || twice != 0 {
		t.Errorf("run 1: %d receiver calls for %d succeeded items (%d keys called twice), want one each", len(calls1), succeeded, twice)
	}
	for key, c := range perKey1 {
		if outcomes[key] != api.OutcomeSucceeded {
			t.Errorf("%s was called %d times in run 1 and ended %s", key, c, outcomes[key])
		}
	}
	var missing, extra []string
	for _, key := range cancelledKeys {
		if resumed[key] != 1 {
			missing = append(missing, fmt.Sprintf("%s×%d", key, resumed[key]))
		}
	}
	for key := range resumed {
		if outcomes[key] != api.OutcomeCancelled {
			extra = append(extra, key)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 || resumeCalls != cancelled {
		t.Errorf("resume: %d calls; cancelled keys not called exactly once: %d %v; keys called that were not cancelled: %d %v",
			resumeCalls, len(missing), head(missing, 10), len(extra), head(extra, 10))
	}
	if census2.Succeeded != int64(n) || census2.Total != int64(n) {
		t.Errorf("after the resume: %s, want %d succeeded", censusLine(census2), n)
	}
}

func head(s []string, n int) []string { return s[:min(n, len(s))] }

// waitRunEnd waits until the batch's run run has ended, at the latest at
// deadline, and returns its row.
func waitRunEnd(t *testing.T, id string, run int, deadline time.Time) ledger.Batch {
	t.Helper()
	var lastLog time.Time
	for {
		b, err := env.store.GetBatch(context.Background(), id)
		if err == nil && b.Run == run && b.Status.Finished() {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %d of %s has not ended: %+v %v", run, id, b, err)
		}
		if time.Since(lastLog) >= 15*time.Second {
			lastLog = time.Now()
			t.Logf("waiting for run %d to end (status %s)", run, b.Status)
		}
		time.Sleep(time.Second)
	}
}

// itemOutcomes reads every item's outcome from the rows, and counts the
// cancelled items' reasons.
func itemOutcomes(t *testing.T, id string) (map[string]api.Outcome, map[string]int) {
	t.Helper()
	ctx := context.Background()
	b, err := env.store.GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]api.Outcome{}
	reasons := map[string]int{}
	if err := shardmerge.Merge(ctx, env.store, id, b.ListShards, "", shardmerge.Options{Packed: b.Pack() > 1}, func(it ledger.Item) error {
		outcomes[it.Key] = it.Outcome
		if it.Outcome == api.OutcomeCancelled {
			reasons[string(it.Reason)]++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return outcomes, reasons
}

// callLog is a webhook receiver that answers 200 after a fixed time and
// logs every call: its key, and when it started and ended by its own
// clock.
type callLog struct {
	url   string
	delay time.Duration
	mu    sync.Mutex
	calls []loggedCall
	ended int
}

type loggedCall struct {
	key        string
	start, end time.Time
}

func newCallLog(t *testing.T, delay time.Duration) *callLog {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &callLog{url: "http://" + ln.Addr().String() + "/cancel", delay: delay}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return h
}

func (h *callLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, _ := url.PathUnescape(r.Header.Get("Bulkrun-Item-Key"))
	h.mu.Lock()
	i := len(h.calls)
	h.calls = append(h.calls, loggedCall{key: key, start: time.Now()})
	h.mu.Unlock()
	time.Sleep(h.delay)
	h.mu.Lock()
	h.calls[i].end = time.Now()
	h.ended++
	h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"ok":true}`))
}

func (h *callLog) started() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.calls)
}

func (h *callLog) answered() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended
}

// snapshot returns the calls so far, in the order they started.
func (h *callLog) snapshot() []loggedCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]loggedCall(nil), h.calls...)
}

// stallLog records this process's stalls: the gaps between the wake-ups
// of a goroutine sleeping a millisecond at a time that exceeded 5 ms.
type stallLog struct {
	mu   sync.Mutex
	gaps []stall
}

type stall struct {
	end time.Time
	gap time.Duration
}

func watchStalls(ctx context.Context) *stallLog {
	s := &stallLog{}
	go func() {
		last := time.Now()
		for ctx.Err() == nil {
			time.Sleep(time.Millisecond)
			now := time.Now()
			if gap := now.Sub(last); gap > 5*time.Millisecond {
				s.mu.Lock()
				s.gaps = append(s.gaps, stall{end: now, gap: gap})
				s.mu.Unlock()
			}
			last = now
		}
	}()
	return s
}

// longest returns the longest stall that overlaps [from, to].
func (s *stallLog) longest(from, to time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var d time.Duration
	for _, g := range s.gaps {
		if g.end.After(from) && g.end.Add(-g.gap).Before(to) {
			d = max(d, g.gap)
		}
	}
	return d
}
