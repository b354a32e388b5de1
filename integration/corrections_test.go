//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/pipeline/effects"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// correctionSource is n items {"k":"r0000","n":0} … in JSON lines; the
// keys listed in bad carry "bad":true, which the corrections route's
// receiver refuses with 422 (a permanent failure).
func correctionSource(n int, bad map[string]bool) []byte {
	var b bytes.Buffer
	for i := range n {
		k := fmt.Sprintf("r%04d", i)
		fmt.Fprintf(&b, `{"k":%q,"n":%d,"bad":%v}`+"\n", k, i, bad[k])
	}
	return b.Bytes()
}

// failedInputs is the lines of correctionSource(n, bad) of the bad keys,
// in source order: what `items --outcome failed --inputs` exports.
func failedInputs(n int, bad map[string]bool) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(string(correctionSource(n, bad)), "\n") {
		if strings.Contains(l, `"bad":true`) {
			b.WriteString(l)
		}
	}
	return b.String()
}

// badKeys is every step-th key of n, count of them.
func badKeys(n, count int) map[string]bool {
	bad := map[string]bool{}
	for i := 0; len(bad) < count; i++ {
		bad[fmt.Sprintf("r%04d", (i*(n/count)+3)%n)] = true
	}
	return bad
}

// fixedLines is the corrections for keys: their items with "fixed":true
// and no bad flag.
func fixedLines(keys map[string]bool) []byte {
	var b bytes.Buffer
	for k := range keys {
		fmt.Fprintf(&b, `{"k":%q,"fixed":true}`+"\n", k)
	}
	return b.Bytes()
}

// refusesBad is the receiver of the corrections tests: 422 for an input
// marked bad, 200 otherwise.
func refusesBad(_ string, input []byte) int {
	if bytes.Contains(input, []byte(`"bad":true`)) {
		return 422
	}
	return 200
}

// mergedResults reads the results files of the batch's last run: every
// line, by key, failing on a key that is there twice.
func mergedResults(t *testing.T, id string) (api.Report, map[string]api.ResultLine) {
	t.Helper()
	rep, err := env.api.Report(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]api.ResultLine{}
	for _, f := range rep.Results.Files {
		for _, l := range readResults(t, f.URI) {
			if _, dup := lines[l.Key]; dup {
				t.Errorf("results of run %d: %s twice", rep.Run, l.Key)
			}
			lines[l.Key] = l
		}
	}
	return rep, lines
}

// checkMerged checks the merged results of a corrected batch of n items:
// n lines, every one succeeded, the corrected keys from run 2 and
// revision 2 (with their corrected input's output), the others from run 1
// and revision 1; the receiver saw each corrected key twice (its bad input,
// then its fixed one) and every other key once (the other items of the
// corrected items' packs were counted, not run again).
func checkMerged(t *testing.T, id, route string, n int, bad map[string]bool) {
	t.Helper()
	rep, lines := mergedResults(t, id)
	c := rep.Census
	if rep.Run != 2 || rep.Revision == nil || rep.Revision.N != 2 || c.Total != int64(n) || c.Succeeded != int64(n) || c.Failed+c.Quarantined+c.Cancelled+c.Pending != 0 {
		t.Fatalf("report of run %d (revision %+v): %+v", rep.Run, rep.Revision, c)
	}
	if len(lines) != n {
		t.Fatalf("merged results: %d keys, want %d", len(lines), n)
	}
	calls := env.hook.counts(route)
	for i := range n {
		k := fmt.Sprintf("r%04d", i)
		l, ok := lines[k]
		wantRun, wantCalls := 1, 1
		if bad[k] {
			wantRun, wantCalls = 2, 2
		}
		if !ok || l.Outcome != api.OutcomeSucceeded || l.Run != wantRun || l.Revision != wantRun {
			t.Errorf("%s: %+v, want succeeded by run %d, revision %d", k, l, wantRun, wantRun)
		}
		if calls[k] != wantCalls {
			t.Errorf("%s: %d calls, want %d", k, calls[k], wantCalls)
		}
		if bad[k] {
			if in := env.hook.inputsOf(route, k); len(in) != 2 || !strings.Contains(in[1], `"fixed":true`) {
				t.Errorf("%s: inputs %q, want its corrected input last", k, in)
			}
		}
	}
}

