//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"testing"

	"github.com/bulkrun/bulkrun/shared/source"

	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/bulkrun/bulkrun/internal/trigger"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/finalize"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// laneParts starts each part as the finalize function does — an
// asynchronous Invoke of the deployed finalize function, made with
// finalize's identity so that the IAM lane checks it against finalize's
// role (the deployed function finds no such batch in the stack's table
// and does nothing) — and runs the part here, in a goroutine of its own,
// on the harness's storage.
type laneParts struct {
	invoke *trigger.Lambda
	f      *finalize.Finalizer
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
	wrote  int
	runs   int
	ranges int
}

func (p *laneParts) StartFinalizePart(ctx context.Context, id string, run, plan, part, chain int) error {
	if err := p.invoke.StartFinalizePart(ctx, id, run, plan, part, chain); err != nil {
		return err
	}
	p.wg.Go(func() {
		res, err := p.f.FinalizePart(context.Background(), id, run, plan, part)
		for err == nil && res.Continued && !res.Parted { // the merge, chained
			res, err = p.f.Finalize(context.Background(), id, run)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.runs++
		if err != nil {
			p.errs = append(p.errs, fmt.Errorf("part %d: %w", part, err))
		}
		if res.Wrote {
			p.wrote++
		}
	})
	return nil
}

// StartFinalizeRange starts a key range of the merge as
// StartFinalizePart starts a part: an Invoke checked by the IAM lane, and
// the range run here.
func (p *laneParts) StartFinalizeRange(ctx context.Context, id string, run, cp, rng, chain int) error {
	if err := p.invoke.StartFinalizeRange(ctx, id, run, cp, rng, chain); err != nil {
		return err
	}
	p.wg.Go(func() {
		res, err := p.f.FinalizeRange(context.Background(), id, run, cp, rng)
		p.mu.Lock()
		defer p.mu.Unlock()
		p.ranges++
		if err != nil {
			p.errs = append(p.errs, fmt.Errorf("range %d: %w", rng, err))
		}
		if res.Wrote {
			p.wrote++
		}
	})
	return nil
}

// TestFinalizeInPartsOnEmulator guards the parallel finalize on the
// emulator's DynamoDB and S3, at one and ten items per message: a run of
// 260 items of 3 item shards read in 3 parts at once (parts of 65 rows),
// each part's start an Invoke of the finalize function checked by the
// IAM lane against finalize's role, the last part merging: one report,
// whose census and results files are byte for byte those of the same
// items finalized in one pass, and no finalize object left; the same with
// the merge split by key ranges (ranges of ~6 KiB of the parts' runs,
// each started by an Invoke, the last composing the results), and a
// range's piece copied into a results part inside S3 (UploadPartCopy with
// a byte range, under finalize's role) as the composition copies the
// pieces of 5 MiB or more. Without
// finalize's lambda:InvokeFunction on itself the parts are refused as AWS
// refuses them, and the lane names the grant.
func TestFinalizeInPartsOnEmulator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		k      int
		ranges bool
	}{{"K1", 1, false}, {"K10", 10, false}, {"K10 in ranges", 10, true}} {
		k := c.k
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
				if strings.HasSuffix(req.Key, "3") {
					return pipeline.Result{}, pipeline.Permanent(errors.New("bad item " + req.Key))
				}
				return pipeline.Result{Output: req.Input, Cost: pipeline.Cost{"usd": 0.1}}, nil
			})
			var src strings.Builder
			src.WriteByte('[')
			for i := range 260 {
				if i > 0 {
					src.WriteByte(',')
				}
				hs := fnv.New64a()
				fmt.Fprint(hs, i)
				fmt.Fprintf(&src, `{"id":"k-%016x","n":%d}`, hs.Sum64(), i)
			}
			src.WriteByte(']')
			one, parted := newID(t)+"-one", newID(t)+"-parts"
			for _, id := range []string{one, parted} {
				if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", KeyField: "id",
					Source: api.SourceSpec{Items: json.RawMessage(src.String())}, ItemsPerMessage: k}); err != nil {
					t.Fatal(err)
				}
			}
			h.drain(t, ctx)

			ref, err := h.finalizer.Finalize(ctx, one, 1)
			if err != nil || !ref.Wrote {
				t.Fatalf("one pass: %+v %v", ref, err)
			}
			f := *h.finalizer
			f.PartRows = 65 // 260 items in 3 item shards: 3 parts
			if c.ranges {
				f.MergeRangeBytes, f.RunMarkBytes = 6<<10, 256
			}
			parts := &laneParts{f: &f, invoke: trigger.New(lambda.NewFromConfig(h.as(env.aws, "finalize")), env.finalizeFn)}
			f.Parts = parts
			res, err := f.Finalize(ctx, parted, 1)
			if err != nil || !res.Parted {
				t.Fatalf("the first call: %+v %v, want its parts started", res, err)
			}
			parts.wg.Wait()
			if err := errors.Join(parts.errs...); err != nil {
				t.Fatal(err)
			}
			b := mustBatch(t, h, parted)
			if parts.runs != 3 || parts.wrote != 1 || b.Status != ref.Report.Status || c.ranges != (parts.ranges >= 3) {
				t.Fatalf("%d parts and %d ranges ran, %d wrote the report, status %s; want 3, ≥ 3 with ranges, 1, %s", parts.runs, parts.ranges, parts.wrote, b.Status, ref.Report.Status)
			}
			got, err := f.Finalize(ctx, parted, 1)
			if err != nil {
				t.Fatal(err)
			}
			gc, _ := json.Marshal(got.Report.Census)
			wc, _ := json.Marshal(ref.Report.Census)
			if !bytes.Equal(gc, wc) || ref.Report.Census.Failed == 0 {
				t.Fatalf("census in parts %s, in one pass %s", gc, wc)
			}
			for _, o := range api.TerminalOutcomes() {
				a, aerr := h.blobs.Get(ctx, api.ResultsKey(parted, 1, o))
				w, werr := h.blobs.Get(ctx, api.ResultsKey(one, 1, o))
				if !bytes.Equal(a, w) || (aerr == nil) != (werr == nil) {
					t.Fatalf("results of %s: %d bytes (%v) in parts, %d (%v) in one pass", o, len(a), aerr, len(w), werr)
				}
			}
			left := 0
			_ = h.blobs.List(ctx, h.blobs.Bucket(), finalize.FinalizePrefix(parted, 1), func(source.ObjectInfo) error { left++; return nil })
			if left != 0 {
				t.Fatalf("%d finalize objects left", left)
			}
			if c.ranges {
				copyPiece(t, h, parted)
			}
			t.Logf("%s: %d shards read in 3 parts, %d ranges, census %s", c.name, b.ListShards, parts.ranges, gc)
		})
	}
	t.Run("invoke refused without the grant", func(t *testing.T) {
		t.Parallel()
		if !laneOn() {
			t.Skip("the IAM lane is off")
		}
		h := newHarness(t, func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
		const action = "lambda:InvokeFunction"
		laneRevoke(t, h, map[string][]string{"finalize": {action}})
		id := newID(t)
		if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: inlineItems(130)}, ItemsPerMessage: 10}); err != nil {
			t.Fatal(err)
		}
		h.drain(t, ctx)
		f := *h.finalizer
		f.PartRows = 50 // 130 items in 2 item shards: 2 parts
		parts := &laneParts{f: &f, invoke: trigger.New(lambda.NewFromConfig(h.as(env.aws, "finalize")), env.finalizeFn)}
		f.Parts = parts
		if _, err := f.Finalize(ctx, id, 1); err == nil || !strings.Contains(err.Error(), "AccessDenied") {
			t.Fatalf("parts started without %s: %v, want AccessDenied", action, err)
		}
		rep, err := laneReport(t.Name())
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Denials) == 0 || rep.Denials[0].Function != "finalize" || rep.Denials[0].Action != action {
			t.Fatalf("the lane's denials %v, want finalize's %s", rep.Denials, action)
		}
		t.Logf("the lane names it: %s", rep.Denials[0])
	})
}

