package flow

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// queuedKinds counts the rig's queued messages by kind (fanout, item,
// pack) and returns the fan-out messages' sent marks.
func (r *rig) queuedKinds(t *testing.T) (map[ledger.MessageKind]int, []*ledger.SentMark) {
	t.Helper()
	ds := r.queue.take()
	r.queue.put(ds)
	kinds := map[ledger.MessageKind]int{}
	var marks []*ledger.SentMark
	for _, d := range ds {
		var m struct {
			Kind ledger.MessageKind `json:"kind"`
			Sent *ledger.SentMark   `json:"sent"`
		}
		if err := json.Unmarshal(d.Body, &m); err != nil {
			t.Fatal(err)
		}
		kinds[m.Kind]++
		if m.Kind == ledger.KindFanout {
			marks = append(marks, m.Sent)
		}
	}
	return kinds, marks
}

// A sampled batch whose first fan-out chunk holds the sample's end and
// more (chunks of 100 items, 10 a message, sample 25) sends that chunk's
// first 3 packs only — the sample's 30 items — and holds the chunk's
// message as it holds the later chunks': while the sample runs and while
// it awaits a decision, the queue carries only fan-out messages, no pack
// outside the sample, and a delivery of them (each delivered twice once:
// SQS may deliver a message twice) sends nothing more. Approved, the held
// chunk sends its other 7 packs, not its first 3 again: every item is
// called exactly once. Rejected, the items outside the sample end
// cancelled, never called. The live view's items fanned out count the
// sample's 30 while it waits, and all 200 once each at the end.
func TestSampleSendsOnlyTheSampleOfItsChunk(t *testing.T) {
	for _, decide := range []string{"approve", "reject"} {
		t.Run(decide, func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, sampledPipeline)
			r.sub.ChunkItems = 100
			const id = "sample-first"
			r.submitSampled(t, ctx, id, 200, 25, nil)
			b := r.sampleRounds(t, ctx, id, 1) // the two chunks' fan-outs
			kinds, marks := r.queuedKinds(t)
			if kinds[ledger.KindPack] != 3 || kinds[ledger.KindFanout] != 2 || len(kinds) != 2 {
				t.Fatalf("queued after the fan-out: %v, want the sample's 3 packs and 2 held fan-out messages", kinds)
			}
			var upto []int64
			for _, m := range marks {
				if m != nil {
					upto = append(upto, m.Upto)
				}
			}
			if len(upto) != 1 || upto[0] != 3 || b.Approval == nil || b.Approval.Estimate != nil {
				t.Fatalf("sent marks up to %v, approval %+v: want one chunk's first 3 messages marked sent, no estimate yet", upto, b.Approval)
			}
			if p, err := r.store.Progress(ctx, id, 1, b.CounterShards); err != nil || p.FannedOut != 30 {
				t.Fatalf("fanned out %d items (%v) while sampling, want the sample's 30", p.FannedOut, err)
			}
			ds := r.queue.take()
			r.queue.put(append(ds, ds...)) // every message twice, once
			for range 4 {
				b = r.step(t, ctx, id, 10_000_000_000)
			}
			kinds, _ = r.queuedKinds(t)
			if n := r.totalCalls(); n != 30 || kinds[ledger.KindFanout] != 4 || kinds[ledger.KindPack] != 0 || b.Approval.State != api.ApprovalAwaiting {
				t.Fatalf("after 4 rounds (the first delivering each message twice): %d calls, queued %v, approval %+v: want the sample's 30 called, only the 2 fan-out messages held (twice each), awaiting approval", n, kinds, b.Approval)
			}
			var err error
			if decide == "approve" {
				_, err = r.ctl.Approve(ctx, id)
			} else {
				_, err = r.ctl.Reject(ctx, id)
			}
			if err != nil {
				t.Fatal(err)
			}
			r.drain(t, ctx, 2)
			res, err := r.fin.Finalize(ctx, id, 1)
			if err != nil {
				t.Fatal(err)
			}
			c := res.Report.Census
			want := int64(200)
			if decide == "reject" {
				want = 30
				if c.Cancelled != 170 {
					t.Errorf("census %+v: want the 170 items outside the sample cancelled", c)
				}
			}
			if n := r.totalCalls(); n != want || c.Succeeded+c.Failed != want {
				t.Fatalf("%d items called, census %+v: want %d called and ended", n, c, want)
			}
			if p, err := r.store.Progress(ctx, id, 1, b.CounterShards); err != nil || p.FannedOut != 200 {
				t.Errorf("fanned out %d items (%v) at the end, want 200: each piece once", p.FannedOut, err)
			}
			r.calls.Range(func(k, _ any) bool {
				if n := r.callsOf(k.(string)); n != 1 {
					t.Errorf("item %s called %d times, want once", k, n)
				}
				return true
			})
		})
	}
}
