//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/bulkrun/bulkrun/internal/handler"
	"github.com/bulkrun/bulkrun/shared/api"
)

// browserPage is the browser test's page and its helpers
// (TestConsoleBrowser).
type browserPage struct {
	t        *testing.T
	ctx      context.Context
	url      string // the console's address, without its token
	run      func(what string, actions ...chromedp.Action[chromedp.Void])
	waitJS   func(what, expr string, limit time.Duration)
	shot     func(name string, whole bool)
	setWidth func(w, h int64)
}

// stateBatches are batches in the states a person must tell apart on the
// list and the batch page: items waiting for a retry after refused
// connections (then paused by a caller), a batch paused by an outage of
// its receiver, a batch with no threshold whose every item failed for
// one cause, and a batch whose every item succeeded.
type stateBatches struct {
	waiting, outage, allFailed, allOK string
	failedItems                       int
}

// submitStateBatches submits them; the running ones are cancelled at the
// end of the test (their waiting items end at their next check), the
// finished ones forgotten.
func submitStateBatches(t *testing.T, suffix string) stateBatches {
	t.Helper()
	ctx := context.Background()
	s := stateBatches{waiting: "it-waiting-" + suffix, outage: "it-outage-" + suffix, allFailed: "it-failed-" + suffix, allOK: "it-fine-" + suffix, failedItems: 3000}
	t.Cleanup(func() {
		for _, id := range []string{s.waiting, s.outage} {
			_, _ = env.api.Cancel(context.Background(), id)
		}
		for _, id := range []string{s.allFailed, s.allOK} {
			_ = env.api.Forget(context.Background(), id)
		}
	})
	slow := &api.RetryPolicy{IntervalSeconds: 300, BackoffRate: 1, MaxDelaySeconds: 300}
	// Refused connections (nothing listens on port 1): 3 items wait for
	// their retry, fewer than the 10 failures in a row that pause a batch.
	refused := fmt.Sprintf(`{"url":"http://127.0.0.1:1/%s"}`, s.waiting)
	items := func(n int, f string) json.RawMessage {
		var l []string
		for i := range n {
			l = append(l, fmt.Sprintf(f, i))
		}
		return json.RawMessage("[" + strings.Join(l, ",") + "]")
	}
	for _, r := range []api.SubmitRequest{
		{BatchID: s.waiting, Pipeline: "webhook", KeyField: "k", ItemsPerMessage: 1, MaxAttempts: 2, Retry: slow,
			Options: json.RawMessage(refused), Source: api.SourceSpec{Items: items(3, `{"k":"w-%d"}`)}},
		// A receiver answering 502 to every call: the batch pauses itself.
		{BatchID: s.outage, Pipeline: "webhook", KeyField: "k", ItemsPerMessage: 1, Retry: slow,
			Options: json.RawMessage(fmt.Sprintf(`{"url":%q}`, env.hook.route(s.outage, func(string, int) int { return http.StatusBadGateway }))),
			Source:  api.SourceSpec{Items: items(12, `{"k":"o-%02d"}`)}},
		// No threshold, every item without its text: each fails the same way.
		{BatchID: s.allFailed, Pipeline: "enrich", KeyField: "k", Source: api.SourceSpec{Items: items(s.failedItems, `{"k":"order-%04d","txt":"a typo"}`)}},
		// Every item succeeds on its second attempt (a 500 first): the
		// report's retries are on the page.
		{BatchID: s.allOK, Pipeline: "webhook", KeyField: "k", ItemsPerMessage: 1,
			Options: json.RawMessage(fmt.Sprintf(`{"url":%q}`, env.hook.route(s.allOK, func(_ string, attempt int) int {
				if attempt <= 1 {
					return http.StatusInternalServerError
				}
				return http.StatusOK
			}))),
			Source: api.SourceSpec{Items: items(3, `{"k":"fine-%d"}`)}},
	} {
		if _, err := env.api.Submit(ctx, r); err != nil {
			t.Fatalf("submit %s: %v", r.BatchID, err)
		}
	}
	return s
}