// Guards docs/api.md "Corrections" on the deployed stack, through the
// API: 200 items (BULKRUN_CORRECTIONS_ITEMS) in packs of 10 (the stack
// default), 8 (one in 250, at least 8) fail on bad input;
// a correction naming a key that succeeded, or one the batch does not
// have, is refused with the key named and changes nothing; the 8
// corrected items are revision 2, whose run 2 runs exactly them with
// their corrected inputs; the same corrections again are the same
// revision (200, no new run); the run's report counts every key once
// (200 succeeded) and its results are one merged file set of 200 lines,
// each naming the run and revision that produced it; forget removes
// every revision's objects.
func TestCorrectionsByAPI(t *testing.T) {
	t.Parallel() // its own batches and receiver route: beside the other parallel tests
	ctx := context.Background()
	id := newID(t)
	n := correctionItems(t, 200)
	bad := badKeys(n, max(8, n/250))
	url := env.hook.routeInput(id, refusesBad)
	var items bytes.Buffer
	items.WriteByte('[')
	items.Write(bytes.ReplaceAll(bytes.TrimSpace(correctionSource(n, bad)), []byte("\n"), []byte(",")))
	items.WriteByte(']')
	req := webhookRequest(id, url, items.Bytes())
	req.KeyField = "k"
	if _, err := env.api.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	if v := wait(t, id); v.Census.Succeeded != int64(n-len(bad)) || v.Census.Failed != int64(len(bad)) || v.ItemsPerMessage != 10 {
		t.Fatalf("run 1: %d items per message, %+v", v.ItemsPerMessage, v.Census)
	}

	// Refusals name the key; nothing changes.
	var ok1 string
	for i := range n {
		if k := fmt.Sprintf("r%04d", i); !bad[k] {
			ok1 = k
			break
		}
	}
	var some string
	for k := range bad {
		some = k
		break
	}
	for name, tt := range map[string]struct{ items, key, says string }{
		"a key that succeeded":  {fmt.Sprintf(`[{"k":%q},{"k":%q}]`, some, ok1), ok1, "succeeded in run 1"},
		"a key not the batch's": {fmt.Sprintf(`[{"k":%q},{"k":"nope-17"}]`, some), "nope-17", "has no item with this key"},
	} {
		_, err := env.api.Correct(ctx, id, api.CorrectRequest{Source: api.SourceSpec{Items: json.RawMessage(tt.items)}})
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != 400 || ae.Body.Key != tt.key || !strings.Contains(ae.Body.Message, tt.says) {
			t.Errorf("%s: %v (%+v), want 400 naming %s", name, err, ae, tt.key)
		}
	}
	if v, err := env.api.Status(ctx, id); err != nil || v.Run != 1 || len(v.Revisions) != 0 {
		t.Fatalf("after the refusals: run %d, revisions %+v (%v)", v.Run, v.Revisions, err)
	}

	fixed := api.SourceSpec{Items: jsonArray(fixedLines(bad))}
	cv, err := env.api.Correct(ctx, id, api.CorrectRequest{Source: fixed})
	if err != nil || cv.Batch.Created == nil || !*cv.Batch.Created || cv.Revision.N != 2 || cv.Revision.Run != 2 || cv.Revision.Items != int64(len(bad)) || len(cv.Revision.Digest) != 64 {
		t.Fatalf("correct: %+v %v", cv, err)
	}
	if cv.Revision.RunItems < int64(len(bad)) || cv.Revision.RunItems > int64(10*len(bad)) {
		t.Errorf("the run counts %d items, want the %d corrected and the others of their packs of 10", cv.Revision.RunItems, len(bad))
	}
	again, err := env.api.Correct(ctx, id, api.CorrectRequest{Source: fixed})
	if err != nil || again.Batch.Created == nil || *again.Batch.Created || again.Revision.N != 2 || again.Revision.Digest != cv.Revision.Digest {
		t.Fatalf("the same corrections again: %+v %v, want revision 2 answered", again, err)
	}
	v := wait(t, id)
	if v.Run != 2 || v.Status != api.StatusCompleted || v.Census.Total != int64(n) || v.Census.Succeeded != int64(n) {
		t.Fatalf("run 2: run %d %s %+v", v.Run, v.Status, v.Census)
	}
	if again, err := env.api.Correct(ctx, id, api.CorrectRequest{Source: fixed}); err != nil || *again.Batch.Created || again.Batch.Run != 2 {
		t.Fatalf("the same corrections after their run: %+v %v", again, err)
	}
	checkMerged(t, id, id, n, bad)
	t.Logf("%d items, %d failed and corrected: revision 2 (%d run items), run 2 report %d succeeded of %d", n, len(bad), cv.Revision.RunItems, v.Census.Succeeded, v.Census.Total)
	if err := env.api.Forget(ctx, id); err != nil {
		t.Fatal(err)
	}
	out, err := env.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &env.bucket, Prefix: aws.String("batches/" + id + "/")})
	if err != nil || len(out.Contents) != 0 {
		var left []string
		if out != nil {
			for _, o := range out.Contents {
				left = append(left, aws.ToString(o.Key))
			}
		}
		t.Fatalf("after forget: %v (%v)", left, err)
	}
}

