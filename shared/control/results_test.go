package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func partialBatch(id string, items, shards, k int) ledger.Batch {
	return ledger.Batch{
		Batch: api.Batch{ID: id, Plan: api.Plan{Pipeline: "echo", Digest: "d", MaxAttempts: 3, OnInterrupt: api.InterruptRetry, ItemsPerMessage: k},
			ManifestKey: "batches/" + id + "/m.jsonl", ManifestBytes: 1, ItemCount: int64(items), ListShards: shards, CounterShards: 1,
			Run: 1, Status: api.StatusRunning, Source: "inline", CreatedAt: t0, RunStartedAt: t0},
		Chunks: 1,
	}
}

// record reserves key in run and writes outcome o ("" leaves it in
// flight).
func record(t *testing.T, s ledger.Store, b ledger.Batch, key string, run int, o api.Outcome) {
	t.Helper()
	ctx := context.Background()
	it, err := s.Reserve(ctx, ledger.Reservation{BatchID: b.ID, Key: key, RunID: ledger.RunID(b.ID, key), Run: run, ListShards: b.ListShards, Now: t0, Lease: time.Hour})
	if err != nil {
		t.Fatalf("reserve %s: %v", key, err)
	}
	if o == "" {
		return
	}
	r := ledger.Record{BatchID: b.ID, Key: key, RunID: ledger.RunID(b.ID, key), Run: run, ListShards: b.ListShards, Attempt: it.Attempt, FirstAttempt: it.Attempt, Outcome: o, Now: t0}
	switch o {
	case api.OutcomeSucceeded:
		r.Output, r.Cost = json.RawMessage(`{"n":"`+key+`"}`), pipeline.Cost{"usd": 0.5}
	case api.OutcomeFailed:
		r.Error, r.Reason = "boom "+key, api.ReasonPermanent
	case api.OutcomeQuarantined:
		r.Error, r.Reason = "look "+key, api.ReasonQuarantine
	case api.OutcomeCancelled:
		r.Reason = api.ReasonCancel
	}
	if err := s.Record(ctx, r); err != nil {
		t.Fatalf("record %s: %v", key, err)
	}
}

// stream reads every page of the partial results with limit lines a page.
func stream(t *testing.T, c *Control, id string, limit int) ([]api.ResultLine, int) {
	t.Helper()
	var lines []api.ResultLine
	cursor, pages := "", 0
	for {
		p, err := c.PartialResults(context.Background(), id, cursor, limit)
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		pages++
		if len(p.Lines) > limit {
			t.Fatalf("page %d: %d lines, limit %d", pages, len(p.Lines), limit)
		}
		lines = append(lines, p.Lines...)
		if p.NextCursor == "" {
			return lines, pages
		}
		cursor = p.NextCursor
		if pages > 10000 {
			t.Fatal("the stream does not end")
		}
	}
}

func keysOf(lines []api.ResultLine) []string {
	var ks []string
	for _, l := range lines {
		ks = append(ks, l.Key)
	}
	return ks
}

// TestPartialResultsHalfDone: a batch of item rows over 7 shards, half of
// its items ended (every terminal outcome), some in flight, the rest
// without a row: the stream holds exactly the ended items, once each, in
// key byte order across the shards, each with its outcome, run, attempts,
// output, error, reason and cost, at every page size; pending and in-flight
// items are absent.
func TestPartialResultsHalfDone(t *testing.T) {
	s := memstore.NewStore()
	ctx := context.Background()
	b := partialBatch("half", 200, 7, 1)
	if _, err := s.CreateBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	outcomes := []api.Outcome{api.OutcomeSucceeded, api.OutcomeFailed, api.OutcomeQuarantined, api.OutcomeCancelled}
	want := map[string]api.Outcome{}
	for i := range 200 {
		key := fmt.Sprintf("k-%x", i*7919%1000) // keys far from their order of writing
		switch {
		case i%2 == 0:
			o := outcomes[i/2%len(outcomes)]
			record(t, s, b, key, 1, o)
			want[key] = o
		case i%4 == 1:
			record(t, s, b, key, 1, "") // in flight
		}
	}
	c := &Control{Store: s, Clock: &memstore.FixedClock{T: t0}}
	wantKeys := make([]string, 0, len(want))
	for k := range want {
		wantKeys = append(wantKeys, k)
	}
	sort.Strings(wantKeys)
	for _, limit := range []int{1, 3, 17, 100, 1000} {
		lines, pages := stream(t, c, b.ID, limit)
		if got := keysOf(lines); !slices.Equal(got, wantKeys) {
			t.Fatalf("limit %d: keys %v,\nwant %v", limit, got, wantKeys)
		}
		if limit == 1000 && pages != 1 {
			t.Fatalf("limit 1000: %d pages, want 1", pages)
		}
		for _, l := range lines {
			if l.Outcome != want[l.Key] || l.Run != 1 || l.Revision != 1 || l.Attempts != 1 {
				t.Fatalf("limit %d: line %+v, want outcome %s of run 1, revision 1, 1 attempt", limit, l, want[l.Key])
			}
			switch l.Outcome {
			case api.OutcomeSucceeded:
				if string(l.Output) != `{"n":"`+l.Key+`"}` || l.Cost["usd"] != 0.5 {
					t.Fatalf("line %+v: output or cost lost", l)
				}
			case api.OutcomeFailed:
				if l.Error != "boom "+l.Key || l.Reason != api.ReasonPermanent {
					t.Fatalf("line %+v: error or reason lost", l)
				}
			case api.OutcomeCancelled:
				if l.Reason != api.ReasonCancel {
					t.Fatalf("line %+v: reason lost", l)
				}
			}
		}
	}
	// The first page's cursor goes on after its last line.
	p, err := c.PartialResults(ctx, b.ID, "", 5)
	if err != nil || len(p.Lines) != 5 || p.NextCursor == "" || p.Order != api.ResultOrderKey || p.Run != 1 || p.Status != api.StatusRunning {
		t.Fatalf("first page: %+v, %v", p, err)
	}
	q, err := c.PartialResults(ctx, b.ID, p.NextCursor, 5)
	if err != nil || len(q.Lines) == 0 || q.Lines[0].Key != wantKeys[5] {
		t.Fatalf("second page: %+v, %v; want it to start at %s", q, err, wantKeys[5])
	}
}

