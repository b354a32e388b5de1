package flow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// seen records, per key, the inputs and run ids the pipeline saw.
type seen struct {
	mu     sync.Mutex
	input  map[string][]string
	runIDs map[string][]string
}

func (s *seen) run(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
	s.mu.Lock()
	s.input[req.Key] = append(s.input[req.Key], string(req.Input))
	s.runIDs[req.Key] = append(s.runIDs[req.Key], req.RunID)
	s.mu.Unlock()
	var in struct {
		Bad bool `json:"bad"`
	}
	_ = json.Unmarshal(req.Input, &in)
	if in.Bad {
		return pipeline.Result{Cost: pipeline.Cost{"calls": 1}}, pipeline.Permanent(errors.New("bad input"))
	}
	return pipeline.Result{Output: req.Input, Cost: pipeline.Cost{"calls": 1}}, nil
}

// correctionItems is 40 items k00…k39 whose five listed ones are bad.
func correctionItems(bad ...int) json.RawMessage {
	var b strings.Builder
	b.WriteByte('[')
	for i := range 40 {
		if i > 0 {
			b.WriteByte(',')
		}
		isBad := false
		for _, x := range bad {
			isBad = isBad || x == i
		}
		fmt.Fprintf(&b, `{"k":"k%02d","n":%d,"bad":%v}`, i, i, isBad)
	}
	b.WriteByte(']')
	return json.RawMessage(b.String())
}

