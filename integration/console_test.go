//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/handler"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/bulkrun/bulkrun/shared/api"
)

// chromium returns the path of a Chromium (or Chrome) binary: $BULKRUN_CHROMIUM,
// else the first of chromium, chromium-browser, google-chrome on PATH.
func chromium() string {
	if p := os.Getenv("BULKRUN_CHROMIUM"); p != "" {
		return p
	}
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// startConsole builds the CLI, runs `bulkrun console --port 0` against the
// deployed stack (the test's environment: AWS_ENDPOINT_URL, credentials,
// BULKRUN_STACK) and returns its URL; the process is stopped at cleanup.
func startConsole(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bulkrun")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/bulkrun").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "console", "--port", "0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if stderr.Len() > 0 {
			t.Logf("bulkrun console stderr:\n%s", stderr.String())
		}
	})
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		if s.Scan() {
			line <- s.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		// "bulkrun console: http://127.0.0.1:PORT/?token=TOKEN (stack …)"
		f := strings.Fields(l)
		if len(f) < 3 || !strings.HasPrefix(f[2], "http://127.0.0.1:") {
			t.Fatalf("console printed %q; stderr: %s", l, stderr.String())
		}
		t.Logf("%s", l)
		return f[2]
	case <-time.After(time.Minute):
		t.Fatalf("console did not start in a minute; stderr: %s", stderr.String())
	}
	return ""
}

