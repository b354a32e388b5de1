//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/handler"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/internal/blob"
	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/control"
	"github.com/bulkrun/bulkrun/shared/function"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// finishedBatch submits n inline items to the harness, runs them and
// finalizes run 1 with the given retention (negative: already expired).
func finishedBatch(t *testing.T, h *harness, id string, n int, retention time.Duration) api.Report {
	t.Helper()
	ctx := context.Background()
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(n)}}); err != nil {
		t.Fatal(err)
	}
	h.worker.Handle(ctx, h.receive(t, (n+6)/7)) // the fan-out chunks (7 items each in the harness)
	for left := n; left > 0; left -= 10 {
		h.worker.Handle(ctx, h.receive(t, min(10, left)))
	}
	h.finalizer.Retention = retention
	r, err := h.finalizer.Finalize(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	return r.Report
}

// rowsOf scans the harness table for every row that belongs to batch id
// (its pk or sk names it), markers included.
func rowsOf(t *testing.T, h *harness, id string) []map[string]ddbtypes.AttributeValue {
	t.Helper()
	var rows []map[string]ddbtypes.AttributeValue
	p := dynamodb.NewScanPaginator(h.store.DB(), &dynamodb.ScanInput{TableName: aws.String(h.store.Table()), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		out, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, av := range out.Items {
			pk, _ := av["pk"].(*ddbtypes.AttributeValueMemberS)
			sk, _ := av["sk"].(*ddbtypes.AttributeValueMemberS)
			if pk != nil && strings.Contains(pk.Value, id) || sk != nil && strings.Contains(sk.Value, id) {
				rows = append(rows, av)
			}
		}
	}
	return rows
}

func str(av map[string]ddbtypes.AttributeValue, name string) string {
	if v, ok := av[name].(*ddbtypes.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// withMiddleware returns a copy of the suite's AWS config with an
// Initialize-step middleware that sees every call.
func withMiddleware(name string, fn func(context.Context, middleware.InitializeInput, middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error)) aws.Config {
	c := env.aws.Copy()
	c.APIOptions = append(slices.Clip(c.APIOptions), func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc(name, fn), middleware.After)
	})
	return c
}

// unprocessedDeletes makes every BatchWriteItem leave the delete of the
// row whose key is (pk, sk) unprocessed, as DynamoDB does under throttling: the
// request goes on without it and the answer lists it in UnprocessedItems.
func unprocessedDeletes(pk, sk string, hits *atomic.Int64) aws.Config {
	return withMiddleware("unprocessedDeletes", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		req, ok := in.Parameters.(*dynamodb.BatchWriteItemInput)
		if !ok || awsmiddleware.GetOperationName(ctx) != "BatchWriteItem" {
			return next.HandleInitialize(ctx, in)
		}
		held := map[string][]ddbtypes.WriteRequest{}
		kept := map[string][]ddbtypes.WriteRequest{}
		for table, reqs := range req.RequestItems {
			for _, w := range reqs {
				if w.DeleteRequest != nil && str(w.DeleteRequest.Key, "pk") == pk && str(w.DeleteRequest.Key, "sk") == sk {
					held[table] = append(held[table], w)
					hits.Add(1)
					continue
				}
				kept[table] = append(kept[table], w)
			}
		}
		if len(held) == 0 {
			return next.HandleInitialize(ctx, in)
		}
		var out middleware.InitializeOutput
		var md middleware.Metadata
		if len(kept) > 0 {
			cp := *req
			cp.RequestItems = kept
			in.Parameters = &cp
			var err error
			if out, md, err = next.HandleInitialize(ctx, in); err != nil {
				return out, md, err
			}
		} else {
			out.Result = &dynamodb.BatchWriteItemOutput{}
		}
		res := out.Result.(*dynamodb.BatchWriteItemOutput)
		res.UnprocessedItems = held
		return out, md, nil
	})
}