// TestPartialResultsBoundedPerCall: over a stretch of items in flight a
// call examines at most ResultExamineFactor × limit rows and answers
// fewer lines, even none, with a cursor that goes on; the stream still
// holds every ended item.
func TestPartialResultsBoundedPerCall(t *testing.T) {
	s := memstore.NewStore()
	ctx := context.Background()
	b := partialBatch("bound", 300, 3, 1)
	if _, err := s.CreateBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	var ended []string
	for i := range 300 {
		key := fmt.Sprintf("k%04d", i)
		if i < 250 {
			record(t, s, b, key, 1, "") // the first 250 keys in flight
			continue
		}
		record(t, s, b, key, 1, api.OutcomeSucceeded)
		ended = append(ended, key)
	}
	c := &Control{Store: s, Clock: &memstore.FixedClock{T: t0}}
	p, err := c.PartialResults(ctx, b.ID, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Lines) != 0 || p.NextCursor == "" {
		t.Fatalf("first page over 40 rows in flight: %d lines, cursor %q; want none and a cursor", len(p.Lines), p.NextCursor)
	}
	lines, pages := stream(t, c, b.ID, 10)
	if !slices.Equal(keysOf(lines), ended) {
		t.Fatalf("keys %v, want %v", keysOf(lines), ended)
	}
	if pages < 250/(ResultExamineFactor*10) {
		t.Fatalf("%d pages: the calls examined more than %d rows each", pages, ResultExamineFactor*10)
	}
}

// TestPartialResultsPacks: a batch with items per message 10 over 3
// shards: the pack items recorded so far, expanded from their packs, in
// manifest order (the order the page names), items in flight or never
// reserved absent.
func TestPartialResultsPacks(t *testing.T) {
	s := memstore.NewStore()
	ctx := context.Background()
	b := partialBatch("packs", 60, 3, 10)
	if _, err := s.CreateBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	var want []string
	for first := int64(0); first < 60; first += 10 {
		var start, end []ledger.PackItemWrite
		for j := range 10 {
			key := fmt.Sprintf("z%02d", 59-int(first)-j) // keys against the manifest's order
			if j == 9 {
				continue // never reserved
			}
			st := ledger.ItemState{Key: key, Run: 1, Outcome: api.OutcomeInFlight, Attempt: 1, FirstAttempt: 1, UpdatedAt: t0}
			start = append(start, ledger.PackItemWrite{Index: j, Item: st})
			if j == 4 {
				continue // stays in flight
			}
			done := st
			done.Outcome = api.OutcomeSucceeded
			done.Output = json.RawMessage(`{}`)
			if j == 2 {
				done.Outcome, done.Error, done.Reason = api.OutcomeFailed, "no", api.ReasonPermanent
			}
			end = append(end, ledger.PackItemWrite{Index: j, Item: done, Was: api.OutcomeInFlight})
			want = append(want, key)
		}
		ref := ledger.PackRef{BatchID: b.ID, ListShards: b.ListShards, First: first}
		if err := s.WritePack(ctx, ledger.PackWrite{Ref: ref, Take: true, Run: 1, LeaseUntil: t0.Add(time.Hour), Items: start, InFlight: len(start), Now: t0}); err != nil {
			t.Fatal(err)
		}
		if err := s.WritePack(ctx, ledger.PackWrite{Ref: ref, Attempt: 1, Run: 1, Items: end, InFlight: 1, Now: t0}); err != nil {
			t.Fatal(err)
		}
	}
	c := &Control{Store: s, Clock: &memstore.FixedClock{T: t0}}
	for _, limit := range []int{1, 4, 1000} {
		lines, _ := stream(t, c, b.ID, limit)
		if !slices.Equal(keysOf(lines), want) {
			t.Fatalf("limit %d: keys %v,\nwant %v (manifest order)", limit, keysOf(lines), want)
		}
		for _, l := range lines {
			if l.Attempts != 1 || l.Run != 1 || (l.Outcome == api.OutcomeFailed) != (l.Error == "no") {
				t.Fatalf("line %+v", l)
			}
		}
	}
	p, err := c.PartialResults(ctx, b.ID, "", 1)
	if err != nil || p.Order != api.ResultOrderManifest {
		t.Fatalf("order %q (%v), want manifest", p.Order, err)
	}
}