// correctionItems is the size of the corrections stories:
// BULKRUN_CORRECTIONS_ITEMS (at least 100; 5,000 for the full story), else
// def.
func correctionItems(t *testing.T, def int) int {
	n := def
	if s := os.Getenv("BULKRUN_CORRECTIONS_ITEMS"); s != "" {
		if _, err := fmt.Sscan(s, &n); err != nil || n < 100 || n > 10000 {
			t.Fatalf("BULKRUN_CORRECTIONS_ITEMS=%q: want a count from 100 to 10,000", s)
		}
	}
	return n
}

// jsonArray makes JSON lines a JSON array.
func jsonArray(lines []byte) json.RawMessage {
	return json.RawMessage("[" + string(bytes.ReplaceAll(bytes.TrimSpace(lines), []byte("\n"), []byte(","))) + "]")
}

// Guards docs/cli.md "Correcting items" on the deployed stack: a batch
// submitted by the CLI from a local file (N items, 10 failing on bad
// input; BULKRUN_CORRECTIONS_ITEMS sets N, 5,000 for the full story),
// `bulkrun correct ID FILE` with a key that succeeded is refused naming
// it (exit 1, nothing uploaded); with the failed items' fixed inputs it
// starts revision 2 and its run, and `--watch` ends with every item
// succeeded (exit 0); the same command again starts nothing; `bulkrun
// results` prints one merged set of N lines, each key once with the run
// and revision that produced it; `bulkrun upload FILE --corrects ID`
// with other corrections of the same batch (all its items succeeded now)
// is refused naming the key; `bulkrun status` lists the revision.
func TestCorrectionsByCLI(t *testing.T) {
	t.Parallel() // its own batches and receiver route: beside the other parallel tests
	n := correctionItems(t, 300)
	run := cliRunner(t)
	id := newID(t)
	bad := badKeys(n, max(10, n/250))
	url := env.hook.routeInput(id, refusesBad)
	dir := t.TempDir()
	src := filepath.Join(dir, "records.jsonl")
	if err := os.WriteFile(src, correctionSource(n, bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, code := run("submit", src, "--pipeline", "webhook", "--id", id, "--key-field", "k",
		"--options", fmt.Sprintf(`{"url":%q}`, url), "--watch", "-o", "json"); code != 3 {
		t.Fatalf("submit --watch: exit %d, want 3 (items failed)", code)
	}
	var some, ok1 string
	for i := range n {
		if k := fmt.Sprintf("r%04d", i); bad[k] && some == "" {
			some = k
		} else if !bad[k] && ok1 == "" {
			ok1 = k
		}
	}
	wrong := filepath.Join(dir, "wrong.jsonl")
	if err := os.WriteFile(wrong, []byte(fmt.Sprintf("{\"k\":%q}\n{\"k\":%q}\n", some, ok1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := run("correct", id, wrong); code != 1 || !strings.Contains(stderr, ok1) || !strings.Contains(stderr, "succeeded in run 1") {
		t.Fatalf("correct with a succeeded key: exit %d, %q; want 1 naming %s", code, stderr, ok1)
	}
	// The failed items' inputs, exported, edited and handed back.
	fixed := filepath.Join(dir, "fixed.jsonl")
	if _, stderr, code := run("items", id, "--outcome", "failed", "--inputs", "--file", fixed); code != 0 || !strings.Contains(stderr, fmt.Sprintf("%d inputs of failed items", len(bad))) {
		t.Fatalf("items --inputs: exit %d, %q", code, stderr)
	}
	exported, err := os.ReadFile(fixed)
	if err != nil {
		t.Fatal(err)
	}
	if want := failedInputs(n, bad); string(exported) != want {
		t.Fatalf("items --inputs wrote %q, want the failed items' inputs in source order %q", exported, want)
	}
	if err := os.WriteFile(fixed, bytes.ReplaceAll(exported, []byte(`"bad":true`), []byte(`"bad":false,"fixed":true`)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := run("correct", id, fixed, "--watch")
	if code != 0 || strings.TrimSpace(out) == "" || !strings.Contains(stderr, fmt.Sprintf("revision 2 corrects %d items; run 2 runs them", len(bad))) {
		t.Fatalf("correct --watch: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if _, stderr, code := run("correct", id, fixed); code != 0 || !strings.Contains(stderr, "revision 2 already") || !strings.Contains(stderr, "nothing new started") {
		t.Fatalf("the same correct again: exit %d, %q", code, stderr)
	}
	all, _, code := run("results", id)
	seen := map[string]api.ResultLine{}
	byRun := map[int]int{}
	if err := api.ReadResults(strings.NewReader(all), func(l api.ResultLine) error {
		if _, dup := seen[l.Key]; dup {
			return fmt.Errorf("%s twice", l.Key)
		}
		seen[l.Key] = l
		byRun[l.Run]++
		if l.Outcome != api.OutcomeSucceeded || l.Run != l.Revision || (l.Run == 2) != bad[l.Key] {
			return fmt.Errorf("line %+v", l)
		}
		return nil
	}); err != nil || code != 0 || len(seen) != n {
		t.Fatalf("results: exit %d, %d keys (%v)", code, len(seen), err)
	}
	t.Logf("merged results: %d lines, %d keys, by run %v (%d corrected)", strings.Count(all, "\n"), len(seen), byRun, len(bad))
	checkMerged(t, id, id, n, bad)
	// The upload option: corrections of a key that succeeded (all have
	// now) are refused by the upload too, naming the key.
	again := filepath.Join(dir, "again.jsonl")
	if err := os.WriteFile(again, []byte(fmt.Sprintf("{\"k\":%q,\"fixed\":2}\n", some)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := run("upload", again, "--corrects", id, "--name", "fixes/"+id+".jsonl"); code != 1 || !strings.Contains(stderr, some) || !strings.Contains(stderr, "succeeded in run 2") {
		t.Fatalf("upload --corrects of succeeded items: exit %d, %q", code, stderr)
	}
	if out, _, code := run("status", id); code != 0 || !strings.Contains(string(out), fmt.Sprintf("revision 2: %d corrected items, run 2", len(bad))) {
		t.Fatalf("status: exit %d\n%s", code, out)
	}
}

// Guards docs/sources.md "Upload instead" (corrections by upload): an object uploaded
// under incoming/ with x-amz-meta-corrects: ID (bulkrun upload FILE
// --corrects ID) corrects that batch as the API does — a new revision
// and its run over exactly the corrected items — and the same file
// uploaded again under another name is the same revision (no new run).
func TestCorrectionsByUpload(t *testing.T) {
	t.Parallel() // its own batches and receiver route: beside the other parallel tests
	ctx := context.Background()
	run := cliRunner(t)
	id := newID(t)
	const n = 60
	bad := badKeys(n, 3)
	url := env.hook.routeInput(id, refusesBad)
	req := webhookRequest(id, url, jsonArray(correctionSource(n, bad)))
	req.KeyField = "k"
	if _, err := env.api.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	if v := wait(t, id); v.Census.Failed != 3 {
		t.Fatalf("run 1: %+v", v.Census)
	}
	fixed := filepath.Join(t.TempDir(), "fixed.jsonl")
	if err := os.WriteFile(fixed, fixedLines(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"fixes/" + id + ".jsonl", "fixes/" + id + " (1).jsonl"} {
		out, stderr, code := run("upload", fixed, "--corrects", id, "--name", name, "--watch")
		if first, _, _ := strings.Cut(out, "\n"); code != 0 || first != id {
			t.Fatalf("upload %d: exit %d, stdout %q", i, code, out)
		}
		want := "revision 2 corrects 3 items; run 2 runs them"
		if i == 1 {
			want = "revision 2 already"
		}
		if !strings.Contains(stderr, want) {
			t.Fatalf("upload %d said %q, want %q", i, stderr, want)
		}
	}
	if v, err := env.api.Status(ctx, id); err != nil || v.Run != 2 || len(v.Revisions) != 1 || v.Census.Succeeded != n {
		t.Fatalf("after the uploads: %+v %v", v, err)
	}
	checkMerged(t, id, id, n, bad)
}

// Guards docs/api.md "Corrections" with staged effects and packs, on the
// emulator's DynamoDB and SQS: 20 items in packs (items per message 10,
// the stack default), each staging an ADD of 1 on its own row of a user
// table and failing permanently when its input is bad (3 are). Run 1
// applies the 17 good items' writes once and none of the bad ones'. The
// correction run over the 3 (every message delivered twice) applies each
// corrected item's write once, from its corrected input, and none again
// for the other items of their packs, which are counted, not run: every
// row ends applied exactly once, the census 20 succeeded.
func TestCorrectionsKeepStagedEffectsOnce(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()
	table := effectsTable(t)
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		if err := stageCount(ctx, table, req); err != nil {
			return pipeline.Result{}, err
		}
		if bytes.Contains(req.Input, []byte(`"bad":true`)) {
			return pipeline.Result{}, pipeline.Permanent(errors.New("bad input after staging"))
		}
		return pipeline.Result{Output: req.Input}, nil
	})
	h.worker.Staging = effects.Staging([]string{table})
	laneBindEffects(t, h, table)
	id := newID(t)
	const n = 20
	bad := map[string]bool{"r0003": true, "r0009": true, "r0016": true}
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", KeyField: "k", ItemsPerMessage: 10,
		Source: api.SourceSpec{Items: jsonArray(correctionSource(n, bad))}}); err != nil {
		t.Fatal(err)
	}
	// deliver handles every message on the queue twice over (fan-out
	// messages expand into pack messages, which come back to the queue).
	deliver := func() {
		for round := 0; round < 4; round++ {
			ds := h.receive(t, 100)
			if len(ds) == 0 {
				return
			}
			h.worker.Handle(ctx, append(append([]worker.Delivery{}, ds...), ds...))
		}
	}
	deliver()
	r, err := h.finalizer.Finalize(ctx, id, 1)
	if err != nil || r.Report.Census.Succeeded != n-3 || r.Report.Census.Failed != 3 {
		t.Fatalf("run 1: %+v %v", r.Report.Census, err)
	}
	cr, err := h.submitter.Correct(ctx, id, api.CorrectRequest{Source: api.SourceSpec{Items: jsonArray(fixedLines(bad))}})
	if err != nil || !cr.Created || cr.Batch.Run != 2 || cr.Revision.RunItems <= 3 {
		t.Fatalf("correct: %+v %v", cr, err)
	}
	deliver()
	r, err = h.finalizer.Finalize(ctx, id, 2)
	if err != nil || r.Report.Census.Succeeded != n || r.Report.Census.Total != n {
		t.Fatalf("run 2: %+v %v", r.Report.Census, err)
	}
	for i := range n {
		k := fmt.Sprintf("r%04d", i)
		calls := int64(1)
		if bad[k] {
			calls = 2
		}
		if got := applied(t, table, k); got != 1 {
			t.Errorf("%s: staged write applied %d times, want once", k, got)
		}
		if c := h.callsOf(k); c != calls {
			t.Errorf("%s: %d pipeline calls, want %d", k, c, calls)
		}
	}
}

// Guards docs/api.md "Inputs of failed items" on the deployed stack: a
// CSV source with ";" as delimiter and quoted cells (30 items, 5 failing
// on bad input), its failed items' inputs read through GET
// /batches/{id}/inputs two items a page — CSV with the source's header
// and delimiter on every page, every failed item once, its cells as the
// source held them — edited, handed back as a corrections object, and
// run 2 ends with every item succeeded, the receiver seeing the edited
// inputs; quarantined items' inputs are the header alone, and an outcome
// a correction does not take is 400 naming outcome.
func TestCorrectionsFromInputsByAPI(t *testing.T) {
	t.Parallel() // its own batch and receiver route
	ctx := context.Background()
	id := newID(t)
	const n = 30
	bad := map[string]bool{}
	var src strings.Builder
	src.WriteString("k;name;bad\r\n")
	for i := range n {
		k := fmt.Sprintf("r%04d", i)
		mark := "no"
		if i%6 == 1 {
			bad[k], mark = true, "yes"
		}
		fmt.Fprintf(&src, "%s;\"Ann; \"\"Jr\"\" %d\";%s\r\n", k, i, mark)
	}
	url := env.hook.routeInput(id, func(_ string, input []byte) int {
		if bytes.Contains(input, []byte(`"bad":"yes"`)) {
			return 422
		}
		return 200
	})
	req := webhookRequest(id, url, nil)
	req.Source, req.KeyField = api.SourceSpec{Object: putObject(t, "it-sources/"+id+".csv", src.String())}, "k"
	if _, err := env.api.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	v := wait(t, id)
	if v.Census.Failed != int64(len(bad)) || v.Census.Succeeded != int64(n-len(bad)) {
		t.Fatalf("run 1: %+v", v.Census)
	}
	if v.CSV == nil || v.CSV.Delimiter != ";" || strings.Join(v.CSV.Header, ",") != "k,name,bad" {
		t.Errorf("the batch's CSV shape: %+v, want ; and k name bad", v.CSV)
	}

	var fixed bytes.Buffer
	got := map[string]bool{}
	cursor, pages := "", 0
	for {
		p, err := env.api.Inputs(ctx, id, api.OutcomeFailed, cursor, 2)
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		pages++
		body := string(p.Body)
		if p.Format != api.FormatCSV || !strings.HasPrefix(body, "k;name;bad\n") {
			t.Fatalf("page %d: %s %q, want CSV with the source's header", pages, p.Format, body)
		}
		r := csv.NewReader(strings.NewReader(body))
		r.Comma = ';'
		recs, err := r.ReadAll()
		if err != nil || len(recs) != p.Count+1 || p.Count > 2 {
			t.Fatalf("page %d: %q: %d records, count %d (%v)", pages, body, len(recs), p.Count, err)
		}
		for _, rec := range recs[1:] {
			var i int
			fmt.Sscanf(rec[0], "r%04d", &i)
			if !bad[rec[0]] || got[rec[0]] || rec[1] != fmt.Sprintf("Ann; \"Jr\" %d", i) || rec[2] != "yes" {
				t.Errorf("page %d: record %q (seen before: %v)", pages, rec, got[rec[0]])
			}
			got[rec[0]] = true
		}
		if pages > 1 {
			body = strings.TrimPrefix(body, "k;name;bad\n")
		}
		fixed.WriteString(strings.ReplaceAll(body, ";yes\n", ";no\n"))
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	if len(got) != len(bad) || pages != 3 {
		t.Fatalf("%d failed items' inputs in %d pages, want %d in 3", len(got), pages, len(bad))
	}
	if p, err := env.api.Inputs(ctx, id, api.OutcomeQuarantined, "", 0); err != nil || p.Count != 0 || string(p.Body) != "k;name;bad\n" || p.NextCursor != "" {
		t.Errorf("quarantined: %+v %q (%v), want the header alone", p, p.Body, err)
	}
	var ae *client.APIError
	if _, err := env.api.Inputs(ctx, id, api.OutcomeSucceeded, "", 0); !errors.As(err, &ae) || ae.Status != 400 || ae.Body.Field != "outcome" {
		t.Errorf("outcome succeeded: %v, want 400 naming outcome", err)
	}

	cv, err := env.api.Correct(ctx, id, api.CorrectRequest{Source: api.SourceSpec{Object: putObject(t, "it-sources/"+id+"-fixed.csv", fixed.String())}})
	if err != nil || cv.Revision.Items != int64(len(bad)) {
		t.Fatalf("correct with the edited inputs: %+v %v", cv.Revision, err)
	}
	if v := wait(t, id); v.Run != 2 || v.Status != api.StatusCompleted || v.Census.Succeeded != n {
		t.Fatalf("run 2: run %d %s %+v", v.Run, v.Status, v.Census)
	}
	for k := range bad {
		if in := env.hook.inputsOf(id, k); len(in) != 2 || !strings.Contains(in[1], `"bad":"no"`) || !strings.Contains(in[1], `Ann; \"Jr\"`) {
			t.Errorf("%s: inputs %q, want its edited input last", k, in)
		}
	}
	if p, err := env.api.Inputs(ctx, id, api.OutcomeFailed, "", 0); err != nil || p.Count != 0 {
		t.Errorf("after run 2: %d failed items' inputs (%v), want none", p.Count, err)
	}
}