// TestRetentionMarkerDeletedLast guards the product line "a retention
// marker is deleted last, only when everything of its batch is gone; a
// partly swept batch is reported as pending deletion". The batch's row
// deletes come back unprocessed through every retry of a sweep pass: the
// pass reports the batch pending deletion and keeps its marker (before,
// the marker went in the same BatchWriteItem as the rows, and a row left
// unprocessed stayed forever); the next pass, without faults, deletes
// everything. Two injections: through the fault proxy (every
// BatchWriteItem answer leaves entries unprocessed, in DynamoDB's wire
// shape), and one item row's delete left unprocessed on every try.
func TestRetentionMarkerDeletedLast(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: req.Input}, nil
	})
	sweep := func(store *dynamo.Store) (api.SweepResult, error) {
		c := &control.Control{Store: store, Blobs: h.fn["sweep"].blobs, Log: h.worker.Log}
		return (&control.Sweeper{Store: store, Control: c, Clock: ledger.SystemClock{}, Log: h.worker.Log}).RunOnce(ctx)
	}
	proxy, via := faultProxy(t, faultproxy.Config{})
	err := proxy.Set(faultproxy.Config{Seed: 3, Rules: []faultproxy.Rule{{Service: "dynamodb", Operations: []string{"BatchWriteItem"},
		Kind: faultproxy.KindPartial, Rate: 1, Fraction: 0.5}}})
	if err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int64
	injections := []struct {
		name  string
		store func(id string) *dynamo.Store
		tries func() int64
	}{
		{"proxy", func(string) *dynamo.Store {
			return dynamo.New(dynamodb.NewFromConfig(h.as(via, "sweep")), h.store.Table())
		},
			func() int64 { return proxy.Status().ByCall["dynamodb.BatchWriteItem"][faultproxy.KindPartial] }},
		{"one row", func(id string) *dynamo.Store {
			var stuck string
			b, _ := h.store.GetBatch(ctx, id)
			_ = h.store.ScanItems(ctx, id, b.ListShards, func(it ledger.Item) error { stuck = it.Key; return nil })
			pk := "ITEM#" + id + "#" + strconv.Itoa(ledger.Shard(stuck, b.ListShards))
			return dynamo.New(dynamodb.NewFromConfig(h.as(unprocessedDeletes(pk, stuck, &hits), "sweep")), h.store.Table())
		}, hits.Load},
	}
	for _, inj := range injections {
		t.Run(inj.name, func(t *testing.T) {
			id := newID(t)
			finishedBatch(t, h, id, 3, -time.Minute)
			res, err := sweep(inj.store(id))
			if !errors.Is(err, api.ErrPendingDeletion) || res != (api.SweepResult{Expired: 1, PendingDeletion: 1}) {
				t.Fatalf("faulty pass: %+v %v, want the batch pending deletion", res, err)
			}
			if n := inj.tries(); n != dynamo.MaxDeleteTries {
				t.Fatalf("%d BatchWriteItem calls with unprocessed deletes, want %d (retried with backoff)", n, dynamo.MaxDeleteTries)
			}
			markers, err := h.store.ExpiredMarkers(ctx, time.Now(), 10)
			if err != nil || len(markers) != 1 || markers[0].BatchID != id {
				t.Fatalf("markers after the partial pass: %+v %v, want the batch's marker kept", markers, err)
			}
			b, err := h.store.GetBatch(ctx, id)
			if err != nil || !b.PendingDeletion {
				t.Fatalf("batch row after the partial pass: %+v %v, want pending_deletion", b, err)
			}
			a := handler.NewAPI(h.submitter, h.fn["submit"].store, h.fn["submit"].blobs, h.worker.Log)
			if _, err := a.View(ctx, id); !errors.Is(err, api.ErrExpired) {
				t.Fatalf("GET of the partly swept batch: %v, want expired", err)
			}

			res, err = sweep(h.store)
			if err != nil || res != (api.SweepResult{Expired: 1, Deleted: 1}) {
				t.Fatalf("second pass: %+v %v", res, err)
			}
			if rows := rowsOf(t, h, id); len(rows) != 0 {
				t.Fatalf("%d rows left after the sweep: %v", len(rows), rows)
			}
		})
	}
}

