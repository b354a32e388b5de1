package handler

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// cancelStore holds one running batch whose counters have seen a failure.
type cancelStore struct {
	ledger.Store // other methods are not reached
	b            ledger.Batch
	progressErr  error
}

func (s *cancelStore) GetBatch(context.Context, string) (ledger.Batch, error) { return s.b, nil }

// ReadAdapt answers a key never throttled: the running view reads its
// downstream's adaptive pace.
func (s *cancelStore) ReadAdapt(context.Context, string) (pace.Adapt, error) {
	return pace.Adapt{}, nil
}
func (s *cancelStore) Stop(_ context.Context, m ledger.StopMark) error {
	s.b.Stop, s.b.StopDetail = m.Status, m.Detail
	return nil
}
func (s *cancelStore) Progress(context.Context, string, int, int) (ledger.Progress, error) {
	if s.progressErr != nil {
		return ledger.Progress{}, s.progressErr
	}
	return ledger.Progress{Done: 7, Failures: 1, ByOutcome: map[api.Outcome]int64{
		api.OutcomeSucceeded: 6, api.OutcomeFailed: 1}}, nil
}

// The cancel answer is the batch as GET /batches/{id} shows it (the
// product line "POST /batches/{id}/cancel → 202" with the batch view): a
// run with a failed item answers needs_attention true and its census from
// the counters, as the status read right after does. Answering the bare
// row, whose needs_attention is the last finished run's, said false for a
// first run with a failure and fails here. When the counters cannot be
// read the cancel still stands: 202 with the row.
func TestCancelAnswersStatusView(t *testing.T) {
	for _, tc := range []struct {
		name        string
		progressErr error
		wantCensus  bool
	}{
		{"counters read", nil, true},
		{"counters unreadable", errors.New("store down"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &cancelStore{b: ledger.Batch{
				Batch: api.Batch{
					ID:            "run-1",
					Status:        api.StatusRunning,
					Run:           1,
					ItemCount:     200,
					ListShards:    2,
					CounterShards: 2,
				},
			}, progressErr: tc.progressErr}
			a := NewAPI(nil, s, &discardBlobs{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			rec := httptest.NewRecorder()
			a.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/batches/run-1/cancel", nil))
			if rec.Code != http.StatusAccepted {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			var v BatchView
			if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
				t.Fatal(err)
			}
			if v.Stop != api.StatusCancelled {
				t.Errorf("stop %q, want cancelled", v.Stop)
			}
			if !tc.wantCensus {
				if v.Census != nil {
					t.Errorf("census %+v without counters", *v.Census)
				}
				return
			}
			if v.Census == nil || v.CensusSource != wire.CensusFromCounters || v.Census.Failed != 1 || v.Census.Succeeded != 6 || v.Census.InFlight+v.Census.Pending != 193 {
				t.Fatalf("census %+v from %q, want the counters' (6 succeeded, 1 failed, 193 in flight or pending)", v.Census, v.CensusSource)
			}
			if !v.NeedsAttention {
				t.Error("needs_attention false with a failed item; GET /batches/{id} says true")
			}
		})
	}
}
