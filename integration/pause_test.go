//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
)

// outageStory runs the outage story on the deployed stack: n items of the
// webhook pipeline (one per message), a 10 % threshold, the receiver
// answering 502 from `after` the submit for `down`. It polls the batch
// every `every` and returns the timeline: when the batch paused, each
// probe, when it unpaused, when it finished, and the census; the
// receiver's calls per key answered 200 and the calls answered 502
// (during the pause, and in all).
type outageTimeline struct {
	id                        string
	start, downAt, upAt       time.Time
	pausedAt, unpausedAt, end time.Time
	pause                     api.Pause   // as last seen
	probeAt                   []time.Time // when the status first showed each probe
	final                     api.Census
	status                    api.Status
	ok                        map[string]int
	failedCalls               int
	failedAt                  []time.Time // when each call answered 502 was made
	firstUpCall               time.Time   // the first call after the outage: the answered probe
	finishedAt                time.Time   // the run's finished_at
	lines                     []string
}

// failedAfterPause is how many calls answered 502 came more than
// `after` past the pause's beginning.
func (tl outageTimeline) failedAfterPause(after time.Duration) int {
	n := 0
	for _, at := range tl.failedAt {
		if at.After(tl.pausedAt.Add(after)) {
			n++
		}
	}
	return n
}

// inFlightGrace is how long after the pause is written items already
// taken (their message batch read the batch row just before) may still
// call: their calls end within a second or two on the test bed.
const inFlightGrace = 5 * time.Second

