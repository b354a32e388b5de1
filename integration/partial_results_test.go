//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bulkrun/bulkrun/integration/testbed/meter"
	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/control"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// partialLines streams the partial results of id through the deployed
// API, limit lines a page, and returns the lines and the pages' sizes.
func partialLines(t *testing.T, id string, limit int) ([]api.ResultLine, []int) {
	t.Helper()
	var lines []api.ResultLine
	var pages []int
	cursor := ""
	for {
		p, err := env.api.PartialResults(context.Background(), id, cursor, limit)
		if err != nil {
			t.Fatalf("partial results page %d: %v", len(pages)+1, err)
		}
		if p.Order != api.ResultOrderKey {
			t.Fatalf("order %q, want key (one item per message)", p.Order)
		}
		lines = append(lines, p.Lines...)
		pages = append(pages, len(p.Lines))
		if p.NextCursor == "" {
			return lines, pages
		}
		cursor = p.NextCursor
	}
}

// recordedLines is the oracle: every item row of the batch read by a
// full merge of its shards (Store.ScanItems), kept where its outcome in
// the current run is terminal, as finalize would write its line.
func recordedLines(t *testing.T, id string) []api.ResultLine {
	t.Helper()
	ctx := context.Background()
	b, err := env.store.GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var out []api.ResultLine
	err = env.store.ScanItems(ctx, id, b.ListShards, func(it ledger.Item) error {
		if o, ok := ledger.OutcomeInRun(it, b); ok && o.Terminal() {
			out = append(out, ledger.ResultLineOf(it, o))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameLines(t *testing.T, what string, got, want []api.ResultLine) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d lines, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, _ := json.Marshal(got[i])
		w, _ := json.Marshal(want[i])
		if string(g) != string(w) {
			t.Fatalf("%s: line %d is %s, want %s", what, i, g, w)
		}
	}
}

// TestPartialResultsWhileARunGoes: a webhook batch (one item per
// message, a slow receiver: 200 ms a call, every tenth key refused for
// good) is paused once about half its items ended; then `GET
// /batches/{id}/results/partial` returns exactly the outcomes recorded
// (the item rows read whole are the oracle), in key byte order, at
// several page sizes, within its read bound per call (the DynamoDB units
// of each page, metered by AWS's billing rules on an in-process
// control.Control over the same table). Unpaused and finished, the
// stream equals the run's results files, each outcome's lines in its
// file's order. BULKRUN_PARTIAL_ITEMS sets the batch's size (default
// 1,000; at its 50 requests a second, about 60 items run on after the
// pause).
func TestPartialResultsWhileARunGoes(t *testing.T) {
	// Not in parallel: beside the parallel tests its 1,000 calls at 50 a
	// second (200 ms each) and its metered reads added to a load under
	// which a clean CI run on 2026-12-06 timed out three other tests.
	ctx := context.Background()
	n := 1000
	if v := os.Getenv("BULKRUN_PARTIAL_ITEMS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	id := newID(t)
	// The receiver itself pauses the batch at its (n/2)-th call, so the
	// pause lands about half way whatever the emulator's pace. The batch
	// is paced at 50 requests a second, so that what runs on after the
	// pause is bounded by the rate, not by how many messages the item
	// function has taken: the calls in flight (50/s × 200 ms) and those
	// that start within worker.StopCheck (1 s) of the pause being
	// recorded. Unpaced, the emulator's item function took every message
	// at once on a quiet machine, and all 1,000 items ended before the
	// pause.
	var mu sync.Mutex
	called := 0
	paused := make(chan error, 1)
	url := env.hook.route(id, func(key string, _ int) int {
		mu.Lock()
		called++
		if called == n/2 {
			go func() { _, err := env.api.Pause(context.Background(), id); paused <- err }()
		}
		mu.Unlock()
		time.Sleep(200 * time.Millisecond)
		if strings.HasSuffix(key, "7") && len(key) > 1 && key[len(key)-2] == '1' {
			return http.StatusBadRequest // …17: failed for good
		}
		return http.StatusOK
	})
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"k":"k%06d"}`, (i*7919)%n) // keys far from the manifest's order
	}
	start := time.Now()
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "webhook", KeyField: "k", ItemsPerMessage: 1,
		Rate:   &api.Rate{RequestsPerSecond: 50},
		Source: api.SourceSpec{Items: json.RawMessage("[" + strings.Join(items, ",") + "]")}, Options: json.RawMessage(fmt.Sprintf(`{"url":%q}`, url))}); err != nil {
		t.Fatal(err)
	}
	// About half way the receiver paused the batch; let the items in
	// flight end.
	select {
	case err := <-paused:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Minute):
		t.Fatalf("half of %d items were not called in 20 minutes", n)
	}
	calls := func() int {
		c := 0
		for _, k := range env.hook.counts(id) {
			c += k
		}
		return c
	}
	for last := -1; ; {
		time.Sleep(5 * time.Second)
		if now := calls(); now == last {
			break
		} else {
			last = now
		}
	}
	want := recordedLines(t, id)
	t.Logf("paused at %d of %d items with a recorded outcome (%.0f %%), %s after submit", len(want), n, 100*float64(len(want))/float64(n), time.Since(start).Round(time.Second))
	if len(want) < n/4 || len(want) >= n {
		t.Fatalf("%d of %d items recorded: want the batch part done", len(want), n)
	}
	keys := make([]string, len(want))
	for i, l := range want {
		keys[i] = l.Key
	}
	if !slices.IsSorted(keys) {
		t.Fatal("the oracle is not in key order")
	}
	failed := 0
	for _, l := range want {
		if l.Outcome == api.OutcomeFailed {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("no failed item among the recorded: the check would not see outcomes apart")
	}
	for _, limit := range []int{0, 97} {
		t0 := time.Now()
		got, pages := partialLines(t, id, limit)
		sameLines(t, fmt.Sprintf("paused, limit %d", limit), got, want)
		t.Logf("partial results at %d of %d items, limit %d: %d lines in key order (%d failed) in %d pages %v, %s", len(want), n, limit, len(got), failed, len(pages), pages, time.Since(t0).Round(time.Millisecond))
	}

	// Read units per call: the same pages through an in-process
	// control.Control whose DynamoDB client is metered.
	m := meter.New(env.aws)
	cfg := env.aws.Copy()
	m.Attach(&cfg)
	c := &control.Control{Store: dynamo.New(dynamodb.NewFromConfig(cfg), env.table)}
	b, _ := env.store.GetBatch(ctx, id)
	cursor, total := "", 0
	var units []string
	var queries int
	for {
		m.Reset()
		p, err := c.PartialResults(ctx, id, cursor, 1000)
		if err != nil {
			t.Fatal(err)
		}
		u := m.Usage()
		queries += u.Calls["DynamoDB.Query"]
		units = append(units, fmt.Sprintf("%d lines: %.1f RRU (%d Query, %d GetItem)", len(p.Lines), u.ReadUnits(nil), u.Calls["DynamoDB.Query"], u.Calls["DynamoDB.GetItem"]))
		total += len(p.Lines)
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
	}
	t.Logf("read units per call (limit 1000, %d list shards, metered by AWS's rules): %s", b.ListShards, strings.Join(units, "; "))
	if total != len(want) {
		t.Fatalf("metered stream: %d lines, want %d", total, len(want))
	}

	// Unpaused and finished: the stream is the run's results.
	if _, err := env.api.Unpause(ctx, id); err != nil {
		t.Fatal(err)
	}
	ctxw, cancel := context.WithTimeout(ctx, 25*time.Minute)
	defer cancel()
	final, err := env.api.Wait(ctxw, id, 2*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if final.Status != api.StatusCompleted && final.Status != api.StatusThresholdExceeded {
		t.Fatalf("finished %s", final.Status)
	}
	got, pages := partialLines(t, id, 0)
	if len(got) != n {
		t.Fatalf("after the run: %d lines, want %d", len(got), n)
	}
	rep, err := env.api.Report(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range api.TerminalOutcomes() {
		var file []api.ResultLine
		if loc, ok := rep.Results.Files[o]; ok {
			key := strings.TrimPrefix(loc.URI, "s3://"+env.bucket+"/")
			obj, err := env.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: &env.bucket, Key: &key})
			if err != nil {
				t.Fatal(err)
			}
			err = api.ReadResults(obj.Body, func(l api.ResultLine) error { file = append(file, l); return nil })
			obj.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
		var mine []api.ResultLine
		for _, l := range got {
			if l.Outcome == o {
				mine = append(mine, l)
			}
		}
		sameLines(t, "after the run, "+string(o), mine, file)
	}
	t.Logf("after the run (%s): %d lines in %d pages equal the results files", final.Status, len(got), len(pages))
}
