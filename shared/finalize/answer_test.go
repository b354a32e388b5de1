package finalize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// answerStore answers GetBatch with b; any other call of the Store is a
// test failure (a nil embedded interface panics).
type answerStore struct {
	Store
	b ledger.Batch
}

func (s answerStore) GetBatch(context.Context, string) (ledger.Batch, error) { return s.b, nil }

// answerBlobs holds the reports by key.
type answerBlobs struct {
	ledger.Blobs
	objects map[string][]byte
}

func (b answerBlobs) Get(_ context.Context, key string) ([]byte, error) {
	if v, ok := b.objects[key]; ok {
		return v, nil
	}
	return nil, fmt.Errorf("get %s: %w", key, api.ErrNotFound)
}

// TestAnswerTakesTheReportOfARunFinishedMeanwhile pins what a finalize
// call answers — a triggered call's, a part's, a range's and the tick's
// (Finalizer.answer) — when it found an object of its run gone: the
// run's report when that very run has finished since, else the error,
// untouched: another run of the batch finished, the run still running,
// or the report missing.
func TestAnswerTakesTheReportOfARunFinishedMeanwhile(t *testing.T) {
	rep, _ := json.Marshal(api.Report{BatchID: "b", Run: 2, Status: api.StatusCompleted})
	gone := fmt.Errorf("checkpoint: %w", api.ErrNotFound)
	for _, tc := range []struct {
		name    string
		run     int
		status  api.Status
		report  bool
		wantErr bool
	}{
		{"the run finished", 2, api.StatusCompleted, true, false},
		{"a later run is the batch's", 3, api.StatusCompleted, true, true},
		{"the run still running", 2, api.StatusRunning, true, true},
		{"finished without its report", 2, api.StatusCompleted, false, true},
		{"ended finalize_failed", 2, api.StatusFinalizeFailed, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objects := map[string][]byte{}
			if tc.report {
				objects[api.ReportKey("b", 2)] = rep
			}
			f := &Finalizer{Store: answerStore{b: ledger.Batch{Batch: api.Batch{ID: "b", Run: tc.run, Status: tc.status}}},
				Blobs: answerBlobs{objects: objects}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			res, err := f.answer(context.Background(), "b", 2, FinalizeResult{}, gone)
			switch {
			case tc.wantErr && !errors.Is(err, api.ErrNotFound):
				t.Errorf("answer: %+v, %v; want the not-found error", res, err)
			case !tc.wantErr && (err != nil || res.Report.Run != 2 || res.Wrote):
				t.Errorf("answer: %+v, %v; want run 2's report, not written by this call", res, err)
			}
		})
	}
}