// results reads the lines of run's results files of id, by key.
func results(t *testing.T, r *rig, id string, run int) map[string]api.ResultLine {
	t.Helper()
	out := map[string]api.ResultLine{}
	for _, o := range api.TerminalOutcomes() {
		body, err := r.blobs.Get(context.Background(), api.ResultsKey(id, run, o))
		if errors.Is(err, api.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := api.ReadResults(bytes.NewReader(body), func(l api.ResultLine) error {
			if _, dup := out[l.Key]; dup {
				t.Errorf("run %d: key %s twice in the results", run, l.Key)
			}
			out[l.Key] = l
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// Guards docs/api.md "Corrections" on the in-memory store, for one item
// per message and for packs of 4: 40 items, 5 fail on bad input; their
// corrections start a run over exactly those 5 (the other items of their
// packs are counted, never run again), with the corrected inputs and a
// revision's run id; the run's results hold every key once — 40 lines,
// 40 succeeded, each naming the run and revision that produced it — and
// the census counts each key once. The same corrections again are the
// same revision and start nothing; a key that succeeded, a key the batch
// does not have and a correction while a run goes are refused; a resume
// after the correction reads the corrected inputs; forget removes every
// revision.
func TestMemCorrections(t *testing.T) {
	for _, k := range []int{1, 4} {
		t.Run(fmt.Sprintf("items per message %d", k), func(t *testing.T) {
			ctx := context.Background()
			sn := &seen{input: map[string][]string{}, runIDs: map[string][]string{}}
			r := newRig(t, sn.run)
			id := fmt.Sprintf("fix-%d", k)
			bad := []int{3, 13, 17, 30, 39}
			left := 16 // bad too, in k17's pack (chunks of 7 in the rig: packs 14–17), not corrected: it stays failed and does not run again
			if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", KeyField: "k", ItemsPerMessage: k,
				Source: api.SourceSpec{Items: correctionItems(append(bad, left)...)}}); err != nil {
				t.Fatal(err)
			}
			r.drain(t, ctx, 2)
			res, err := r.fin.Finalize(ctx, id, 1)
			if err != nil || res.Report.Census.Failed != 6 {
				t.Fatalf("run 1: %+v %v", res.Report.Census, err)
			}

			// Refusals, nothing written.
			var ie *api.InputError
			for name, items := range map[string]string{
				"a key that succeeded":  `[{"k":"k00","n":0}]`,
				"a key not the batch's": `[{"k":"k03","n":3},{"k":"zz","n":9}]`,
				"a duplicate key":       `[{"k":"k03","n":3},{"k":"k03","n":4}]`,
			} {
				_, err := r.sub.Correct(ctx, id, api.CorrectRequest{Source: api.SourceSpec{Items: json.RawMessage(items)}})
				if !errors.As(err, &ie) {
					t.Errorf("%s: %v, want an InputError", name, err)
				}
			}
			if _, err := r.sub.Correct(ctx, id, api.CorrectRequest{Source: api.SourceSpec{Items: json.RawMessage(`[{"k":"k03","n":3},{"k":"k03","n":4}]`)}}); err == nil || !strings.Contains(err.Error(), "duplicate item key") {
				t.Errorf("a duplicate key: %v", err)
			}
			if _, err := r.sub.Correct(ctx, id, api.CorrectRequest{Source: api.SourceSpec{Items: json.RawMessage(`[{"k":"k00","n":0}]`)}}); err == nil || !strings.Contains(err.Error(), `"k00"`) || !strings.Contains(err.Error(), "succeeded in run 1") {
				t.Errorf("a succeeded key: %v, want its key and run named", err)
			}
			if _, err := r.sub.Correct(ctx, id, api.CorrectRequest{Source: api.SourceSpec{Items: json.RawMessage(`[{"k":"k03","n":3},{"k":"zz","n":9}]`)}}); err == nil || !strings.Contains(err.Error(), `"zz"`) {
				t.Errorf("an unknown key: %v, want it named", err)
			}
			if b, _ := r.store.GetBatch(ctx, id); len(b.Revisions) != 0 || b.Run != 1 {
				t.Fatalf("a refused correction changed the batch: run %d, %d revisions", b.Run, len(b.Revisions))
			}

			var fixed []string
			for _, i := range bad {
				fixed = append(fixed, fmt.Sprintf(`{"k":"k%02d","n":%d,"fixed":true}`, i, i))
			}
			corr := api.CorrectRequest{Source: api.SourceSpec{Items: json.RawMessage("[" + strings.Join(fixed, ",") + "]")}}
			r.clock.T = r.clock.T.Add(time.Minute)
			cr, err := r.sub.Correct(ctx, id, corr)
			if err != nil || !cr.Created || cr.Revision.N != 2 || cr.Batch.Run != 2 || cr.Batch.RunRevision != 2 || cr.Revision.Items != 5 {
				t.Fatalf("correct: %+v %v", cr, err)
			}
			// The items outside the run keep their outcomes: with the run's
			// items they are every item once (a live census adds them).
			if kp := cr.Revision.Kept; kp == nil || kp.Succeeded+kp.Failed+kp.Quarantined+kp.Cancelled+cr.Revision.RunItems != 40 ||
				kp.Failed != int64(map[bool]int{true: 1, false: 0}[k == 1]) {
				t.Errorf("kept outside the run: %+v, run items %d", kp, cr.Revision.RunItems)
			}
			if k > 1 && cr.Revision.RunItems <= 5 {
				t.Errorf("packs of %d: the run counts %d items, want the corrected items' packs", k, cr.Revision.RunItems)
			}
			// While its run goes: the same corrections answer it; others wait.
			if again, err := r.sub.Correct(ctx, id, corr); err != nil || again.Created || again.Revision.N != 2 {
				t.Errorf("the same corrections during their run: %+v %v", again, err)
			}
			if _, err := r.sub.Correct(ctx, id, api.CorrectRequest{Source: api.SourceSpec{Items: json.RawMessage(`[{"k":"k03","n":33}]`)}}); !errors.Is(err, api.ErrConflict) {
				t.Errorf("another correction during a run: %v, want ErrConflict", err)
			}
			// Until the corrected items have run, the run is not finished:
			// their rows, failed in run 1, are pending in run 2.
			if _, err := r.fin.Finalize(ctx, id, 2); !errors.Is(err, api.ErrNotFinished) {
				t.Fatalf("finalize before the corrected items ran: %v, want ErrNotFinished", err)
			}
			r.drain(t, ctx, 3)
			res, err = r.fin.Finalize(ctx, id, 2)
			if err != nil {
				t.Fatal(err)
			}
			c := res.Report.Census
			if c.Total != 40 || c.Succeeded != 39 || c.Failed != 1 || c.Pending != 0 || res.Report.Status != api.StatusCompleted {
				t.Fatalf("run 2: %s %+v", res.Report.Status, c)
			}
			lines := results(t, r, id, 2)
			if len(lines) != 40 {
				t.Fatalf("run 2's results: %d keys, want 40", len(lines))
			}
			for i := range 40 {
				key := fmt.Sprintf("k%02d", i)
				l := lines[key]
				wantRun, wantRev, wantCalls, want := 1, 1, 1, api.OutcomeSucceeded
				for _, x := range bad {
					if x == i {
						wantRun, wantRev, wantCalls = 2, 2, 2
					}
				}
				if i == left {
					want = api.OutcomeFailed
				}
				if l.Outcome != want || l.Run != wantRun || l.Revision != wantRev {
					t.Errorf("%s: %s run %d revision %d, want %s run %d revision %d", key, l.Outcome, l.Run, l.Revision, want, wantRun, wantRev)
				}
				if got := len(sn.input[key]); got != wantCalls {
					t.Errorf("%s: %d calls, want %d (only corrected items run again)", key, got, wantCalls)
				}
				if wantRev == 2 {
					if last := sn.input[key][1]; !strings.Contains(last, `"fixed":true`) {
						t.Errorf("%s ran with %s, not its corrected input", key, last)
					}
					if sn.runIDs[key][1] != ledger.RunIDOf(id, key, 2) || sn.runIDs[key][0] == sn.runIDs[key][1] {
						t.Errorf("%s: run ids %v, want the revision's on the corrected input", key, sn.runIDs[key])
					}
				}
			}
			// Idempotent after the run too: no new run.
			if again, err := r.sub.Correct(ctx, id, corr); err != nil || again.Created || again.Batch.Run != 2 {
				t.Errorf("the same corrections again: %+v %v", again, err)
			}
			// A resume runs what is left failed (k16, its own input again)
			// and reads the corrected inputs: the corrected items, which
			// succeeded, do not run.
			b, err := r.sub.Resume(ctx, id)
			if err != nil || b.RunRevision != 0 {
				t.Fatalf("resume: %+v %v", b, err)
			}
			r.drain(t, ctx, 1)
			if res, err := r.fin.Finalize(ctx, id, 3); err != nil || res.Report.Census.Succeeded != 39 || res.Report.Census.Failed != 1 {
				t.Fatalf("run 3: %+v %v", res.Report.Census, err)
			}
			if got := len(sn.input["k03"]); got != 2 {
				t.Errorf("k03 ran %d times, want 2", got)
			}
			if got := len(sn.input["k16"]); got != 2 {
				t.Errorf("k16 ran %d times, want 2 (run 1, the resume)", got)
			}
			// Forget: every revision's objects go.
			if err := r.ctl.Forget(ctx, id); err != nil {
				t.Fatal(err)
			}
			if left := r.blobs.Keys("batches/" + id + "/"); len(left) != 0 {
				t.Errorf("after forget: %v", left)
			}
		})
	}
}