// TestDeleteObjectsKeyErrorsRetried guards the product line "a
// DeleteObjects answer that lists per-key errors does not stop the pass:
// the failed keys are retried within it, with backoff". Through the fault
// proxy, the first two DeleteObjects answers list per-key InternalErrors
// (the keys really not deleted): the same DeletePrefix call still deletes
// every object (before, it stopped at the first answer with errors). With
// every answer failing some key, the call makes MaxDeleteTries calls, goes
// on, and names a key left.
func TestDeleteObjectsKeyErrorsRetried(t *testing.T) {
	t.Parallel() // its own harness (table, bucket, queue): beside the other parallel tests
	ctx := context.Background()
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{}, nil
	})
	proxy, via := faultProxy(t, faultproxy.Config{})
	flaky := blob.New(function.NewS3(via), h.blobs.Bucket())
	put := func(prefix string, n int) {
		for i := range n {
			if err := h.blobs.Put(ctx, fmt.Sprintf("%so%d", prefix, i), "text/plain", []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	left := func(prefix string) int {
		out, err := env.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(h.blobs.Bucket()), Prefix: aws.String(prefix)})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Contents)
	}
	partial := func(max int) {
		t.Helper()
		err := proxy.Set(faultproxy.Config{Seed: 7, Rules: []faultproxy.Rule{{Service: "s3", Operations: []string{"DeleteObjects"},
			Kind: faultproxy.KindPartial, Rate: 1, Max: max, Fraction: 0.5}}})
		if err != nil {
			t.Fatal(err)
		}
	}

	partial(2)
	put("batches/transient/", 8)
	n, err := flaky.DeletePrefix(ctx, "batches/transient/")
	if err != nil || n != 8 || left("batches/transient/") != 0 {
		t.Fatalf("DeletePrefix through two partial answers: %d deleted, %v, %d left; want all 8 in one call", n, err, left("batches/transient/"))
	}
	if got := proxy.Status().ByCall["s3.DeleteObjects"][faultproxy.KindPartial]; got != 2 {
		t.Fatalf("%d partial answers injected, want 2", got)
	}

	partial(0)
	put("batches/stuck/", 8)
	n, err = flaky.DeletePrefix(ctx, "batches/stuck/")
	rest := left("batches/stuck/")
	if err == nil || !strings.Contains(err.Error(), "batches/stuck/o") || rest == 0 || n+rest != 8 {
		t.Fatalf("DeletePrefix with every answer partial: %d deleted, %v, %d left; want an error naming a key left", n, err, rest)
	}
	if got := proxy.Status().ByCall["s3.DeleteObjects"][faultproxy.KindPartial]; got != blob.MaxDeleteTries {
		t.Fatalf("%d DeleteObjects calls, want %d (the failed keys retried)", got, blob.MaxDeleteTries)
	}
	if n, err := h.blobs.DeletePrefix(ctx, "batches/stuck/"); err != nil || n != rest || left("batches/stuck/") != 0 {
		t.Fatalf("retry without faults: %d %v", n, err)
	}
}

// apiCall serves one request through the API handler.
func apiCall(t *testing.T, a *handler.API, method, path string, body any) (int, handler.ErrorBody, []byte) {
	t.Helper()
	var rd bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = *bytes.NewReader(b)
	}
	req := httptest.NewRequest(method, path, &rd)
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, req)
	var e handler.ErrorBody
	_ = json.Unmarshal(rec.Body.Bytes(), &e)
	return rec.Code, e, rec.Body.Bytes()
}

