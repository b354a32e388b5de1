package flow

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// inputsRec records each call's input by key; the keys of failFirst fail
// (permanently) on their first call.
type inputsRec struct {
	mu        sync.Mutex
	in        map[string][]string
	failFirst map[string]bool
}

func (s *inputsRec) run(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.in[req.Key] = append(s.in[req.Key], string(req.Input))
	if s.failFirst[req.Key] && len(s.in[req.Key]) == 1 {
		return pipeline.Result{}, pipeline.Permanent(errors.New("downstream said no"))
	}
	return pipeline.Result{Output: req.Input}, nil
}

// correctFromExport runs batch id's first run from the CSV src (with
// schema and bad_rows fail), exports its failed items' inputs
// (Control.Inputs) and hands them back unchanged as a correction; it
// returns the correction's error (nil: run 2 ran and was finalized).
func correctFromExport(t *testing.T, r *rig, id, src, schema string, failed int64) error {
	t.Helper()
	ctx := context.Background()
	if err := r.blobs.Put(ctx, "in/"+id+".csv", "", []byte(src)); err != nil {
		t.Fatal(err)
	}
	req := api.SubmitRequest{BatchID: id, Pipeline: "counted", KeyField: "id", BadRows: api.BadRowsFail,
		Source: api.SourceSpec{Object: "s3://" + r.blobs.Bucket() + "/in/" + id + ".csv"}}
	if schema != "" {
		req.Schema = json.RawMessage(schema)
	}
	if _, err := r.sub.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	if res, err := r.fin.Finalize(ctx, id, 1); err != nil || res.Report.Census.Failed != failed {
		t.Fatalf("run 1: %+v %v; want %d failed", res.Report.Census, err, failed)
	}
	page, err := r.ctl.Inputs(ctx, id, api.OutcomeFailed, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("export:\n%s", page.Body)
	if err := r.blobs.Put(ctx, "fix/"+id+".csv", "", page.Body); err != nil {
		t.Fatal(err)
	}
	r.clock.T = r.clock.T.Add(time.Minute)
	if _, err := r.sub.Correct(ctx, id, api.CorrectRequest{Source: api.SourceSpec{Object: "s3://" + r.blobs.Bucket() + "/fix/" + id + ".csv"}}); err != nil {
		return err
	}
	r.drain(t, ctx, 1)
	if _, err := r.fin.Finalize(ctx, id, 2); err != nil {
		t.Fatal(err)
	}
	return nil
}

// Failed items exported in their CSV source's own format and handed back
// unchanged as a correction run with exactly the inputs they had: the
// batch's schema types the correction's cells as it typed the source's
// (before, the correction read them untyped: {"qty":"12","ok":"false"}
// where the first run had {"qty":12,"ok":false}).
func TestCorrectionFromAnExportKeepsTheSchemasTypes(t *testing.T) {
	rec := &inputsRec{in: map[string][]string{}, failFirst: map[string]bool{"b": true, "d": true}}
	r := newRig(t, rec.run)
	src := "id,qty,ok,note\na,1,true,x\nb,12,false,\"has, comma\"\nc,3,true,y\nd,40,true,\"two\nlines\"\n"
	schema := `{"type":"object","properties":{"qty":{"type":"integer"},"ok":{"type":"boolean"}},"required":["id","qty"]}`
	if err := correctFromExport(t, r, "rt", src, schema, 2); err != nil {
		t.Fatalf("correct: %v", err)
	}
	for _, k := range []string{"b", "d"} {
		if got := rec.in[k]; len(got) != 2 || got[0] != got[1] {
			t.Errorf("%s: inputs %q; want its first input twice", k, got)
		}
	}
}

// A row the batch's schema refused (qty 0, minimum 1) failed under
// bad_rows fail without a call; handed back unchanged, the correction is
// refused by the same schema, naming the row, and nothing runs (before,
// the correction skipped the schema and called the pipeline with it).
func TestCorrectionIsCheckedByTheBatchsSchema(t *testing.T) {
	rec := &inputsRec{in: map[string][]string{}, failFirst: map[string]bool{}}
	r := newRig(t, rec.run)
	src := "id,qty\n"
	for i := range 30 {
		src += "g" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ",5\n"
	}
	src += "e,0\n"
	schema := `{"type":"object","properties":{"qty":{"type":"integer","minimum":1}},"required":["id","qty"]}`
	err := correctFromExport(t, r, "sc", src, schema, 1)
	var ie *api.InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "qty") {
		t.Errorf("correction of a row the schema refuses: %v; want an input error naming qty", err)
	}
	if got := rec.in["e"]; len(got) != 0 {
		t.Errorf("e, refused by the batch's schema, ran with %q", got)
	}
}

// Under bad_rows fail a row with one field too many (b) fails without a
// call and another (c) fails in its pipeline. The export gives b's extra
// cell to b's record alone, so c, corrected unchanged, runs with exactly
// its input (before, every record got the "_column_3" column, and c ran
// with {"_column_3":""} added); b, still one field too many, is refused
// with the correction.
func TestExportKeepsABadRowsExtraCellToItself(t *testing.T) {
	rec := &inputsRec{in: map[string][]string{}, failFirst: map[string]bool{"c": true}}
	r := newRig(t, rec.run)
	src := "id,v\na,1\nb,2,extra\nc,3\n"
	for i := range 30 { // the bad row under max_invalid_percent
		src += "g" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ",1\n"
	}
	if err := correctFromExport(t, r, "br", src, "", 2); err == nil || !strings.Contains(err.Error(), "line") {
		t.Fatalf("correction holding b's line as it was: %v; want refused naming its line", err)
	}
	ctx := context.Background()
	page, err := r.ctl.Inputs(ctx, "br", api.OutcomeFailed, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.Split(strings.TrimSpace(string(page.Body)), "\n") {
		if !strings.HasPrefix(line, "b,") {
			kept = append(kept, line)
		}
	}
	if got := strings.Join(kept, "\n"); got != "id,v\nc,3" {
		t.Fatalf("export without b's record:\n%s\nwant the header and c's record alone", got)
	}
	if err := r.blobs.Put(ctx, "fix/br2.csv", "", []byte(strings.Join(kept, "\n")+"\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.sub.Correct(ctx, "br", api.CorrectRequest{Source: api.SourceSpec{Object: "s3://" + r.blobs.Bucket() + "/fix/br2.csv"}}); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	if _, err := r.fin.Finalize(ctx, "br", 2); err != nil {
		t.Fatal(err)
	}
	if got := rec.in["c"]; len(got) != 2 || got[0] != got[1] {
		t.Errorf("c: inputs %q; want its first input twice", got)
	}
}