func outageStory(t *testing.T, n int, after, down, every, limit time.Duration) outageTimeline {
	t.Helper()
	ctx := context.Background()
	tl := outageTimeline{id: newID(t), start: time.Now(), ok: map[string]int{}}
	tl.downAt, tl.upAt = tl.start.Add(after), tl.start.Add(after+down)
	var mu sync.Mutex
	isDown := func() bool { now := time.Now(); return !now.Before(tl.downAt) && now.Before(tl.upAt) }
	url := env.hook.route(tl.id, func(key string, _ int) int {
		mu.Lock()
		defer mu.Unlock()
		if isDown() {
			tl.failedCalls++
			tl.failedAt = append(tl.failedAt, time.Now())
			return http.StatusBadGateway
		}
		if now := time.Now(); !now.Before(tl.upAt) && tl.firstUpCall.IsZero() {
			tl.firstUpCall = now
		}
		tl.ok[key]++
		return http.StatusOK
	})
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"k":"k%05d"}`, i)
	}
	pct := 10.0
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: tl.id, Pipeline: "webhook", KeyField: "k", ItemsPerMessage: 1,
		Threshold: api.Threshold{FailurePercent: &pct},
		Source:    api.SourceSpec{Items: json.RawMessage("[" + strings.Join(items, ",") + "]")}, Options: json.RawMessage(fmt.Sprintf(`{"url":%q}`, url))}); err != nil {
		t.Fatal(err)
	}
	logf := func(format string, args ...any) {
		line := fmt.Sprintf("t+%-6s ", time.Since(tl.start).Round(time.Second)) + fmt.Sprintf(format, args...)
		tl.lines = append(tl.lines, line)
		t.Log(line)
	}
	logf("submitted %s: %d items; receiver down (502) from t+%s to t+%s", tl.id, n, after, (after + down).Round(time.Second))
	wasDown := false
	for {
		time.Sleep(every)
		v, err := env.api.Status(ctx, tl.id)
		if err != nil {
			logf("status: %v", err)
			continue
		}
		now := time.Now()
		if d := isDown(); d != wasDown {
			wasDown = d
			logf("receiver %s", map[bool]string{true: "DOWN", false: "up again"}[d])
		}
		mu.Lock()
		succeeded, calls502 := len(tl.ok), tl.failedCalls
		inPause := 0
		if !tl.pausedAt.IsZero() || v.Pause != nil {
			tl.pausedAt = firstNonZero(tl.pausedAt, pauseSince(v.Pause))
			inPause = tl.failedAfterPause(0)
		}
		mu.Unlock()
		switch p := v.Pause; {
		case p != nil && tl.pause.Since.IsZero():
			tl.pause = *p
			logf("PAUSED (by %s at %s, class %q: %s); next check %s", p.By, p.Since.Format("15:04:05"), p.Class, p.Error, p.NextCheckAt.Format("15:04:05"))
		case p != nil && p.Probes > tl.pause.Probes:
			for range p.Probes - tl.pause.Probes {
				tl.probeAt = append(tl.probeAt, now)
			}
			tl.pause = *p
			logf("probe %d failed; still paused, next check %s", p.Probes, p.NextCheckAt.Format("15:04:05"))
		case p == nil && !tl.pausedAt.IsZero() && tl.unpausedAt.IsZero():
			tl.unpausedAt = now
			tl.probeAt = append(tl.probeAt, now)
			logf("UNPAUSED: probe %d answered", tl.pause.Probes+1)
		}
		c := v.Census
		if c == nil {
			c = &api.Census{}
		}
		logf("%s: succeeded %d failed %d pending %d (%s); receiver: %d keys 200, %d calls 502 (%d after the pause)",
			v.Status, c.Succeeded, c.Failed, c.Pending, v.CensusSource, succeeded, calls502, inPause)
		if v.Status.Finished() {
			tl.end, tl.final, tl.status, tl.finishedAt = now, *c, v.Status, v.FinishedAt
			break
		}
		if time.Since(tl.start) > limit {
			t.Fatalf("not finished after %s", limit)
		}
	}
	return tl
}

// check asserts the story's outcome: completed, no item failed, every key
// answered 200 exactly once; the batch paused itself during the outage
// and unpaused itself after it, on an answered probe.
func (tl outageTimeline) check(t *testing.T, n int) {
	t.Helper()
	twice := 0
	for _, c := range tl.ok {
		if c != 1 {
			twice++
		}
	}
	if tl.status != api.StatusCompleted || tl.final.Failed != 0 || tl.final.Succeeded != int64(n) {
		t.Errorf("finished %s with %d succeeded, %d failed: want completed, %d succeeded, none failed", tl.status, tl.final.Succeeded, tl.final.Failed, n)
	}
	if len(tl.ok) != n || twice != 0 {
		t.Errorf("%d of %d keys answered 200, %d more than once", len(tl.ok), n, twice)
	}
	switch {
	case tl.pausedAt.IsZero():
		t.Error("the batch never paused during the outage")
	case tl.pausedAt.Before(tl.downAt) || tl.pausedAt.After(tl.upAt):
		t.Errorf("paused at %s, outside the outage %s–%s", tl.pausedAt, tl.downAt, tl.upAt)
	case tl.pause.By != api.PauseByOutage || tl.pause.Class != "http 502":
		t.Errorf("pause %+v: want by outage, class http 502", tl.pause)
	case tl.unpausedAt.IsZero():
		t.Error("the batch never unpaused")
	case tl.unpausedAt.Before(tl.upAt):
		t.Errorf("unpaused at %s, before the receiver was up at %s", tl.unpausedAt, tl.upAt)
	}
	// While the receiver is down after the pause, only the probes (one
	// item each, every one but the last failing) call it, once the items
	// already taken at the pause have ended.
	if n := tl.failedAfterPause(inFlightGrace); n > len(tl.probeAt)-1 {
		t.Errorf("%d calls answered 502 more than %s after the pause, with %d failed probes", n, inFlightGrace, len(tl.probeAt)-1)
	}
	t.Logf("timeline: receiver down +%s to +%s; paused +%s (since); probes seen by status %v; first call after the outage (the answered probe) +%s; unpaused seen +%s; finished +%s (finished_at); %d calls answered 502 (%d after the pause, %d more than 5 s after it); census succeeded %d failed %d",
		tl.downAt.Sub(tl.start).Round(time.Second), tl.upAt.Sub(tl.start).Round(time.Second),
		tl.pausedAt.Sub(tl.start).Round(time.Second), tl.probeOffsets(), tl.firstUpCall.Sub(tl.start).Round(time.Second),
		tl.unpausedAt.Sub(tl.start).Round(time.Second), tl.finishedAt.Sub(tl.start).Round(time.Second),
		tl.failedCalls, tl.failedAfterPause(0), tl.failedAfterPause(inFlightGrace), tl.final.Succeeded, tl.final.Failed)
}

func pauseSince(p *api.Pause) time.Time {
	if p == nil {
		return time.Time{}
	}
	return p.Since
}

func firstNonZero(a, b time.Time) time.Time {
	if a.IsZero() {
		return b
	}
	return a
}

func (tl outageTimeline) probeOffsets() []string {
	var out []string
	for _, p := range tl.probeAt {
		out = append(out, "+"+p.Sub(tl.start).Round(time.Second).String())
	}
	return out
}

// TestOutagePausesTheBatchAndResumes is the outage story at test size on
// the test stack (retry policy 1 s ×2 ≤ 20 s, 3 attempts — the Makefile's
// TEST_RETRY, which make integration deploys: without the pause an outage
// of a minute fails every item it meets; on a stack deployed with the
// default policy, 5 minutes doubling to 15, the items that failed before
// the pause wait their retries after it and the test runs past its
// deadline): 300 items, the
// receiver answering 502 for 60 s. The batch pauses itself within
// seconds, probes at its checks (30 s, 90 s after the pause), unpauses on
// the first probe after the outage, and completes with no item failed and
// every key answered 200 exactly once.
func TestOutagePausesTheBatchAndResumes(t *testing.T) {
	t.Parallel() // its own batches and receiver route: beside the other parallel tests
	tl := outageStory(t, 300, 0, 60*time.Second, 2*time.Second, 6*time.Minute)
	tl.check(t, 300)
}

// TestOutageStoryAtTheDefaults is the on-call outage story at full size
// on a stack deployed at the product's defaults (make deploy: retry
// policy 5 min ×2 ≤ 15 min): 3,000 items, the receiver down 5 minutes
// from 10 s after the submit.
// It takes about 10 minutes, so it runs only when asked:
//
//	BULKRUN_OUTAGE_STORY=1 go test -tags integration -count=1 -timeout 45m -run TestOutageStoryAtTheDefaults -v ./integration/
func TestOutageStoryAtTheDefaults(t *testing.T) {
	if os.Getenv("BULKRUN_OUTAGE_STORY") == "" {
		t.Skip("set BULKRUN_OUTAGE_STORY=1 (on a stack at the default retry policy) to run the full-size outage story")
	}
	tl := outageStory(t, 3000, 10*time.Second, 5*time.Minute, 10*time.Second, 40*time.Minute)
	tl.check(t, 3000)
}

// TestPauseAndUnpauseByHand: POST /batches/{id}/pause stops items from
// starting (the receiver's calls stop growing once the items in flight
// at the pause ended), waiting items keep their attempts, and
// /unpause lets the batch finish with every item once; both are
// idempotent, and a finished batch is answered as it ended.
func TestPauseAndUnpauseByHand(t *testing.T) {
	// Not in parallel: the pause must reach the batch while most of its
	// 200 items (200 ms each) are still to start, which other tests' load
	// on the API can delay past the last of them.
	ctx := context.Background()
	id := newID(t)
	url := env.hook.route(id, func(string, int) int { time.Sleep(200 * time.Millisecond); return http.StatusOK })
	items := make([]string, 200)
	for i := range items {
		items[i] = fmt.Sprintf(`{"k":"k%04d"}`, i)
	}
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "webhook", KeyField: "k", ItemsPerMessage: 1,
		Source: api.SourceSpec{Items: json.RawMessage("[" + strings.Join(items, ",") + "]")}, Options: json.RawMessage(fmt.Sprintf(`{"url":%q}`, url))}); err != nil {
		t.Fatal(err)
	}
	v, err := env.api.Pause(ctx, id)
	if err != nil || v.Pause == nil || v.Pause.By != api.PauseByCaller || v.Pause.NextCheckAt.IsZero() {
		t.Fatalf("pause: %+v, %v", v.Pause, err)
	}
	if again, err := env.api.Pause(ctx, id); err != nil || again.Pause == nil || !again.Pause.Since.Equal(v.Pause.Since) {
		t.Fatalf("pause again: %+v, %v: want the same pause", again.Pause, err)
	}
	total := func() int {
		n := 0
		for _, c := range env.hook.counts(id) {
			n += c
		}
		return n
	}
	time.Sleep(15 * time.Second) // the items in flight at the pause end
	settled := total()
	time.Sleep(20 * time.Second)
	if now := total(); now != settled || now >= 200 {
		t.Fatalf("calls went from %d to %d while paused (of 200 items): no item may start", settled, now)
	}
	t.Logf("paused: %d of 200 items called (in flight at the pause), none in the next 20 s", settled)
	if v, err = env.api.Unpause(ctx, id); err != nil || v.Pause != nil {
		t.Fatalf("unpause: %+v, %v", v.Pause, err)
	}
	if v, err = env.api.Unpause(ctx, id); err != nil || v.Pause != nil {
		t.Fatalf("unpause again: %+v, %v", v.Pause, err)
	}
	// What the pause took, on the running batch's view, on its finished
	// view and in its report: one pause of at least the 35 s slept, by a
	// caller both ways.
	pausedFor := func(what string, p *api.PausedSummary) {
		t.Helper()
		if p == nil || p.Pauses != 1 || p.Seconds < 35 || p.Last == nil || p.Last.By != api.PauseByCaller || p.Last.EndedBy != api.PauseByCaller {
			t.Errorf("%s: paused %+v; want 1 pause of at least 35 s by a caller, ended by a caller", what, p)
			return
		}
		t.Logf("%s: paused %d time(s), %.3f s in all", what, p.Pauses, p.Seconds)
	}
	if v.Status == api.StatusRunning {
		pausedFor("the view after the unpause", v.Paused)
	}
	ctxw, cancel := context.WithTimeout(ctx, 6*time.Minute) // the next check is at most 30 s + grace away here
	defer cancel()
	final, err := env.api.Wait(ctxw, id, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if final.Status != api.StatusCompleted || final.Census == nil || final.Census.Succeeded != 200 || final.Pause != nil {
		t.Fatalf("finished %s %+v pause %+v: want completed, 200 succeeded, not paused", final.Status, final.Census, final.Pause)
	}
	pausedFor("the finished view", final.Paused)
	for k, c := range env.hook.counts(id) {
		if c != 1 {
			t.Errorf("%s called %d times", k, c)
		}
	}
	if rep, err := env.api.Report(ctx, id); err != nil {
		t.Errorf("report: %v", err)
	} else {
		pausedFor("the report", rep.Paused)
	}
	if v, err = env.api.Pause(ctx, id); err != nil || v.Pause != nil || v.Status != api.StatusCompleted {
		t.Fatalf("pause of a finished batch: %s %+v, %v: want it as it ended", v.Status, v.Pause, err)
	}
}