// TestExpiredBatchIsGone guards the product line "expiry is compared with
// now on every read and submit: an expired batch answers 404 expired, and
// its id may start a fresh batch (the stale rows cleared first)", before
// any sweep has run (before, GET answered 200 with the old census and a
// submit with another manifest got 409 until the sweep).
func TestExpiredBatchIsGone(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: req.Input}, nil
	})
	a := handler.NewAPI(h.submitter, h.fn["submit"].store, h.fn["submit"].blobs, h.worker.Log)
	id := newID(t)
	old := finishedBatch(t, h, id, 3, -time.Second)
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/batches/" + id},
		{http.MethodGet, "/batches/" + id + "/report"},
		{http.MethodGet, "/batches/" + id + "/items?outcome=failed"},
		{http.MethodPost, "/batches/" + id + "/resume"},
		{http.MethodPost, "/batches/" + id + "/items/item-0000000000/release"},
	} {
		if code, e, body := apiCall(t, a, r.method, r.path, nil); code != http.StatusNotFound || e.Code != "expired" {
			t.Errorf("%s %s: %d %s, want 404 expired", r.method, r.path, code, body)
		}
	}

	// The id starts a fresh batch with another manifest: 201, run 1, and
	// nothing of the old batch counts in it.
	code, _, body := apiCall(t, a, http.MethodPost, "/batches", map[string]any{"batch_id": id, "pipeline": "counted", "source": map[string]any{"items": json.RawMessage(inlineItems(5))}})
	if code != http.StatusCreated {
		t.Fatalf("submit reusing the expired id: %d %s, want 201", code, body)
	}
	var v handler.BatchView
	if err := json.Unmarshal(body, &v); err != nil || v.Run != 1 || v.ItemCount != 5 || v.Digest == old.Manifest.Digest {
		t.Fatalf("fresh batch %+v %v", v.Batch, err)
	}
	if _, err := h.blobs.Get(ctx, api.ReportKey(id, 1)); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("the old report is still there: %v", err)
	}
	view, err := a.View(ctx, id)
	if err != nil || view.Status != api.StatusRunning || view.Census == nil || view.Census.Succeeded != 0 || view.Census.Pending != 5 {
		t.Fatalf("GET of the fresh batch: %+v %v, want running with 5 pending and no old rows", view, err)
	}
	markers, _ := h.store.ExpiredMarkers(ctx, time.Now(), 10)
	for _, m := range markers {
		if m.BatchID == id {
			t.Fatalf("the old batch's retention marker is left: %+v", m)
		}
	}
}