// waitFor polls the batch until cond holds (at most limit).
func waitFor(t *testing.T, id, what string, limit time.Duration, cond func(handler.BatchView) bool) handler.BatchView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	v, err := env.api.WaitUntil(ctx, id, time.Second, cond, nil)
	if err != nil {
		t.Fatalf("%s: %s: %v (last: %s, live %+v, pause %+v)", id, what, err, v.Status, v.Live, v.Pause)
	}
	return v
}

// checkConsoleStates checks, at 1280 and at 390 px, that the console
// tells each batch's state first: a paused batch (by an outage, by a
// caller) is its own status, in its own colour, with its cause, on the
// list and on its page, and unpause is its primary action; items waiting
// for a retry show their most common cause on the list and in the
// Progress box; on a phone the Progress box comes first, above the fold;
// one bar of outcomes, not two; a finished batch whose every item
// succeeded has no primary action; a batch with no threshold whose every
// item failed for one cause never reads as a success (a red badge, a red
// verdict, no "within threshold") and, instead of a resume that would
// fail the same way, says what to do.
func checkConsoleStates(p *browserPage, s stateBatches) {
	t := p.t
	waitFor(t, s.waiting, "waiting items with their cause", 3*time.Minute, func(v handler.BatchView) bool {
		return v.Live != nil && v.Live.RetryCause != nil && v.Live.RetryWaiting == 3
	})
	waitFor(t, s.outage, "paused by the outage", 3*time.Minute, func(v handler.BatchView) bool { return v.Pause != nil })
	if v := waitFor(t, s.allFailed, "finished", 4*time.Minute, func(v handler.BatchView) bool { return v.Status.Finished() }); v.Census.Failed != int64(s.failedItems) || v.Status != api.StatusCompleted {
		t.Fatalf("%s: %s %+v, want completed with every item failed", s.allFailed, v.Status, v.Census)
	}
	waitFor(t, s.allOK, "finished", 2*time.Minute, func(v handler.BatchView) bool { return v.Status.Finished() })

	for _, w := range []int64{1280, 390} {
		p.setWidth(w, map[int64]int64{1280: 800, 390: 844}[w])
		at := fmt.Sprintf(" at %d px", w)
		p.openList()
		p.listRow(s.waiting, "running", "waiting for a retry after connection refused", at)
		p.listRow(s.outage, "paused", "by an outage (http 502)", at)
		p.listRow(s.allFailed, "none-succeeded", "completed: every item failed", at)
		p.listRow(s.allOK, "completed", "3 succeeded", at)
		p.colour(`#batches tr[data-id="`+s.outage+`"] .badge`, "background-color", "rgb(130, 80, 223)", "paused badge"+at)
		p.colour(`#batches tr[data-id="`+s.allFailed+`"] .badge`, "color", "rgb(207, 34, 46)", "every-item-failed badge"+at)
		p.colour(`#batches tr[data-id="`+s.allOK+`"] .badge`, "color", "rgb(26, 127, 55)", "all-succeeded badge"+at)

		p.openBatch(s.outage, "paused")
		p.has("#state-cause", "Paused by an outage since", at)
		p.has("#state-cause", "http 502", at)
		p.primary("act-unpause", at)
		p.progressFirst(at)
		p.shotAt("batch-paused", w)

		p.openBatch(s.waiting, "running")
		p.colour("#batch-status .badge", "color", "rgb(5, 80, 174)", "running badge"+at)
		p.has("#sec-progress", "after connection refused", at)
		p.has("#state-cause", "waiting for a retry after connection refused", at)
		p.primary("", at)
		p.progressFirst(at)
		p.shotAt("batch-running", w)

		p.openBatch(s.allFailed, "none-succeeded")
		p.has("#batch-status .badge", "completed: every item failed", at)
		p.colour("#batch-status .badge", "color", "rgb(207, 34, 46)", "every-item-failed badge"+at)
		p.has("#verdict", "✗ Every item failed", at)
		p.has("#verdict", fmt.Sprintf("%s failures of %s items", fmtThousands(s.failedItems), fmtThousands(s.failedItems)), at)
		p.lacks("#sec-verdict", "Within threshold", at)
		p.lacks("#sec-verdict", "✓", at)
		p.waitJS("runs drawn", `!!document.querySelector("#runs tr[data-run]")`, 30*time.Second)
		p.has("#runs", "✗ none succeeded", at)
		p.lacks("#runs", "✓", at)
		p.primary("", at)
		p.has("#what-to-do", "every item failed the same way", at)
		p.has("#what-to-do", "new batch", at)
		p.has("#what-to-do", "Correct…", at)
		p.progressFirst(at)
		fits(t, p.ctx, "the page of a batch whose every item failed"+at, "#main")
		if n := evalJS[int](t, p.ctx, `document.querySelectorAll("#main .mini-bar, #main .census-bar").length`); n != 1 {
			t.Errorf("the batch page%s draws %d bars of outcomes, want one", at, n)
		}
		p.shotAt("batch-all-failed", w)

		p.openBatch(s.allOK, "completed")
		p.colour("#batch-status .badge", "color", "rgb(26, 127, 55)", "all-succeeded badge"+at)
		p.has("#retries", "3 scheduled, 0 of them throttled by the downstream (no attempt used); 0 interrupted; 0 timed out; causes: http 500 (3: webhook: fine-", at)
		p.primary("", at)
		if !evalJS[bool](t, p.ctx, `document.getElementById("act-resume").disabled`) {
			t.Errorf("resume of a batch whose every item succeeded is enabled%s", at)
		}
		p.progressFirst(at)
		p.shotAt("batch-succeeded", w)
	}
	p.setWidth(1280, 800)

	// Paused by a caller: its own status and cause too.
	if _, err := env.api.Pause(context.Background(), s.waiting); err != nil {
		t.Fatal(err)
	}
	p.openList()
	p.listRow(s.waiting, "paused", "by a caller since", "")
	p.openBatch(s.waiting, "paused")
	p.has("#state-cause", "Paused by a caller since", "")
	p.primary("act-unpause", "")
	// Unpaused, it is running again, its items waiting with their cause
	// (as the list's screenshot shows it).
	if _, err := env.api.Unpause(context.Background(), s.waiting); err != nil {
		t.Fatal(err)
	}
	p.openList()
	p.listRow(s.waiting, "running", "waiting for a retry after connection refused", "")
}