// copyPiece copies bytes of a 6 MiB object under the run's finalize
// prefix (a range's piece) into the first part of an upload of a results
// key, and its last 100 bytes sent as the second part, with finalize's
// identity (the harness's finalizer's store): the object completed is
// those bytes.
func copyPiece(t *testing.T, h *harness, id string) {
	t.Helper()
	ctx := context.Background()
	blobs := h.finalizer.Blobs
	piece := make([]byte, 6<<20)
	for i := range piece {
		piece[i] = byte(i % 251)
	}
	src := finalize.FinalizePrefix(id, 1) + "ranges/000009/0000-copy.succeeded.piece"
	dst := finalize.FinalizePrefix(id, 1) + "copied.jsonl"
	if err := blobs.Put(ctx, src, "application/x-ndjson", piece); err != nil {
		t.Fatal(err)
	}
	upload, err := blobs.StartParts(ctx, dst, "application/x-ndjson")
	if err != nil {
		t.Fatal(err)
	}
	const at = 7
	if err := blobs.CopyPart(ctx, dst, upload, 1, src, at, 5<<20); err != nil {
		t.Fatal(err)
	}
	tail := piece[len(piece)-100:]
	if err := blobs.PutPart(ctx, dst, upload, 2, tail); err != nil {
		t.Fatal(err)
	}
	if err := blobs.CompleteParts(ctx, dst, upload, 2, 5<<20+100); err != nil {
		t.Fatal(err)
	}
	got, err := blobs.Get(ctx, dst)
	want := append(append([]byte(nil), piece[at:at+5<<20]...), tail...)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("copied part: %d bytes (%v), want %d", len(got), err, len(want))
	}
	for _, key := range []string{src, dst} {
		if err := blobs.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
}
