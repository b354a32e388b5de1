package flow

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

func echo(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
	return pipeline.Result{Output: req.Input}, nil
}

// midForget runs during once, after its first DeletePrefix: another
// caller acting while a forget deletes the batch's objects (and before it
// deletes its rows).
type midForget struct {
	*memblobs.Blobs
	during func(ctx context.Context)
}

func (m *midForget) DeletePrefix(ctx context.Context, prefix string) (int, error) {
	n, err := m.Blobs.DeletePrefix(ctx, prefix)
	if f := m.during; f != nil {
		m.during = nil
		f(ctx)
	}
	return n, err
}

// expiredBatch runs a 3-item batch to its end and moves the rig's clock
// past its retention (the finalizer's hour).
func expiredBatch(t *testing.T, r *rig, id string) api.SubmitRequest {
	t.Helper()
	ctx := context.Background()
	req := api.SubmitRequest{BatchID: id, Pipeline: "counted", ItemsPerMessage: 1, Source: api.SourceSpec{Items: items(3)}}
	if _, err := r.sub.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	if res, err := r.fin.Finalize(ctx, id, 1); err != nil || res.Report.Census.Succeeded != 3 {
		t.Fatalf("finalize: %+v %v", res.Report.Census, err)
	}
	r.clock.T = r.clock.T.Add(2 * time.Hour)
	return req
}

// TestForgetOfAReusedIDLeavesTheNewBatch: a submit that reuses the id of
// an expired batch forgets it and creates a new batch under the id
// (Submitter.clearStale), whose rows and manifest have the old one's
// keys. Another forget of the old batch still deleting then would delete
// the new batch's (the sweep's, or a caller's DELETE): its row, running
// marker, counters and manifest, leaving a run that never ends. So the
// submit's forget is the only one (lifecycle.ForgetStale): refused while
// another forget marked the batch within ledger.ForgetQuiet, and when
// another marks it while it deletes (that one then deletes the batch
// row); the caller submits again later and gets a new batch.
func TestForgetOfAReusedIDLeavesTheNewBatch(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, r *rig, req api.SubmitRequest, refused error) {
		t.Helper()
		if !errors.Is(refused, ledger.ErrForgetGoing) || !errors.Is(refused, api.ErrConflict) {
			t.Fatalf("the submit beside another forget: %v, want ErrForgetGoing (a conflict: submit again later)", refused)
		}
		if _, err := r.store.GetBatch(ctx, req.BatchID); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("after the other forget: %v, want the old batch gone and no new one", err)
		}
		// Submitted again once the other forget is done: a new batch, run
		// to its end.
		r.sub.Blobs = r.blobs
		if _, err := r.sub.Submit(ctx, req); err != nil {
			t.Fatalf("submit again: %v", err)
		}
		r.drain(t, ctx, 1)
		res, err := r.fin.Finalize(ctx, req.BatchID, 1)
		if err != nil || res.Report.Census.Succeeded != 3 {
			t.Fatalf("the new batch: %+v %v", res.Report.Census, err)
		}
	}
	t.Run("the sweep's forget first", func(t *testing.T) {
		r := newRig(t, echo)
		req := expiredBatch(t, r, "nightly")
		var refused error
		r.ctl.Blobs = &midForget{Blobs: r.blobs, during: func(ctx context.Context) {
			_, refused = r.sub.Submit(ctx, req)
		}}
		res, err := r.sweep.RunOnce(ctx)
		if err != nil || res.Deleted != 1 {
			t.Fatalf("sweep: %+v %v, want the expired batch deleted", res, err)
		}
		r.ctl.Blobs = r.blobs
		check(t, r, req, refused)
	})
	t.Run("the submit's forget first", func(t *testing.T) {
		r := newRig(t, echo)
		req := expiredBatch(t, r, "nightly")
		b, err := r.store.GetBatch(ctx, req.BatchID)
		if err != nil {
			t.Fatal(err)
		}
		// The sweep marks the batch while the submit's forget deletes, and
		// is still deleting when the submit's forget ends.
		r.sub.Blobs = &midForget{Blobs: r.blobs, during: func(ctx context.Context) {
			if err := r.store.MarkForgetting(ctx, ledger.ForgetMark{BatchID: b.ID, CreatedAt: b.CreatedAt, Now: time.Now(), Token: ledger.NewTakeToken()}); err != nil {
				t.Errorf("the sweep's mark: %v", err)
			}
		}}
		_, refused := r.sub.Submit(ctx, req)
		r.sub.Blobs = r.blobs
		if _, err := r.store.GetBatch(ctx, req.BatchID); err != nil {
			t.Fatalf("the batch row while the sweep's forget goes on: %v, want it left to that forget", err)
		}
		// The sweep's forget ends (here: the next sweep).
		if res, err := r.sweep.RunOnce(ctx); err != nil || res.Deleted != 1 {
			t.Fatalf("sweep: %+v %v, want the expired batch deleted", res, err)
		}
		check(t, r, req, refused)
	})
}