// shotAt saves a screenshot of the batch page: at 1280 px the whole page
// (once its runs and items are drawn) as name, at a narrow width its
// first screen as name-narrow.
func (p *browserPage) shotAt(name string, w int64) {
	p.t.Helper()
	if w == 1280 {
		p.loaded()
		p.shot(name, true)
		return
	}
	p.shot(name+"-narrow", false)
}

// loaded waits until the batch page's runs and items are drawn, for a
// screenshot.
func (p *browserPage) loaded() {
	p.t.Helper()
	p.waitJS("runs and items drawn", `!!document.querySelector("#runs tr[data-run]") && !!document.querySelector("#items tbody tr")`, 30*time.Second)
}

func fmtThousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// openList opens the list and waits until it is drawn.
func (p *browserPage) openList() {
	p.t.Helper()
	p.run("open the list", chromedp.Navigate(p.url+"#/?r="+fmt.Sprint(time.Now().UnixNano())))
	p.waitJS("the list", `document.querySelectorAll("#batches tr[data-id]").length > 0`, 30*time.Second)
}

// listRow waits (pressing Refresh: the listing's index is eventually
// consistent) until the list shows batch id with the badge state and the
// text want in its row.
func (p *browserPage) listRow(id, state, want, at string) {
	p.t.Helper()
	cond := `(() => { const r = document.querySelector('#batches tr[data-id="` + id + `"]');
		const ok = !!r && r.querySelector(".badge").dataset.state === "` + state + `" && r.innerText.replaceAll("\u00a0", " ").includes(` + jsString(want) + `);
		if (!ok && Date.now() - (window.lastRefresh || 0) > 2000) { window.lastRefresh = Date.now(); document.querySelector(".filters button").click(); }
		return ok; })()`
	p.waitSoft("list row of "+id+": "+state+", "+want+at, cond, time.Minute)
}