// TestTTLOnEveryRowOfFinishedBatch guards the product line "TTL is a real
// second line of defence: every row of a finished batch carries the table's
// TTL attribute, in epoch seconds, past the retention". The table's TTL
// attribute (as the stack and the emulator fix-up enable it) must be the
// one the rows carry; item and counter rows written long before the
// finish (here with a 1-hour row TTL) are extended by finalize; markers
// carry none; a new run takes the batch row's TTL away.
func TestTTLOnEveryRowOfFinishedBatch(t *testing.T) {
	ctx := context.Background()
	ttl, err := env.ddb.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(env.table)})
	if err != nil {
		t.Fatal(err)
	}
	if d := ttl.TimeToLiveDescription; d == nil || aws.ToString(d.AttributeName) != config.AttrExpiresAt || d.TimeToLiveStatus != ddbtypes.TimeToLiveStatusEnabled {
		t.Fatalf("stack table TTL %+v, want enabled on %q", ttl.TimeToLiveDescription, config.AttrExpiresAt)
	}
	for _, rowTTL := range []time.Duration{0, time.Hour} {
		t.Run("rowttl"+strconv.Itoa(int(rowTTL.Hours()))+"h", func(t *testing.T) {
			// One item fails, so that the resume below has an item to run
			// (a batch whose every item succeeded is not resumed).
			h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
				if req.Key == api.PositionalKey(3) {
					return pipeline.Result{}, pipeline.Permanent(errors.New("refused by the test"))
				}
				return pipeline.Result{Output: req.Input}, nil
			})
			h.setRowTTL(rowTTL)
			id := newID(t)
			const retention = 48 * time.Hour
			rep := finishedBatch(t, h, id, 12, retention)
			// Finalize stamps item rows while it counts them, before the
			// report's FinishedAt, with its own clock + retention + grace;
			// it promises (dynamo.Store) only that no row ends less than
			// half of ledger.TTLGrace after the retention, so that is the
			// floor: a row left with its 1-hour write TTL is far below it.
			floor := rep.FinishedAt.Add(retention + ledger.TTLGrace/2).Unix()
			want := rep.FinishedAt.Add(retention + ledger.TTLGrace).Unix()
			kinds := map[string]int{}
			for _, row := range rowsOf(t, h, id) {
				pk := str(row, "pk")
				kind, _, _ := strings.Cut(pk, "#")
				kinds[kind]++
				n, ok := row[config.AttrExpiresAt].(*ddbtypes.AttributeValueMemberN)
				if kind == "RETENTION" || kind == "PUBLISH" {
					if ok {
						t.Errorf("marker %s/%s carries a TTL", pk, str(row, "sk"))
					}
					continue
				}
				if !ok {
					t.Errorf("row %s/%s has no %s", pk, str(row, "sk"), config.AttrExpiresAt)
					continue
				}
				if v, _ := strconv.ParseInt(n.Value, 10, 64); v < floor || v > want+3600 {
					t.Errorf("row %s/%s: %s = %d, want epoch seconds in [%d, %d] (retention end + half the grace, retention end + grace + 1 h)", pk, str(row, "sk"), config.AttrExpiresAt, v, floor, want+3600)
				}
			}
			if kinds["BATCH"] != 1 || kinds["ITEM"] != 12 || kinds["COUNT"] < 1 {
				t.Fatalf("rows by kind %v", kinds)
			}
			if _, err := h.submitter.Resume(ctx, id); err != nil {
				t.Fatal(err)
			}
			for _, row := range rowsOf(t, h, id) {
				if str(row, "pk") == "BATCH#"+id {
					if _, ok := row[config.AttrExpiresAt]; ok {
						t.Fatalf("a running batch's row carries a TTL: %v", row[config.AttrExpiresAt])
					}
				}
			}
		})
	}
}

// recordedEvents records the completion events put; fail makes Publish fail (the
// finalize died before PutEvents answered).
type recordedEvents struct {
	mu   sync.Mutex
	ids  []string
	fail bool
}

func (e *recordedEvents) Publish(_ context.Context, r api.Report) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fail {
		return errors.New("finalize killed before PutEvents")
	}
	e.ids = append(e.ids, ledger.EventID(r))
	return nil
}

func (e *recordedEvents) got() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.ids...)
}

// unmarkedStore loses the first SetPublished: the finalize died after
// PutEvents answered and before the published flag was set.
type unmarkedStore struct {
	*dynamo.Store
	lost atomic.Bool
}

func (s *unmarkedStore) SetPublished(ctx context.Context, id string, run int) error {
	if s.lost.CompareAndSwap(false, true) {
		return errors.New("finalize killed after PutEvents")
	}
	return s.Store.SetPublished(ctx, id, run)
}

