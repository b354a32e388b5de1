package flow

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/finalize"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// reportRefused is a bucket that refuses the report's write (as S3 does a
// write the role may not make: AccessDenied, the same on every try).
type reportRefused struct{ *memblobs.Blobs }

var errAccessDenied = errors.New("operation error S3: PutObject, https response error StatusCode: 403, api error AccessDenied: Access Denied")

func (b reportRefused) PutIfAbsent(ctx context.Context, key, contentType string, body []byte) error {
	if strings.HasSuffix(key, "/report.json") {
		return errAccessDenied
	}
	return b.Blobs.PutIfAbsent(ctx, key, contentType, body)
}

// A finalize that cannot finish — every item ended, but the report cannot
// be written — never leaves the batch running in silence: the fifth
// failed call (a trigger and Lambda's two retries, then ticks) ends the
// run finalize_failed with the error as its failure, off the running
// list; AWS being unavailable is not counted; a resume once the cause is
// fixed finishes the batch (succeeded items answered from their rows).
func TestFinalizeThatCannotFinishEndsTheRunVisibly(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, failOn3)
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "stuck", Pipeline: "counted", Source: api.SourceSpec{Items: items(10)}}); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	good := r.fin.Blobs
	r.fin.Blobs = reportRefused{r.blobs}
	unavailable := r.fin.Store
	r.fin.Store = unavailableOnce{Store: r.store}
	if _, err := r.fin.Finalize(ctx, "stuck", 1); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("finalize with DynamoDB unavailable: %v", err)
	}
	r.fin.Store = unavailable
	for call := 1; call <= finalize.FinalizeFailureLimit; call++ {
		_, err := r.fin.Finalize(ctx, "stuck", 1)
		if !errors.Is(err, errAccessDenied) {
			t.Fatalf("call %d: %v, want the report's AccessDenied", call, err)
		}
		b, gerr := r.store.GetBatch(ctx, "stuck")
		if gerr != nil {
			t.Fatal(gerr)
		}
		want := api.StatusRunning
		if call == finalize.FinalizeFailureLimit {
			want = api.StatusFinalizeFailed
			if !strings.Contains(err.Error(), "bulkrun resume stuck") {
				t.Errorf("the last call's error %q does not say how to go on", err)
			}
		}
		if b.Status != want || !strings.Contains(b.Failure, "AccessDenied") {
			t.Fatalf("after call %d: status %s, failure %q; want %s with the error", call, b.Status, b.Failure, want)
		}
	}
	if ids, _ := r.store.RunningBatches(ctx); len(ids) != 0 {
		t.Fatalf("still listed as running: %v", ids)
	}
	if res, err := r.fin.Tick(ctx); err != nil || res.Running != 0 {
		t.Fatalf("tick after the end: %+v %v", res, err)
	}
	b, _ := r.store.GetBatch(ctx, "stuck")
	if !b.NeedsAttention || b.FinishedAt.IsZero() || b.ExpiresAt.IsZero() {
		t.Fatalf("ended batch %+v: want needs_attention, finished_at and a retention", b)
	}
	// The cause fixed, a resume finishes it.
	r.fin.Blobs = good
	if _, err := r.sub.Resume(ctx, "stuck"); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	res, err := r.fin.Finalize(ctx, "stuck", 2)
	if err != nil || !res.Wrote || res.Report.Census.Succeeded != 9 || res.Report.Census.Failed != 1 {
		t.Fatalf("run 2: %+v %v", res.Report.Census, err)
	}
	if b, _ := r.store.GetBatch(ctx, "stuck"); b.Status != api.StatusCompleted || b.Failure != "" {
		t.Fatalf("after resume: %s, failure %q", b.Status, b.Failure)
	}
}

// unavailableOnce answers the first GetBatch as DynamoDB does when it
// stays throttled past the SDK's tries.
type unavailableOnce struct {
	ledger.Store
}

func (u unavailableOnce) GetBatch(ctx context.Context, id string) (ledger.Batch, error) {
	return ledger.Batch{}, ledger.ErrUnavailable
}
