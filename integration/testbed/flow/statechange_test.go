package flow

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/eventschema"
	"github.com/bulkrun/bulkrun/internal/event"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/finalize"
)

// finishedEvents is finalize's ledger.Events as the EventBridge adapter
// builds its Batch State Change detail (event.StateChangeDetail), recorded
// on bus with the other changes.
type finishedEvents struct{ bus *recordingBus }

func (e finishedEvents) Publish(_ context.Context, r api.Report) error {
	d, err := event.StateChangeDetail(r, "bkt")
	if err != nil {
		return err
	}
	var c api.StateChangeEvent
	if err := json.Unmarshal([]byte(d), &c); err != nil {
		return err
	}
	return e.bus.Put(context.Background(), api.DetailStateChange, c)
}

// The engines put one Batch State Change event per change, each valid
// against the published schema: a batch submitted and running, paused and
// unpaused by a caller, finished, resumed (running, run 2), and a run
// that cannot finish, finished finalize_failed; a repeated submit and a
// finalize repeated after the run ended put nothing more.
func TestStateChangesOfABatchsLife(t *testing.T) {
	ctx := context.Background()
	schema, err := eventschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, failOn3)
	bus := &recordingBus{}
	r.sub.Bus, r.worker.Bus, r.ctl.Bus, r.fin.Bus, r.fin.Events = bus, bus, bus, bus, finishedEvents{bus}
	req := api.SubmitRequest{BatchID: "life", Pipeline: "counted", Source: api.SourceSpec{Items: items(10)}}
	if _, err := r.sub.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := r.sub.Submit(ctx, req); err != nil { // the same batch: no change
		t.Fatal(err)
	}
	if _, err := r.ctl.Pause(ctx, "life"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ctl.Unpause(ctx, "life"); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	for range 2 {
		if _, err := r.fin.Finalize(ctx, "life", 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.sub.Resume(ctx, "life"); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	r.fin.Blobs = reportRefused{r.blobs}
	for range finalize.FinalizeFailureLimit {
		if _, err := r.fin.Finalize(ctx, "life", 2); !errors.Is(err, errAccessDenied) {
			t.Fatalf("finalize of run 2: %v", err)
		}
	}

	type step struct {
		change  api.StateChange
		run     int
		status  api.Status
		verdict api.Status
	}
	var got []step
	for _, c := range bus.changes {
		got = append(got, step{c.Change, c.Run, c.Status, c.Verdict})
		if err := schema.ValidateValue(c); err != nil {
			t.Errorf("%+v against %s: %v", c, eventschema.SchemaPath, err)
		}
	}
	want := []step{
		{api.ChangeSubmitted, 1, api.StatusRunning, ""},
		{api.ChangeRunning, 1, api.StatusRunning, ""},
		{api.ChangePaused, 1, api.StatusRunning, ""},
		{api.ChangeUnpaused, 1, api.StatusRunning, ""},
		{api.ChangeFinished, 1, api.StatusCompleted, api.StatusCompleted},
		{api.ChangeRunning, 2, api.StatusRunning, ""},
		{api.ChangeFinished, 2, api.StatusFinalizeFailed, api.StatusFinalizeFailed},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("state changes\n%+v\nwant\n%+v", got, want)
	}
	if last := bus.changes[len(bus.changes)-1]; last.Failure == "" || last.Report != "" {
		t.Errorf("finalize_failed %+v: want its failure, no report", last)
	}
}