// TestPartialResultsResumedRun: in run 2 the items run 1 left failed or
// cancelled are pending until run 2 ends them (absent), the succeeded
// ones keep their run-1 line, as in run 2's results file; a cursor of run
// 1 is refused naming cursor, and a cursor not from a page too.
func TestPartialResultsResumedRun(t *testing.T) {
	s := memstore.NewStore()
	ctx := context.Background()
	b := partialBatch("resumed", 4, 2, 1)
	if _, err := s.CreateBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	record(t, s, b, "a", 1, api.OutcomeSucceeded)
	record(t, s, b, "b", 1, api.OutcomeFailed)
	record(t, s, b, "c", 1, api.OutcomeCancelled)
	record(t, s, b, "d", 1, api.OutcomeFailed)
	c := &Control{Store: s, Clock: &memstore.FixedClock{T: t0}}
	old, err := c.PartialResults(ctx, b.ID, "", 1)
	if err != nil || old.NextCursor == "" {
		t.Fatalf("run 1 page: %+v %v", old, err)
	}
	if err := s.FinishRun(ctx, b.ID, 1, ledger.Finish{Status: api.StatusCompleted, FinishedAt: t0, ExpiresAt: t0.Add(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	b2, err := s.StartRun(ctx, b.ID, 1, t0)
	if err != nil {
		t.Fatal(err)
	}
	record(t, s, b2, "d", 2, api.OutcomeSucceeded)
	lines, _ := stream(t, c, b.ID, 10)
	if got := fmt.Sprint(keysOf(lines)); got != "[a d]" || lines[0].Run != 1 || lines[1].Run != 2 {
		t.Fatalf("run 2 stream %+v, want a (run 1) and d (run 2)", lines)
	}
	_, err = c.PartialResults(ctx, b.ID, old.NextCursor, 10)
	var in *api.InputError
	if !errors.As(err, &in) || in.Field != "cursor" {
		t.Fatalf("run 1's cursor in run 2: %v, want invalid cursor", err)
	}
	for _, bad := range []string{"!", "eA", resultCursor(0, "a")} {
		if _, err := c.PartialResults(ctx, b.ID, bad, 10); !errors.As(err, &in) || in.Field != "cursor" {
			t.Fatalf("cursor %q: %v, want invalid cursor", bad, err)
		}
	}
	for _, lim := range []int{-1, 1001} {
		if _, err := c.PartialResults(ctx, b.ID, "", lim); !errors.As(err, &in) || in.Field != "limit" {
			t.Fatalf("limit %d: %v, want invalid limit", lim, err)
		}
	}
	if _, err := c.PartialResults(ctx, "nope", "", 10); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("unknown batch: %v", err)
	}
}

// TestItemsOfAnOutcomeWithoutIndexPointsToResults guards the answer to
// listing succeeded or cancelled items, which no index row lists: the
// refusal names the field and where those items are listed instead.
func TestItemsOfAnOutcomeWithoutIndexPointsToResults(t *testing.T) {
	for _, o := range []api.Outcome{api.OutcomeCancelled, api.OutcomeSucceeded, "done"} {
		_, err := readItemsQuery(o, "", 0)
		var ie *api.InputError
		if !errors.As(err, &ie) || ie.Field != "outcome" {
			t.Fatalf("items of %q: %v, want an input error naming outcome", o, err)
		}
		hint := "bulkrun results ID --outcome " + string(o)
		if want := o != "done"; strings.Contains(ie.Reason, hint) != want {
			t.Errorf("items of %q: reason %q; want the hint %q only for succeeded and cancelled", o, ie.Reason, hint)
		}
	}
}
