//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/control"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// listTable creates a table of its own (the stack's layout, dynamo.TableInput)
// for the listing's storage tests, so that no other test's batches show.
func listTable(t *testing.T) *dynamo.Store {
	t.Helper()
	ctx := context.Background()
	name := strings.Trim(strings.ToLower(newID(t)), "-")
	if len(name) > 60 {
		name = strings.Trim(name[len(name)-60:], "-")
	}
	if _, err := env.ddb.CreateTable(ctx, dynamo.TableInput(name)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.ddb.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name}) })
	return dynamo.New(env.ddb, name)
}

// listAll follows every cursor of a listing, checking that no page is
// larger than its limit.
func listAll(t *testing.T, c *control.Control, r api.ListBatchesRequest) (ids []string, pages int) {
	t.Helper()
	for {
		p, err := c.ListBatches(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		if r.Limit > 0 && len(p.Batches) > r.Limit {
			t.Fatalf("page of %d batches, limit %d", len(p.Batches), r.Limit)
		}
		for _, b := range p.Batches {
			ids = append(ids, b.ID)
		}
		pages++
		if p.NextCursor == "" {
			return ids, pages
		}
		if pages > 100 {
			t.Fatal("listing does not end")
		}
		r.Cursor = p.NextCursor
	}
}

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// Guards GET /batches and `bulkrun list` (docs/api.md "Using it"): batches
// newest first across month buckets and shards, paged by an opaque cursor
// without a gap or a repeat, filtered by status and since, expired
// batches left out, and a status change alone (a refusal) moving the
// batch between status filters. Storage semantics on the emulator, on a
// table of the stack's layout.
func TestListBatchesOrderPagingFilters(t *testing.T) {
	ctx := context.Background()
	store := listTable(t)
	now := time.Date(2027, 3, 15, 12, 0, 0, 0, time.UTC)
	ctl := &control.Control{Store: store, Clock: fixedClock(now)}

	type row struct {
		id      string
		at      time.Time
		status  api.Status
		expires time.Time
	}
	var rows []row
	// Four months with batches (2027-01 left empty), several per month so
	// that every shard holds some; two batches share one millisecond (id
	// decides).
	for i, m := range []time.Time{
		time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
	} {
		for j := range 9 {
			st := []api.Status{api.StatusRunning, api.StatusCompleted, api.StatusSubmitting}[j%3]
			rows = append(rows, row{id: fmt.Sprintf("lb-%d-%d", i, j), at: m.Add(time.Duration(j) * 37 * time.Hour), status: st})
		}
	}
	same := time.Date(2027, 2, 20, 8, 0, 0, 0, time.UTC)
	rows = append(rows, row{id: "lb-same-a", at: same, status: api.StatusRunning}, row{id: "lb-same-b", at: same, status: api.StatusRunning})
	// Expired: finished, retention ended before now. Not listed. A running
	// batch keeps an earlier run's past expiry and is listed.
	rows = append(rows,
		row{id: "lb-expired", at: time.Date(2027, 3, 2, 0, 0, 0, 0, time.UTC), status: api.StatusCompleted, expires: now.Add(-time.Minute)},
		row{id: "lb-rerun", at: time.Date(2027, 3, 3, 0, 0, 0, 0, time.UTC), status: api.StatusRunning, expires: now.Add(-time.Hour)},
		row{id: "lb-kept", at: time.Date(2027, 3, 4, 0, 0, 0, 0, time.UTC), status: api.StatusCompleted, expires: now.Add(time.Hour)})
	for _, r := range rows {
		b := ledger.Batch{Batch: api.Batch{ID: r.id, Plan: api.Plan{Pipeline: "webhook"}, Status: r.status, Run: 1, ItemCount: 3, CreatedAt: r.at, ExpiresAt: r.expires}}
		if _, err := store.CreateBatch(ctx, b); err != nil {
			t.Fatal(r.id, err)
		}
	}
	want := func(keep func(row) bool) []string {
		var w []row
		for _, r := range rows {
			if r.id != "lb-expired" && keep(r) {
				w = append(w, r)
			}
		}
		slices.SortFunc(w, func(a, b row) int {
			if c := b.at.Compare(a.at); c != 0 {
				return c
			}
			return strings.Compare(b.id, a.id)
		})
		var ids []string
		for _, r := range w {
			ids = append(ids, r.id)
		}
		return ids
	}
	all := want(func(row) bool { return true })

	t.Run("order and paging", func(t *testing.T) {
		for _, limit := range []int{1, 7, 1000} {
			got, pages := listAll(t, ctl, api.ListBatchesRequest{Limit: limit})
			if !slices.Equal(got, all) {
				t.Fatalf("limit %d: %v\nwant %v", limit, got, all)
			}
			if limit == 7 && pages < len(all)/7 {
				t.Errorf("limit 7: %d pages for %d batches", pages, len(all))
			}
		}
		if i, j := slices.Index(all, "lb-same-b"), slices.Index(all, "lb-same-a"); i < 0 || j != i+1 {
			t.Errorf("same millisecond: lb-same-b at %d, lb-same-a at %d, want b just before a", i, j)
		}
		// A cursor goes on whatever the next page's limit.
		p, err := ctl.ListBatches(ctx, api.ListBatchesRequest{Limit: 5})
		if err != nil {
			t.Fatal(err)
		}
		rest, _ := listAll(t, ctl, api.ListBatchesRequest{Limit: 11, Cursor: p.NextCursor})
		var first []string
		for _, b := range p.Batches {
			first = append(first, b.ID)
		}
		if got := append(first, rest...); !slices.Equal(got, all) {
			t.Fatalf("5 then pages of 11: %v\nwant %v", got, all)
		}
		if b := p.Batches[0]; b.Pipeline != "webhook" || b.ItemCount != 3 || b.Run != 1 || b.CreatedAt.IsZero() || b.Status == "" {
			t.Errorf("summary lost projected fields: %+v", b)
		}
	})

	t.Run("status and since", func(t *testing.T) {
		got, _ := listAll(t, ctl, api.ListBatchesRequest{Statuses: []api.Status{api.StatusCompleted}, Limit: 2})
		if w := want(func(r row) bool { return r.status == api.StatusCompleted }); !slices.Equal(got, w) {
			t.Fatalf("completed: %v\nwant %v", got, w)
		}
		got, _ = listAll(t, ctl, api.ListBatchesRequest{Statuses: []api.Status{api.StatusRunning, api.StatusSubmitting}, Limit: 4})
		if w := want(func(r row) bool { return r.status != api.StatusCompleted }); !slices.Equal(got, w) {
			t.Fatalf("running,submitting: %v\nwant %v", got, w)
		}
		since := time.Date(2027, 2, 20, 8, 0, 0, 0, time.UTC) // inclusive: the two of that millisecond are in
		got, _ = listAll(t, ctl, api.ListBatchesRequest{Since: since, Limit: 3})
		if w := want(func(r row) bool { return !r.at.Before(since) }); !slices.Equal(got, w) || !slices.Contains(got, "lb-same-a") {
			t.Fatalf("since %s: %v\nwant %v", since, got, w)
		}
	})

	t.Run("a status change alone moves the batch", func(t *testing.T) {
		id := "lb-3-2" // submitting, 2026-11
		if err := store.Refuse(ctx, id, api.SubmitRefusal{Code: api.RefusalInvalid, Message: "line 4"}, now, now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second) // the index is eventually consistent
		for {
			refused, _ := listAll(t, ctl, api.ListBatchesRequest{Statuses: []api.Status{api.StatusRefused}})
			submitting, _ := listAll(t, ctl, api.ListBatchesRequest{Statuses: []api.Status{api.StatusSubmitting}})
			if slices.Equal(refused, []string{id}) && !slices.Contains(submitting, id) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after the refusal: refused %v, submitting %v", refused, submitting)
			}
			time.Sleep(200 * time.Millisecond)
		}
		p, err := ctl.ListBatches(ctx, api.ListBatchesRequest{Statuses: []api.Status{api.StatusRefused}})
		if err != nil {
			t.Fatal(err)
		}
		if r := p.Batches[0].Refusal; r == nil || r.Code != api.RefusalInvalid {
			t.Errorf("refused batch's refusal %+v, want code %s", r, api.RefusalInvalid)
		}
	})

	t.Run("bad cursor", func(t *testing.T) {
		for _, c := range []string{"bm9wZQ", "MTIzIyMj"} { // "nope", "123###"
			_, err := ctl.ListBatches(ctx, api.ListBatchesRequest{Cursor: c})
			var ie *api.InputError
			if !errors.As(err, &ie) || ie.Field != "cursor" {
				t.Errorf("cursor %q: %v, want an input error naming cursor", c, err)
			}
		}
	})
}

