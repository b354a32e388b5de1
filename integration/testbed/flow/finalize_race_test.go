package flow

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/finalize"
)

// raceBlobs runs `first` (another finalize call) to its end at this
// call's first checkpoint write, which loses to the first call's (its
// If-None-Match found the first call's checkpoint, deleted since with
// the run finished).
type raceBlobs struct {
	*memblobs.Blobs
	first func()
}

func (r *raceBlobs) PutIfAbsent(ctx context.Context, key, contentType string, body []byte) error {
	if r.first != nil && strings.HasSuffix(key, "/000001.json") {
		first := r.first
		r.first = nil
		first()
		return api.ErrConflict
	}
	return r.Blobs.PutIfAbsent(ctx, key, contentType, body)
}

// TestFinalizeLosingCallAfterTheRunFinished guards the answer of a
// finalize call whose checkpoint write loses to a call that then finished
// the run and deleted the checkpoints: it answers with the report, not
// "continued" with an empty one (which four concurrent calls met now and
// then). The losing call held the chunk's claim past its end (a call
// slowed past its deadline's grace), so the other took it over.
func TestFinalizeLosingCallAfterTheRunFinished(t *testing.T) {
	r := ranRun(t, 60, 1)
	losing := *r.fin
	blobs := &raceBlobs{Blobs: r.blobs}
	blobs.first = func() {
		expired, _ := json.Marshal(map[string]time.Time{"until": time.Now().Add(-time.Second)})
		if err := r.blobs.Put(context.Background(), finalize.FinalizePrefix("b", 1)+"000001.claim.1", "application/json", expired); err != nil {
			t.Fatal(err)
		}
		if res, err := r.fin.Finalize(context.Background(), "b", 1); err != nil || !res.Wrote {
			t.Errorf("the first call: %+v %v", res, err)
		}
	}
	losing.Blobs = blobs
	res, err := losing.Finalize(context.Background(), "b", 1)
	if err != nil || res.Continued || res.Wrote || res.Report.Census.Total != 60 {
		t.Fatalf("the losing call: continued %v, wrote %v, census %+v, %v; want the first call's report", res.Continued, res.Wrote, res.Report.Census, err)
	}
}