// waitSoft polls expr (true when done) every 250 ms until limit, and
// says when it never held (the test goes on: the checks after it say
// what the page shows instead).
func (p *browserPage) waitSoft(what, expr string, limit time.Duration) bool {
	p.t.Helper()
	end := time.Now().Add(limit)
	for {
		if ok, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](expr)); err == nil && ok {
			return true
		}
		if time.Now().After(end) {
			text, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.getElementById("main").innerText.slice(0, 1500)`))
			p.t.Errorf("%s: not within %s; the page shows:\n%s", what, limit, text)
			return false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// openBatch opens a batch's page and waits for its badge's state.
func (p *browserPage) openBatch(id, state string) {
	p.t.Helper()
	p.run("open "+id, chromedp.Navigate(p.url+"#/batch/"+id))
	p.waitJS(id+" drawn", `!!document.getElementById("act-resume") && document.getElementById("batch-title").textContent === "`+id+`"`, time.Minute)
	p.waitSoft(id+" drawn as "+state, `(document.querySelector("#batch-status .badge") || {dataset: {}}).dataset.state === "`+state+`"`, 20*time.Second)
}

// has checks that the element's text holds want.
func (p *browserPage) has(sel, want, at string) {
	p.t.Helper()
	got := evalJS[string](p.t, p.ctx, `((document.querySelector(`+jsString(sel)+`) || {}).innerText || "").replaceAll("\u00a0", " ")`)
	if !strings.Contains(got, want) {
		p.t.Errorf("%s%s: %q lacks %q", sel, at, got, want)
	}
}

func (p *browserPage) lacks(sel, unwanted, at string) {
	p.t.Helper()
	got := evalJS[string](p.t, p.ctx, `((document.querySelector(`+jsString(sel)+`) || {}).innerText || "")`)
	if strings.Contains(got, unwanted) {
		p.t.Errorf("%s%s: %q says %q", sel, at, got, unwanted)
	}
}

// primary checks that the page's one primary (filled) action is id, or
// that it has none ("").
func (p *browserPage) primary(id, at string) {
	p.t.Helper()
	got := evalJS[[]string](p.t, p.ctx, `[...document.querySelectorAll(".actions button.primary")].map(b => b.id)`)
	want := []string{}
	if id != "" {
		want = []string{id}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		p.t.Errorf("primary actions%s: %v, want %v", at, got, want)
	}
}

// colour checks a computed CSS colour property of the element.
func (p *browserPage) colour(sel, prop, want, what string) {
	p.t.Helper()
	if got := evalJS[string](p.t, p.ctx, `getComputedStyle(document.querySelector(`+jsString(sel)+`)).`+map[string]string{"color": "color", "background-color": "backgroundColor"}[prop]); got != want {
		p.t.Errorf("%s: %s %s, want %s", what, prop, got, want)
	}
}

// progressFirst checks that the Progress box comes before the Summary
// and starts above the fold (inside the window's height).
func (p *browserPage) progressFirst(at string) {
	p.t.Helper()
	pos := evalJS[map[string]float64](p.t, p.ctx, `(() => ({progress: document.getElementById("sec-progress").getBoundingClientRect().top + scrollY,
		summary: document.getElementById("sec-summary").getBoundingClientRect().top + scrollY, fold: innerHeight}))()`)
	if pos["progress"] > pos["summary"] || pos["progress"] >= pos["fold"] {
		p.t.Errorf("Progress box%s at %.0f px, Summary at %.0f px, window %.0f px high: want the Progress box first, above the fold", at, pos["progress"], pos["summary"], pos["fold"])
	}
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