// Guards GET /batches's bounded work per call: far from the newest batch
// (here two years and more of empty months) a call answers a short or
// empty page with a cursor, and following it still reaches every batch.
func TestListBatchesAcrossEmptyMonths(t *testing.T) {
	ctx := context.Background()
	store := listTable(t)
	ctl := &control.Control{Store: store, Clock: fixedClock(time.Date(2029, 6, 1, 0, 0, 0, 0, time.UTC))}
	for i, at := range []time.Time{time.Date(2026, 11, 5, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 5, 0, 0, 0, 0, time.UTC)} {
		if _, err := store.CreateBatch(ctx, ledger.Batch{Batch: api.Batch{ID: fmt.Sprintf("le-%d", i), Status: api.StatusRunning, Run: 1, CreatedAt: at}}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := ctl.ListBatches(ctx, api.ListBatchesRequest{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Batches) != 0 || p.NextCursor == "" {
		t.Fatalf("first call over 24 empty months: %d batches, cursor %q; want none and a cursor", len(p.Batches), p.NextCursor)
	}
	got, pages := listAll(t, ctl, api.ListBatchesRequest{Limit: 10})
	if !slices.Equal(got, []string{"le-1", "le-0"}) || pages < 2 {
		t.Fatalf("%v in %d pages, want [le-1 le-0] in 2 or more", got, pages)
	}
}

// Guards GET /batches end to end (docs/api.md "Using it"): a batch submitted
// through the API is listed by the deployed API, with its status, and a
// bad query is a 400 naming the parameter.
func TestListBatchesAPI(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	start := time.Now().Add(-time.Minute)
	v, err := env.api.Submit(ctx, webhookRequest(id, env.hook.route(id, nil), inlineItems(2)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := env.api.ListBatches(ctx, api.ListBatchesRequest{Since: start, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(p.Batches, func(b api.BatchSummary) bool { return b.ID == id })
		if i >= 0 {
			b := p.Batches[i]
			if b.Pipeline != "webhook" || b.ItemCount != 2 || b.CreatedAt.Before(start) || b.Status == "" {
				t.Fatalf("listed %+v (submitted %+v)", b, v.Batch)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %s not listed: %+v", id, p)
		}
		time.Sleep(500 * time.Millisecond)
	}
	_, err = env.api.ListBatches(ctx, api.ListBatchesRequest{Statuses: []api.Status{"finished"}})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Body.Field != "status" {
		t.Fatalf("status=finished: %v, want 400 naming status", err)
	}
}
