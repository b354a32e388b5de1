package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// badCSV is a CSV of n rows keyed by id, typed by checkSchema, with a
// short row (line 3), a Latin-1 byte (line 5), a qty that is not an
// integer (line 7), a qty the schema refuses (line 9) and the key of
// line 2 again on its last line.
func badCSV(n int) []byte {
	var b strings.Builder
	b.WriteString("id,name,qty\n")
	for i := range n {
		line := i + 2
		switch line {
		case 3:
			fmt.Fprintf(&b, "k-%05d,short\n", i)
		case 5:
			fmt.Fprintf(&b, "k-%05d,caf\xe9,1\n", i)
		case 7:
			fmt.Fprintf(&b, "k-%05d,seven,seven\n", i)
		case 9:
			fmt.Fprintf(&b, "k-%05d,nine,0\n", i)
		case n + 1:
			b.WriteString("k-00000,again,1\n")
		default:
			fmt.Fprintf(&b, "k-%05d,name %d,%d\n", i, i, 1+i%5)
		}
	}
	return []byte(b.String())
}

const checkSchema = `{"type": "object", "properties": {"qty": {"type": "integer", "minimum": 1}}, "required": ["id", "qty"]}`

// TestMemBadRowsListedInOnePass: a CSV with a short row, a byte that is
// not UTF-8, a cell not of its type, a row the schema refuses and a
// duplicate key. Under bad_rows refuse (the default) the batch is refused
// naming all five, each with its line, and the invalid-items file lists
// every one; nothing runs (without the schema, bad_rows refuse names the
// three format and key problems at once). Under bad_rows fail it runs: the four bad rows
// end failed with their problem and their pipeline is never called, the
// duplicate's later row is not an item, every other row succeeds once,
// and the batch keeps what was found (Checked), at one item per message
// and at ten.
func TestMemBadRowsListedInOnePass(t *testing.T) {
	ctx := context.Background()
	const n = 200
	wantLines := []int64{3, 5, 7, 9, n + 1}
	put := func(r *rig) api.SourceSpec {
		if err := r.blobs.Put(ctx, "in/orders.csv", "", badCSV(n)); err != nil {
			t.Fatal(err)
		}
		return api.SourceSpec{Object: "s3://" + r.blobs.Bucket() + "/in/orders.csv"}
	}
	invalidLines := func(t *testing.T, r *rig, key string) []api.Problem {
		t.Helper()
		body, err := r.blobs.Get(ctx, key)
		if err != nil {
			t.Fatalf("invalid-items file %s: %v", key, err)
		}
		var ps []api.Problem
		for l := range strings.Lines(string(body)) {
			var p api.Problem
			if err := json.Unmarshal([]byte(l), &p); err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		return ps
	}

	t.Run("refuse", func(t *testing.T) {
		r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
		r.sub.Handoff = nopHandoff{}
		req := api.SubmitRequest{BatchID: "refused", Pipeline: "counted", KeyField: "id", Source: put(r), Schema: json.RawMessage(checkSchema)}
		if _, err := r.sub.Accept(ctx, req); err != nil {
			t.Fatal(err)
		}
		b, err := r.sub.Complete(ctx, "refused")
		if err != nil || b.Status != api.StatusRefused || b.Refusal == nil {
			t.Fatalf("%s %+v %v, want refused", b.Status, b.Refusal, err)
		}
		rf := b.Refusal
		if rf.Problems != 5 || rf.Line != 3 || rf.InvalidObject == "" {
			t.Fatalf("refusal %+v, want 5 problems from line 3 and the invalid-items file", rf)
		}
		for _, l := range wantLines {
			if !strings.Contains(rf.Message, fmt.Sprintf("line %d", l)) {
				t.Errorf("refusal does not name line %d: %s", l, rf.Message)
			}
		}
		ps := invalidLines(t, r, rf.InvalidObject)
		if len(ps) != 5 {
			t.Fatalf("invalid-items file: %d lines, want 5", len(ps))
		}
		for i, p := range ps {
			if p.Line != wantLines[i] || p.Handling != api.HandlingRefused {
				t.Errorf("problem %d: %+v, want line %d refused", i, p, wantLines[i])
			}
		}
		if ps[2].Path != "/qty" || ps[3].Kind != api.ProblemSchema || ps[3].Path != "/qty" || ps[4].Kind != api.ProblemDuplicate || ps[4].FirstLine != 2 {
			t.Errorf("problems %+v", ps)
		}
		if r.callsOf("k-00010") != 0 || len(r.queue.take()) != 0 {
			t.Error("a refused batch ran")
		}
	})

	// Without a schema, bad_rows refuse: the short row, the Latin-1 byte
	// and the duplicate key, all three in one refusal (the cells are
	// strings: lines 7 and 9 are rows like any other).
	t.Run("refuse without schema", func(t *testing.T) {
		r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
		_, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "three", Pipeline: "counted", KeyField: "id", Source: put(r), BadRows: api.BadRowsRefuse})
		var pe *api.ProblemsError
		if !errors.As(err, &pe) || pe.Count != 3 || pe.Rows != n {
			t.Fatalf("err = %v, want 3 problems of %d rows", err, n)
		}
		for i, l := range []int64{3, 5, n + 1} {
			if pe.First[i].Line != l {
				t.Errorf("problem %d at line %d, want %d", i, pe.First[i].Line, l)
			}
		}
	})

	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("fail at k=%d", k), func(t *testing.T) {
			r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
				var in struct{ Qty int }
				if err := json.Unmarshal(req.Input, &in); err != nil || in.Qty < 1 {
					return pipeline.Result{}, pipeline.Permanent(errors.New("a bad row reached the pipeline"))
				}
				return pipeline.Result{Output: req.Input}, nil
			})
			id := fmt.Sprintf("fail-%d", k)
			req := api.SubmitRequest{BatchID: id, Pipeline: "counted", KeyField: "id", Source: put(r), Schema: json.RawMessage(checkSchema),
				BadRows: api.BadRowsFail, ItemsPerMessage: k}
			res, err := r.sub.Submit(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if res.Batch.ItemCount != n-1 {
				t.Fatalf("%d items, want %d (the duplicate's later row is not one)", res.Batch.ItemCount, n-1)
			}
			c := res.Batch.Checked
			if c == nil || c.Invalid != 4 || c.Duplicates != 1 || c.Object == "" || len(c.First) != 5 {
				t.Fatalf("checked %+v", c)
			}
			ps := invalidLines(t, r, c.Object)
			if len(ps) != 5 || ps[0].Handling != api.HandlingFailed || ps[4].Handling != api.HandlingDropped {
				t.Fatalf("invalid-items file %+v", ps)
			}
			r.drain(t, ctx, 2)
			fin, err := r.fin.Finalize(ctx, id, 1)
			if err != nil {
				t.Fatal(err)
			}
			if cs := fin.Report.Census; cs.Total != n-1 || cs.Failed != 4 || cs.Succeeded != n-5 {
				t.Fatalf("census %+v, want %d failed 4", cs, n-1)
			}
			failed := map[string]string{}
			for key, l := range results(t, r, id, 1) {
				if l.Outcome == api.OutcomeFailed {
					failed[key] = l.Error
				}
			}
			for i, l := range wantLines[:4] {
				key := fmt.Sprintf("k-%05d", l-2)
				if e, ok := failed[key]; !ok || !strings.Contains(e, fmt.Sprintf("line %d", l)) || r.callsOf(key) != 0 {
					t.Errorf("bad row %d (%s): error %q, %d calls; want failed naming line %d, never run", i, key, e, r.callsOf(key), l)
				}
			}
			if r.callsOf("k-00000") != 1 || r.callsOf("k-00100") != 1 {
				t.Errorf("good rows ran %d and %d times, want once", r.callsOf("k-00000"), r.callsOf("k-00100"))
			}
		})
	}
}

// TestMemBadRowsOverTheLimitRefused: under bad_rows fail a source whose
// bad rows pass max_invalid_percent is refused whole, naming the share.
func TestMemBadRowsOverTheLimitRefused(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
	if err := r.blobs.Put(ctx, "in/orders.csv", "", badCSV(40)); err != nil {
		t.Fatal(err)
	}
	pct := 5.0
	_, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "many", Pipeline: "counted", KeyField: "id",
		Source: api.SourceSpec{Object: "s3://" + r.blobs.Bucket() + "/in/orders.csv"}, Schema: json.RawMessage(checkSchema),
		BadRows: api.BadRowsFail, MaxInvalidPercent: &pct})
	var pe *api.ProblemsError
	if !errors.As(err, &pe) || pe.Count != 5 || pe.Rows != 40 || !strings.Contains(err.Error(), "max_invalid_percent 5") {
		t.Fatalf("err = %v, want 5 of 40 rows over 5 %%", err)
	}
	if _, gerr := r.store.GetBatch(ctx, "many"); !errors.Is(gerr, api.ErrNotFound) {
		t.Fatalf("a refused submit left a batch: %v", gerr)
	}
}