// TestCompletionEventAtLeastOnce guards the product line "the completion
// event is delivered at least once, with an event id subscribers can
// dedupe on". A finalize killed between moving the batch out of running
// and publishing: a retried finalize (before, it returned the stored report
// and published nothing) or the tick publishes; a finalize killed after
// PutEvents and before the published flag makes the tick publish again,
// with the same event id.
func TestCompletionEventAtLeastOnce(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: req.Input}, nil
	})
	ev := &recordedEvents{fail: true}
	h.finalizer.Events = ev

	// Killed between the move and the publish.
	lost := newID(t)
	rep := finishedBatch(t, h, lost, 2, time.Hour)
	if b, err := h.store.GetBatch(ctx, lost); err != nil || b.Status != api.StatusCompleted || b.PublishedRun != 0 || len(ev.got()) != 0 {
		t.Fatalf("after the killed finalize: %+v %v, events %v", b, err, ev.got())
	}
	ev.fail = false
	res, err := h.finalizer.Tick(ctx)
	if err != nil || res.Published != 1 {
		t.Fatalf("tick: %+v %v, want the lost event published", res, err)
	}
	if got := ev.got(); len(got) != 1 || got[0] != ledger.EventID(rep) {
		t.Fatalf("events %v, want one with id %s", got, ledger.EventID(rep))
	}
	if b, _ := h.store.GetBatch(ctx, lost); b.PublishedRun != 1 {
		t.Fatalf("published_run %d after the tick, want 1", b.PublishedRun)
	}
	if res, err := h.finalizer.Tick(ctx); err != nil || res.Published != 0 || len(ev.got()) != 1 {
		t.Fatalf("second tick: %+v %v, events %v: a marked event is not published again", res, err, ev.got())
	}

	// A retried finalize publishes too.
	ev.fail = true
	retried := newID(t)
	finishedBatch(t, h, retried, 2, time.Hour)
	ev.fail = false
	if _, err := h.finalizer.Finalize(ctx, retried, 1); err != nil {
		t.Fatal(err)
	}
	if got := ev.got(); len(got) != 2 || !strings.HasPrefix(got[1], retried+":1:") {
		t.Fatalf("events %v, want the retried finalize to publish %s", got, retried)
	}

	// Killed after PutEvents, before the flag: delivered twice, one id.
	twice := newID(t)
	unmarked := &unmarkedStore{Store: h.store}
	h.finalizer.Store = unmarked
	rep = finishedBatch(t, h, twice, 2, time.Hour)
	h.finalizer.Store = h.store
	if res, err := h.finalizer.Tick(ctx); err != nil || res.Published != 1 {
		t.Fatalf("tick after the unmarked publish: %+v %v", res, err)
	}
	var dup []string
	for _, id := range ev.got() {
		if id == ledger.EventID(rep) {
			dup = append(dup, id)
		}
	}
	if len(dup) != 2 {
		t.Fatalf("events %v, want the run's event twice with the same id %s", ev.got(), ledger.EventID(rep))
	}
	if refs, err := h.store.Unpublished(ctx); err != nil || len(refs) != 0 {
		t.Fatalf("unpublished after the ticks: %v %v", refs, err)
	}
}

// TestSweepDeletesObjectsWhenTTLTookTheRows guards the product line "TTL
// is never the only line: objects never outlive their rows". A marker
// whose batch rows TTL already removed (more than TTLGrace after its
// expiry) makes the sweep delete the batch's objects before the marker; a
// marker whose batch row is gone within the grace (a forget that deleted
// everything but the marker) is only removed.
func TestSweepDeletesObjectsWhenTTLTookTheRows(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{Output: req.Input}, nil
	})
	now := time.Now()
	orphan, recent := newID(t), newID(t)
	for _, id := range []string{orphan, recent} {
		if err := h.blobs.Put(ctx, api.ReportKey(id, 1), "application/json", []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	put := func(sk string) {
		_, err := h.store.DB().PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(h.store.Table()), Item: map[string]ddbtypes.AttributeValue{
			"pk": &ddbtypes.AttributeValueMemberS{Value: "RETENTION"}, "sk": &ddbtypes.AttributeValueMemberS{Value: sk}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	put(layout.RetentionSK(now.Add(-ledger.TTLGrace-time.Hour), orphan))
	put(layout.RetentionSK(now.Add(-time.Hour), recent))
	sw := h.fn["sweep"]
	c := &control.Control{Store: sw.store, Blobs: sw.blobs, Log: h.worker.Log}
	res, err := (&control.Sweeper{Store: sw.store, Control: c, Clock: ledger.SystemClock{}, Log: h.worker.Log}).RunOnce(ctx)
	if err != nil || res != (api.SweepResult{Expired: 2, Stale: 2}) {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	if _, err := h.blobs.Get(ctx, api.ReportKey(orphan, 1)); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("the objects of a batch whose rows TTL removed are left: %v", err)
	}
	if markers, _ := h.store.ExpiredMarkers(ctx, now, 10); len(markers) != 0 {
		t.Fatalf("markers left: %+v", markers)
	}
}
