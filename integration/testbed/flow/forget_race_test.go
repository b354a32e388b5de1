package flow

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
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

// resentMark is the store as the SDK drives it when MarkForgetting's
// answer was lost: the first try is applied, the SDK sends the same
// request again and the caller gets the resend's answer.
type resentMark struct {
	*memstore.Store
	once bool
}

func (s *resentMark) MarkForgetting(ctx context.Context, m ledger.ForgetMark) error {
	if !s.once {
		s.once = true
		if err := s.Store.MarkForgetting(ctx, m); err != nil {
			return err
		}
	}
	return s.Store.MarkForgetting(ctx, m)
}

// TestLostAnswerOfTheForgetMark: a submit that reuses an expired id, whose
// forget's mark the SDK sent again after its answer was lost, creates the
// new batch: the resend finds its own mark (its token), not another
// forget's. Before, it answered ErrForgetGoing ("marked by another
// forget") and every submit of the id was refused for ForgetQuiet (16
// min) by the submit's own mark.
func TestLostAnswerOfTheForgetMark(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, echo)
	req := expiredBatch(t, r, "nightly")
	r.sub.Store = &resentMark{Store: r.store}
	_, err := r.sub.Submit(ctx, req)
	if err != nil {
		t.Errorf("submit whose forget mark was resent by the SDK: %v; want the new batch", err)
	}
	r.sub.Store = r.store
	if _, err := r.sub.Submit(ctx, req); err != nil {
		t.Errorf("submit again (no lost answer): %v; want the new batch", err)
	}
}

// creating wraps CreateBatch: after the first refused create, during runs
// (another submit of the id acting between this submit's create and its
// clearStale).
type creating struct {
	*memstore.Store
	during func(ctx context.Context)
}

func (s *creating) CreateBatch(ctx context.Context, b ledger.Batch) (ledger.Batch, error) {
	got, err := s.Store.CreateBatch(ctx, b)
	if f := s.during; f != nil && errors.Is(err, api.ErrBatchExists) {
		s.during = nil
		f(ctx)
	}
	return got, err
}

// TestStaleClearLeavesANewerBatch: submit S2's create is refused by the
// stale batch B0; before S2 clears it, submit S1 clears B0 and creates
// B1, which finishes. S2's forget is of B0 alone (lifecycle.ForgetStale
// takes the stale batch, and a batch of the id created since is not
// forgotten), so S2 finds B1 and answers it; B1's results stay and its
// items ran once. Before, S2 read the id again, forgot B1 and ran the
// items again under a B2.
func TestStaleClearLeavesANewerBatch(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, echo)
	req := expiredBatch(t, r, "nightly")
	var b1 ledger.Batch
	r.sub.Store = &creating{Store: r.store, during: func(ctx context.Context) {
		r.sub.Store = r.store
		if _, err := r.sub.Submit(ctx, req); err != nil {
			t.Fatalf("S1: %v", err)
		}
		r.drain(t, ctx, 1)
		if res, err := r.fin.Finalize(ctx, req.BatchID, 1); err != nil || res.Report.Census.Succeeded != 3 {
			t.Fatalf("S1's batch: %+v %v", res.Report.Census, err)
		}
		var err error
		if b1, err = r.store.GetBatch(ctx, req.BatchID); err != nil {
			t.Fatal(err)
		}
		t.Logf("B1 created %s status %s expires %s", b1.CreatedAt, b1.Status, b1.ExpiresAt)
		r.clock.T = r.clock.T.Add(time.Second) // S2 resumes a second later
	}}
	res, err := r.sub.Submit(ctx, req)
	t.Logf("S2: created=%v err=%v", res.Created, err)
	if res.Created {
		t.Error("S2 created a batch beside B1")
	}
	got, gerr := r.store.GetBatch(ctx, req.BatchID)
	calls := int64(0)
	r.calls.Range(func(_, v any) bool { calls += v.(interface{ Load() int64 }).Load(); return true })
	t.Logf("now: batch created %s status %s run %d; pipeline calls so far %d", got.CreatedAt, got.Status, got.Run, calls)
	if calls != 6 {
		t.Errorf("%d pipeline calls, want 6 (B0's items and B1's, once each)", calls)
	}
	if gerr != nil || !got.CreatedAt.Equal(b1.CreatedAt) || got.Status != b1.Status {
		t.Errorf("after S2: batch %+v / %v; want B1 (created %s, %s) left alone", got.CreatedAt, gerr, b1.CreatedAt, b1.Status)
	}
}