// shotsDir is where the test saves its screenshots: $BULKRUN_CONSOLE_SHOTS
// (e.g. ../docs/console to refresh those docs/console.md shows), else ../build/console.
func shotsDir(t *testing.T) string {
	d := os.Getenv("BULKRUN_CONSOLE_SHOTS")
	if d == "" {
		d = "../build/console"
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestConsoleBrowser drives the web console (`bulkrun console`) in headless
// Chromium over the deployed stack, guarding the console's product lines:
// a thumbnail batch with broken files is watched on its page until the
// progress bar reaches 100 %; the census and the failed items the page
// shows are the API's; the thumbnail grid shows the succeeded items'
// thumbnails, served through the console; an enrich batch's quarantined
// item is released and the batch resumed from the page, with a
// confirmation, by keyboard, then its failed items corrected from the
// page (a file naming a key that succeeded refused, naming it; the right
// one a revision whose run the page follows); batches paused by an outage
// and by a caller, waiting after refused connections, with every item
// failed and with every item succeeded are told apart on the list and on
// their pages (checkConsoleStates); the list shows both batches, newest first,
// with written counts and the needs-attention flag; a POST without the
// page's token is refused; the printed address's token leaves the address
// bar; a malformed batch address is answered, not left loading. Screenshots of the list and of the pages of
// a batch running, paused by an outage, finished with failures (some, every item) and with every item
// succeeded (1280×800 and 390×844) are saved (shotsDir).
//
// Skips when no Chromium is installed, except under CI=true, where it
// fails (.ci/run installs Debian's chromium package).
func TestConsoleBrowser(t *testing.T) {
	exe := chromium()
	if exe == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("Chromium not found (CI=true): .ci/run installs Debian's chromium package; or set BULKRUN_CHROMIUM")
		}
		t.Skip("Chromium not found: the browser test of bulkrun console needs it (apt-get install chromium, or set BULKRUN_CHROMIUM)")
	}
	ctx := context.Background()
	shots := shotsDir(t)

	// A thumbnail batch: 21 images and 3 broken files.
	suffix := newID(t)
	suffix = suffix[len(suffix)-8:] // the random part: the ids read well in the screenshots
	thumbID := "it-photos-" + suffix
	prefix := "it-sources/" + thumbID + "/"
	uploadImages(t, prefix, 24)
	// An enrich batch: 2 items fail (no text), 2 are quarantined (over
	// max_words), 4 succeed.
	enrichID := "it-reviews-" + suffix
	items := `[{"k":"ok-1","text":"a b"},{"k":"ok-2","text":"c"},{"k":"ok-3","text":"d e f"},{"k":"ok-4","text":"g"},` +
		`{"k":"no-text-1"},{"k":"no-text-2","body":"x"},` +
		`{"k":"long-1","text":"one two three four five"},{"k":"long-2","text":"six seven eight nine ten eleven"}]`
	// A stopped batch: 30 items without text fail, 2 are tolerated, one
	// item runs at a time, so the run stops after the third failure and
	// the items not yet started end cancelled.
	stopID := "it-stopped-" + suffix
	var stopItems []string
	for i := range 30 {
		stopItems = append(stopItems, fmt.Sprintf(`{"k":"s-%02d"}`, i))
	}
	t.Cleanup(func() {
		_ = env.api.Forget(context.Background(), thumbID)
		_ = env.api.Forget(context.Background(), enrichID)
		_ = env.api.Forget(context.Background(), stopID)
	})
	// Batches in the states the list and the batch page must tell apart
	// (paused, waiting after refused connections, every item failed, every
	// item succeeded): submitted first, checked once they are there.
	states := submitStateBatches(t, suffix)

	// The printed address carries the console's token: opening it gives
	// the browser the session; later navigations use the bare address.
	addr := startConsole(t)
	url, _, _ := strings.Cut(addr, "?")
	actx, cancelA := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 800))...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelB()
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// waitJS polls expr (true when done) every 250 ms until deadline.
	waitJS := func(what, expr string, limit time.Duration) {
		t.Helper()
		end := time.Now().Add(limit)
		for {
			if ok, err := chromedp.Run(bctx, chromedp.Evaluate[bool](expr)); err == nil && ok {
				return
			}
			if time.Now().After(end) {
				html, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("main").innerText`))
				t.Fatalf("%s: not within %s; the page shows:\n%s", what, limit, html)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	// shot saves the whole page (a narrow window: the first screen).
	shot := func(name string, whole bool) {
		t.Helper()
		a := chromedp.CaptureScreenshot()
		if whole {
			a = chromedp.FullScreenshot(100) // quality 100: PNG
		}
		png, err := chromedp.Run(bctx, a)
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		p := filepath.Join(shots, name+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s (%d bytes)", p, len(png))
	}
	setWidth := func(w, h int64) {
		t.Helper()
		run("viewport", chromedp.EmulateViewport(w, h))
	}
	setWidth(1280, 800)

	// Open the console first, then submit: the page watches the run.
	run("open the list", chromedp.Navigate(addr), chromedp.WaitVisible(chromedp.CSS(`#batches`)))
	if loc := evalJS[string](t, bctx, `location.href`); loc != url {
		t.Errorf("after opening the printed address the page is at %q, want %q (the token out of the address bar)", loc, url)
	}
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: thumbID, Pipeline: "thumbnail",
		Source: api.SourceSpec{Prefix: "s3://" + env.bucket + "/" + prefix}}); err != nil {
		t.Fatal(err)
	}
	run("open the batch", chromedp.Navigate(url+"#/batch/"+thumbID))

	// Watch the progress bar until it is full and the status final.
	var seen []string
	liveCost := 0 // polls that saw the running batch with items ended
	end := time.Now().Add(4 * time.Minute)
	for {
		st, err := chromedp.Run(bctx, chromedp.Evaluate[progressState](`(() => {
			const p = document.getElementById("progress"), s = document.querySelector("#batch-status .badge");
			return {status: s ? s.dataset.status : "", value: p ? Number(p.dataset.done) : -1, max: p ? Number(p.dataset.total) : -1,
				text: ((document.getElementById("progress-text") || {}).textContent || "").replaceAll("\u00a0", " "),
				cost: (document.getElementById("sec-cost") || {}).textContent || "",
				source: (document.querySelector('[data-label="Source"], #sec-summary .source') || {}).textContent || ""};
		})()`))
		if err == nil && st.Text != "" && (len(seen) == 0 || seen[len(seen)-1] != st.Status+" "+st.Text) {
			seen = append(seen, st.Status+" "+st.Text)
		}
		// While the run goes, the cost box shows the cost so far from
		// the run's counters: once an item has ended (the counter write
		// that counts it carries its cost), the thumbnail pipeline's
		// "images" are there, never "no cost".
		if err == nil && st.Status == "running" && st.Value > 0 {
			liveCost++
			if !strings.Contains(st.Cost, "images") || !strings.Contains(st.Cost, "so far") {
				t.Errorf("live cost box of a running batch with %v items ended: %q", st.Value, st.Cost)
			}
		}
		if err == nil && st.Max > 0 && st.Value == st.Max && st.Status != "running" && st.Status != "submitting" && st.Status != "" {
			if !strings.Contains(st.Text, "(100 %)") {
				t.Errorf("full progress bar reads %q, want 100 %%", st.Text)
			}
			break
		}
		if time.Now().After(end) {
			t.Fatalf("progress never reached 100 %%; seen: %q", seen)
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("progress seen on the batch page: %q; live cost checked on %d polls", seen, liveCost)

	// The census the page writes is the API's.
	v, err := env.api.Status(ctx, thumbID)
	if err != nil || v.Census == nil {
		t.Fatalf("status: %v %+v", err, v)
	}
	if v.Census.Failed != 3 || v.Census.Succeeded != 21 {
		t.Fatalf("API census %+v, want 21 succeeded and 3 failed", v.Census)
	}
	waitJS("census", `!!document.querySelector('#census li[data-outcome="failed"] .n')`, 30*time.Second)
	census := evalJS[map[string]string](t, bctx, `Object.fromEntries([...document.querySelectorAll("#census li")].map(li => [li.dataset.outcome, li.querySelector(".n").textContent]))`)
	c := v.Census
	for o, n := range map[string]int64{"succeeded": c.Succeeded, "failed": c.Failed, "quarantined": c.Quarantined,
		"cancelled": c.Cancelled, "in_flight": c.InFlight, "pending": c.Pending} {
		if census[o] != fmt.Sprint(n) {
			t.Errorf("census on the page: %s %q, the API's %d (page %v)", o, census[o], n, census)
		}
	}
	// The failed items the page lists are the API's, with their reasons.
	p, err := env.api.Items(ctx, thumbID, api.OutcomeFailed, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, it := range p.Items {
		want = append(want, it.Key+" | "+string(it.Reason)+" | "+fmt.Sprint(it.Run)+" | "+fmt.Sprint(it.RunAttempts)+" | "+it.Error)
	}
	waitJS("failed items", `document.querySelectorAll("#items tr[data-key]").length === 3`, 30*time.Second)
	got := evalJS[[]string](t, bctx, `[...document.querySelectorAll("#items tr[data-key]")].map(tr => [...tr.cells].slice(0, 5).map(td => td.textContent).join(" | "))`)
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("failed items on the page:\n%s\nthe API's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The thumbnail grid: every image loaded through the console.
	waitJS("thumbnails", `(() => { const i = [...document.querySelectorAll("#thumbs img")];
		return i.length === 21 && i.every(x => x.complete && x.naturalWidth > 0 && x.src.startsWith(location.origin + "/api/")); })()`, time.Minute)
	verdict := evalJS[string](t, bctx, `document.getElementById("verdict").textContent`)
	if !strings.Contains(verdict, "3 failures of 24 items") {
		t.Errorf("verdict %q", verdict)
	}
	if src := evalJS[string](t, bctx, `document.querySelector("#sec-summary .source").textContent`); src != "S3 "+prefix+"*" {
		t.Errorf("batch page source %q, want the kind and %s*", src, prefix)
	}
	// Its failed items all failed permanently: a resume would fail them
	// again, so none is the primary action, and the page says what to do.
	waitJS("what to do", `(document.getElementById("what-to-do") || {}).textContent.includes("failed permanently")`, 30*time.Second)
	if txt := evalJS[string](t, bctx, `document.querySelector(".actions").textContent`); strings.Contains(txt, "null") || strings.Contains(txt, "Failed items' inputs") {
		t.Errorf("actions of a batch without key field %q: want no inputs link, and no stray text", txt)
	}
	if n := evalJS[int](t, bctx, `document.querySelectorAll(".actions button.primary").length`); n != 0 {
		t.Errorf("a batch whose failed items all failed permanently has %d primary actions, want none", n)
	}
	// Finished with failures: its own badge, amber, never the green of a
	// batch whose every item succeeded.
	if b := evalJS[[]string](t, bctx, `(() => { const b = document.querySelector("#batch-status .badge"); return [b.dataset.state, b.textContent, getComputedStyle(b).color]; })()`); !slices.Equal(b, []string{"completed-failures", "completed with failures", "rgb(154, 103, 0)"}) {
		t.Errorf("badge of a batch finished with failures: %q, want completed-failures, its text and amber", b)
	}
	waitJS("runs drawn", `!!document.querySelector("#runs tr[data-run]")`, 30*time.Second)
	shot("batch", true)
	setWidth(390, 844)
	run("narrow", chromedp.Sleep(300*time.Millisecond))
	fits(t, bctx, "batch page at 390×844", "#main")
	shot("batch-narrow", false)
	setWidth(1280, 800)

	// A POST without the page's token changes nothing.
	status := evalJS[int](t, bctx, `fetch("/api/batches/`+thumbID+`/resume", {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"}).then(r => r.status)`, chromedp.EvalAwaitPromise)
	if status != 403 {
		t.Errorf("resume without the token: HTTP %d, want 403", status)
	}
	if v, _ := env.api.Status(ctx, thumbID); v.Run != 1 {
		t.Errorf("a resume without the token started run %d", v.Run)
	}

	// The enrich batch: release a quarantined item, then resume.
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: enrichID, Pipeline: "enrich", KeyField: "k",
		Source: api.SourceSpec{Items: json.RawMessage(items)}, Options: json.RawMessage(`{"max_words":3}`)}); err != nil {
		t.Fatal(err)
	}
	wait(t, enrichID)
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: stopID, Pipeline: "enrich", KeyField: "k", MaxConcurrency: 1,
		Threshold: api.Threshold{FailureCount: new(int64(2))}, Source: api.SourceSpec{Items: json.RawMessage("[" + strings.Join(stopItems, ",") + "]")}}); err != nil {
		t.Fatal(err)
	}
	run("open the enrich batch", chromedp.Navigate(url+"#/batch/"+enrichID))
	waitJS("finished", `(document.querySelector("#batch-status .badge") || {dataset: {}}).dataset.status === "completed"`, time.Minute)
	waitJS("quarantined tab", `!!document.getElementById("tab-quarantined")`, 30*time.Second)
	// Actions are styled by their weight: resume (starts work) is the one
	// primary, filled button; cancel and forget (stop, delete) never are.
	weights := evalJS[map[string]string](t, bctx, `Object.fromEntries(["act-resume", "act-correct", "act-cancel", "act-forget"].map(id => {
		const b = document.getElementById(id); return [id, b.className + " " + getComputedStyle(b).backgroundColor]; }))`)
	if !strings.HasPrefix(weights["act-resume"], "primary ") {
		t.Errorf("resume button %q, want primary", weights["act-resume"])
	}
	if !strings.HasPrefix(weights["act-correct"], "secondary ") {
		t.Errorf("correct button %q, want secondary", weights["act-correct"])
	}
	for _, id := range []string{"act-cancel", "act-forget"} {
		if !strings.HasPrefix(weights[id], "danger ") || strings.Contains(weights[id], strings.TrimPrefix(weights["act-resume"], "primary ")) {
			t.Errorf("%s button %q: want danger, never the primary fill (%s)", id, weights[id], weights["act-resume"])
		}
	}
	// A finished batch's budget cannot be set: the budget action is
	// there, disabled, saying why.
	if b := evalJS[string](t, bctx, `(b => b.disabled + "|" + b.textContent + "|" + b.title)(document.getElementById("act-budget"))`); b != "true|Budget…|Only a running batch's budget can be set" {
		t.Errorf("budget button %q, want disabled on a finished batch with its reason", b)
	}
	// Its failed items' inputs: a download of the API's GET
	// /batches/{id}/inputs, in the source's format (inline: JSON Lines),
	// ready to hand to Correct….
	if name := evalJS[string](t, bctx, `document.getElementById("act-inputs").getAttribute("download") + "|" + document.getElementById("act-inputs").textContent`); name != "|Failed items' inputs" {
		t.Errorf("inputs link %q, want a download named \"Failed items' inputs\"", name)
	}
	if body := evalJS[string](t, bctx, `fetch(document.getElementById("act-inputs").href).then(r => r.text())`, chromedp.EvalAwaitPromise); body != `{"k":"no-text-1"}`+"\n"+`{"k":"no-text-2","body":"x"}`+"\n" {
		t.Errorf("failed items' inputs downloaded: %q", body)
	}
	run("quarantined tab", chromedp.Click(chromedp.CSS(`#tab-quarantined`)))
	waitJS("quarantined items", `document.querySelectorAll('#items[data-outcome="quarantined"] tr[data-key]').length === 2`, 30*time.Second)
	run("release long-1", chromedp.Click(chromedp.CSS(`button[data-release="long-1"]`)))
	waitJS("confirmation", `document.getElementById("confirm").open`, 10*time.Second)
	question := evalJS[string](t, bctx, `document.getElementById("confirm-title").textContent`)
	if question != "Release item long-1?" {
		t.Errorf("confirmation asks %q", question)
	}
	// Declining (Escape) does nothing.
	run("decline", chromedp.KeyEvent(kb.Escape))
	waitJS("declined", `!document.getElementById("confirm").open`, 10*time.Second)
	if it := findItem(t, enrichID, api.OutcomeQuarantined, "long-1"); it.Released {
		t.Fatal("long-1 released though the confirmation was declined")
	}
	run("release long-1 again", chromedp.Click(chromedp.CSS(`button[data-release="long-1"]`)))
	waitJS("confirmation", `document.getElementById("confirm").open`, 10*time.Second)
	if cls := evalJS[string](t, bctx, `document.getElementById("confirm-yes").className`); cls != "primary" {
		t.Errorf("release's confirm button is %q, want primary", cls)
	}
	run("confirm", chromedp.Click(chromedp.CSS(`#confirm-yes`)))
	waitJS("released", `document.getElementById("notice").textContent.includes("released long-1")`, 30*time.Second)
	if it := findItem(t, enrichID, api.OutcomeQuarantined, "long-1"); !it.Released {
		t.Fatal("the API does not show long-1 released")
	}
	if it := findItem(t, enrichID, api.OutcomeQuarantined, "long-2"); it.Released {
		t.Fatal("long-2 released too")
	}
	// Resume by keyboard: focus the button, Enter opens the confirmation
	// (focus on "Keep as is"), Tab to the confirm button, Enter.
	waitJS("resume button", `!!document.getElementById("act-resume") && !document.getElementById("act-resume").disabled`, 30*time.Second)
	run("resume by keyboard", chromedp.Focus(chromedp.CSS(`#act-resume`)), chromedp.KeyEvent(kb.Enter))
	waitJS("confirmation", `document.getElementById("confirm").open && document.activeElement.id === "confirm-no"`, 10*time.Second)
	run("confirm by keyboard", chromedp.KeyEvent(kb.Tab))
	waitJS("focus on confirm", `document.activeElement.id === "confirm-yes"`, 5*time.Second)
	run("confirm by keyboard", chromedp.KeyEvent(kb.Enter))
	wctx, cancelW := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelW()
	ev, err := env.api.WaitUntil(wctx, enrichID, 500*time.Millisecond, func(v handler.BatchView) bool { return v.Run == 2 && v.Status.Finished() }, nil)
	if err != nil {
		t.Fatalf("resume from the page: %v (run %d)", err, ev.Run)
	}
	waitJS("run 2 on the page", `!!document.querySelector('#runs tr[data-run="2"]') && document.querySelector("#batch-status .badge").dataset.status === "completed"`, time.Minute)
	// Run 2 ran the failed items and the released one again: long-1 is
	// quarantined again (still too long), the failures fail again.
	if ev.Census.Failed != 2 || ev.Census.Quarantined != 2 || ev.Census.Succeeded != 4 {
		t.Errorf("run 2 census %+v", ev.Census)
	}

	// Correct from the page: a file of corrected inputs for the two items
	// without text and the quarantined long-1, the key field filled in
	// with the batch's. A file naming a key that succeeded is refused,
	// naming it, and starts nothing; the right one is revision 2, whose
	// run 3 runs exactly those three; the page follows it and its runs
	// table names the revision; the census counts each key once.
	dir := t.TempDir()
	wrongFile, fixedFile := filepath.Join(dir, "wrong.jsonl"), filepath.Join(dir, "fixed.jsonl")
	if err := os.WriteFile(wrongFile, []byte(`{"k":"no-text-1","text":"x"}`+"\n"+`{"k":"ok-1","text":"y"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fixedFile, []byte(`{"k":"no-text-1","text":"now some text"}`+"\n"+`{"k":"no-text-2","text":"more"}`+"\n"+`{"k":"long-1","text":"short now"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := ev.Census
	correct := func(file string) {
		t.Helper()
		waitJS("correct button", `!!document.getElementById("act-correct") && !document.getElementById("act-correct").disabled`, 30*time.Second)
		run("correct", chromedp.Click(chromedp.CSS(`#act-correct`)))
		waitJS("corrections dialog", `document.getElementById("correct").open && document.getElementById("correct-key").value === "k"`, 10*time.Second)
		run("choose the file", chromedp.SetUploadFiles(chromedp.CSS(`#correct-file`), []string{file}))
	}
	correct(wrongFile)
	run("send", chromedp.Click(chromedp.CSS(`#correct-yes`)))
	waitJS("refused", `document.getElementById("notice").textContent.includes("ok-1") && document.getElementById("notice").textContent.includes("succeeded")`, 30*time.Second)
	if v, _ := env.api.Status(ctx, enrichID); v.Run != 2 || len(v.Revisions) != 0 {
		t.Fatalf("a refused correction changed the batch: run %d, revisions %+v", v.Run, v.Revisions)
	}
	correct(fixedFile)
	shot("correct", false)
	run("send", chromedp.Click(chromedp.CSS(`#correct-yes`)))
	waitJS("corrected", `document.getElementById("notice").textContent.includes("Revision 2: 3 corrected items run in run 3")`, 30*time.Second)
	cv, err := env.api.WaitUntil(wctx, enrichID, 500*time.Millisecond, func(v handler.BatchView) bool { return v.Run == 3 && v.Status.Finished() }, nil)
	if err != nil {
		t.Fatalf("correction from the page: %v (run %d)", err, cv.Run)
	}
	if c := cv.Census; c.Total != 8 || c.Succeeded != before.Succeeded+3 || c.Quarantined != 1 || c.Failed != 0 || cv.RunRevision != 2 {
		t.Errorf("after the correction (revision %d): %+v, before %+v", cv.RunRevision, c, before)
	}
	waitJS("run 3 on the page", `(() => { const r = document.querySelector('#runs tr[data-run="3"]');
		return !!r && r.cells[0].textContent === "3 · revision 2" && document.querySelector("#batch-status .badge").dataset.status === "completed"; })()`, time.Minute)
	shot("corrected", true)

	checkConsoleStates(&browserPage{t: t, ctx: bctx, url: url, run: run, waitJS: waitJS, shot: shot, setWidth: setWidth}, states)

	// An address with a stray "%" (not URI-encoded) shows the console's
	// answer instead of "Loading…" for ever.
	run("open a malformed address", chromedp.Navigate(url+"#/batch/100%"))
	waitJS("the malformed address answered", `(() => { const e = document.querySelector("#main .error"); return !!e && e.textContent.includes("Could not read the batch") && e.textContent.includes("100%"); })()`, 10*time.Second)

	// The list: both batches, newest first, counts written, attention flagged.
	run("open the list", chromedp.Navigate(url+"#/"))
	// The listing reads an eventually consistent index: a batch may show
	// a moment later, so the wait presses Refresh every 2 s until it does.
	listShows := func(cond string) string {
		return `(() => {
		const ok = ` + cond + `;
		if (!ok && Date.now() - (window.lastRefresh || 0) > 2000) {
			window.lastRefresh = Date.now();
			document.querySelector(".filters button").click();
		}
		return ok;
	})()`
	}
	listHas := listShows(`!!document.querySelector('#batches tr[data-id="` + enrichID + `"]') && !!document.querySelector('#batches tr[data-id="` + thumbID + `"]')`)
	waitJS("list rows", listShows(`!!document.querySelector('#batches tr[data-id="`+enrichID+`"]') && !!document.querySelector('#batches tr[data-id="`+thumbID+`"]') &&
		!!document.querySelector('#batches tr[data-id="`+stopID+`"][data-status="threshold_exceeded"]')`), 2*time.Minute)
	rows := evalJS[[]string](t, bctx, `[...document.querySelectorAll("#batches tr[data-id]")].map(tr => tr.dataset.id)`)
	if ie, it := slices.Index(rows, enrichID), slices.Index(rows, thumbID); ie > it {
		t.Errorf("list order %v: the newer %s after %s", rows, enrichID, thumbID)
	}
	rowText := func(id string) string {
		return strings.ReplaceAll(evalJS[string](t, bctx, `document.querySelector('#batches tr[data-id="`+id+`"]').innerText`), "\u00a0", " ")
	}
	row := rowText(thumbID)
	for _, w := range []string{"21 succeeded, 3 failed", "Needs attention", "24 of 24 done (100 %)", "87.5 % succeeded", "thumbnail", "S3", prefix + "*"} {
		if !strings.Contains(row, w) {
			t.Errorf("list row of %s lacks %q: %q", thumbID, w, row)
		}
	}
	if row := rowText(enrichID); !strings.Contains(row, "API") || !strings.Contains(row, "inline items") {
		t.Errorf("list row of %s lacks its source (API, inline items): %q", enrichID, row)
	}
	// The stopped batch: "ended", not "done", and a bar coloured by
	// outcome whose segments are the API's census (cancelled included).
	sv, err := env.api.Status(ctx, stopID)
	if err != nil || sv.Status != api.StatusThresholdExceeded || sv.Census == nil {
		t.Fatalf("stopped batch: %+v %v", sv, err)
	}
	if row := rowText(stopID); !strings.Contains(row, fmt.Sprintf("%d of %d ended (100 %%)", sv.Census.Total, sv.Census.Total)) || strings.Contains(row, " done ") || !strings.Contains(row, "threshold exceeded") {
		t.Errorf("list row of the stopped batch %s: %q, want ended (not done) and its status", stopID, row)
	}
	segs := evalJS[map[string]float64](t, bctx, `(() => { const bar = document.querySelector('#batches tr[data-id="`+stopID+`"] .mini-bar');
		const w = bar.getBoundingClientRect().width - 2; return Object.fromEntries([...bar.querySelectorAll(".seg")].map(s => [s.dataset.outcome, s.getBoundingClientRect().width / w])); })()`)
	for o, n := range map[string]int64{"succeeded": sv.Census.Succeeded, "failed": sv.Census.Failed, "quarantined": sv.Census.Quarantined, "cancelled": sv.Census.Cancelled} {
		share := float64(n) / float64(sv.Census.Total)
		if got, ok := segs[o]; n > 0 && (!ok || got < share-0.03 || got > share+0.03) || n == 0 && ok {
			t.Errorf("stopped batch bar: %s segment %.3f of the bar, census %d of %d (%.3f); segments %v", o, got, n, sv.Census.Total, share, segs)
		}
	}
	if sv.Census.Cancelled == 0 {
		t.Logf("the stopped batch ran every item before its stop (census %+v); its bar has no cancelled segment", sv.Census)
	}
	listDrawn := `document.querySelectorAll("#batches tr[data-id]").length > 0`
	fits(t, bctx, "list at 1280×800", "#batches")
	shot("list", true)
	setWidth(390, 844)
	run("narrow", chromedp.Sleep(300*time.Millisecond))
	waitJS("the list drawn at 390×844", listDrawn, 30*time.Second)
	fits(t, bctx, "list at 390×844", "#batches")
	shot("list-narrow", false)
	setWidth(1280, 800)

	// The status filter: refused batches hold neither of ours, completed
	// ones both.
	filter := func(status string) {
		t.Helper()
		evalJS[bool](t, bctx, `(() => { const s = document.getElementById("status-filter"); s.value = "`+status+`";
			s.dispatchEvent(new Event("change")); return true; })()`)
		waitJS("filter "+status, `location.hash.includes("status=`+status+`") && !!document.querySelector("#batches tbody tr") &&
			!document.querySelector("#batches tbody td.muted[colspan]")?.textContent.startsWith("Loading")`, 30*time.Second)
	}
	filter("refused")
	if rows := evalJS[[]string](t, bctx, `[...document.querySelectorAll("#batches tr[data-id]")].map(tr => tr.dataset.status)`); slices.ContainsFunc(rows, func(s string) bool { return s != "refused" }) {
		t.Errorf("filtered on refused, the list shows statuses %v", rows)
	}
	filter("completed")
	waitJS("completed batches", listHas, time.Minute)

	// Forget from the page, after a confirmation: the batch is gone.
	run("open the enrich batch", chromedp.Navigate(url+"#/batch/"+enrichID))
	waitJS("forget button", `!!document.getElementById("act-forget") && !document.getElementById("act-forget").disabled`, 30*time.Second)
	run("forget", chromedp.Click(chromedp.CSS(`#act-forget`)))
	waitJS("confirmation", `document.getElementById("confirm").open`, 10*time.Second)
	run("confirm", chromedp.Click(chromedp.CSS(`#confirm-yes`)))
	waitJS("back on the list", `location.hash === "#/" && document.getElementById("notice").textContent.includes("forgotten `+enrichID+`")`, time.Minute)
	if _, err := env.api.Status(ctx, enrichID); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("after forget from the page, status: %v, want not found", err)
	}
}

// progressState is the batch page's progress bar, status, cost box and
// source, as the browser test reads them.
type progressState struct {
	Status string  `json:"status"`
	Value  float64 `json:"value"`
	Max    float64 `json:"max"`
	Text   string  `json:"text"`
	Cost   string  `json:"cost"`
	Source string  `json:"source"`
}

// fits checks that the page fits its window: nothing scrolls sideways, and
// no cell of the tables under selector is cut off — each ends inside the
// window, and holds its text without overflowing.
func fits(t *testing.T, ctx context.Context, what, selector string) {
	t.Helper()
	bad := evalJS[[]string](t, ctx, `(() => {
		const out = [], w = window.innerWidth;
		if (document.documentElement.scrollWidth > w) out.push("the page is " + document.documentElement.scrollWidth + " px wide in a " + w + " px window");
		for (const c of document.querySelectorAll("`+selector+` th, `+selector+` td, `+selector+` .scroll")) {
			const r = c.getBoundingClientRect();
			if (r.width === 0) continue;
			if (r.right > w + 0.5) out.push((c.dataset.label || c.textContent.slice(0, 30)) + ": ends at " + Math.round(r.right) + " px");
			if (c.scrollWidth > c.clientWidth + 1) out.push((c.dataset.label || c.className || c.tagName) + ": " + c.scrollWidth + " px of content in " + c.clientWidth + " px");
		}
		return out;
	})()`)
	if len(bad) > 0 {
		t.Errorf("%s does not fit: %s", what, strings.Join(bad, "; "))
	}
}

// evalJS evaluates a JavaScript expression in the page of ctx.
func evalJS[T any](t *testing.T, ctx context.Context, expr string, opts ...chromedp.EvaluateOption) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, opts...))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// findItem returns the item key of the batch's outcome page (fails if absent).
func findItem(t *testing.T, id string, o api.Outcome, key string) api.Item {
	t.Helper()
	p, err := env.api.Items(context.Background(), id, o, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range p.Items {
		if it.Key == key {
			return it
		}
	}
	t.Fatalf("batch %s has no %s item %s", id, o, key)
	return api.Item{}
}
