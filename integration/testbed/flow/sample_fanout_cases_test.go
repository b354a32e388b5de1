package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// faultQueue wraps the rig's queue: decide says, per body, whether the
// queue refuses it (RefusedError) or does not take it (UnsentError);
// onSend runs before a Send (with the bodies' pack_first list).
type faultQueue struct {
	*memQueue
	mu     sync.Mutex
	decide func(first int64, kind ledger.MessageKind) (refuse, unsent bool)
	onSend func(firsts []int64)
}

func unitFirst(body []byte) (int64, ledger.MessageKind) {
	var m struct {
		Kind      ledger.MessageKind `json:"kind"`
		PackFirst int64              `json:"pack_first"`
		Key       string             `json:"key"`
	}
	_ = json.Unmarshal(body, &m)
	if m.Kind == ledger.KindPack {
		return m.PackFirst, m.Kind
	}
	if i := strings.LastIndex(m.Key, "-"); i >= 0 {
		n, _ := strconv.ParseInt(m.Key[i+1:], 10, 64)
		return n, m.Kind
	}
	return -1, m.Kind
}

func (q *faultQueue) Send(ctx context.Context, bodies [][]byte) error {
	var firsts []int64
	for _, b := range bodies {
		f, _ := unitFirst(b)
		firsts = append(firsts, f)
	}
	if q.onSend != nil {
		q.onSend(firsts)
	}
	var ok [][]byte
	var refused []ledger.Refusal
	var unsent []int
	for i, b := range bodies {
		f, k := unitFirst(b)
		var rf, us bool
		if q.decide != nil {
			q.mu.Lock()
			rf, us = q.decide(f, k)
			q.mu.Unlock()
		}
		switch {
		case rf:
			refused = append(refused, ledger.Refusal{Index: i, Code: "InvalidMessageContents", Message: "test refusal"})
		case us:
			unsent = append(unsent, i)
		default:
			ok = append(ok, b)
		}
	}
	if err := q.memQueue.Send(ctx, ok); err != nil {
		return err
	}
	if len(unsent) > 0 {
		return &ledger.UnsentError{Unsent: unsent, Refused: refused, Err: ledger.ErrUnavailable}
	}
	if len(refused) > 0 {
		return &ledger.RefusedError{Refused: refused}
	}
	return nil
}

type fanOutCase struct {
	n, chunk, k, sample int
	decide              string // approve, reject, auto, none (approve before any delivery)
	dupFirst            bool   // deliver every message twice in the first round
	dupAll              int    // drain copies after the decision
	queue               func(r *rig) *faultQueue
	beforeDecide        func(t *testing.T, r *rig, id string)
	pauseDuringSample   bool
}

// wantCalls is how many items c calls: all, or the sample's when rejected.
func (c fanOutCase) wantCalls() int64 {
	if c.decide == "reject" {
		a, _ := sampleUnits(c.n, c.chunk, c.k, c.sample)
		return int64(a)
	}
	return int64(c.n)
}

// sampleUnits is how many items the sample's units hold (packs whose
// first index < sample, packs restarting at each chunk).
func sampleUnits(n, chunk, k, sample int) (items int, maxIdx int) {
	for f := 0; f < n; f += chunk {
		c := min(chunk, n-f)
		for p := f; p < f+c; p += k {
			if p < sample {
				e := min(p+k, f+c)
				items += e - p
				maxIdx = e
			}
		}
	}
	return
}

type fanOutResult struct {
	sampleCalls, calls int64
	fannedWait         int64
	fannedEnd          int64
	census             api.Census
	done               int64
	triggers           int64
	twice              []string
	outside            []string
	approval           *api.Approval
}

func runFanOutCase(t *testing.T, c fanOutCase) fanOutResult {
	t.Helper()
	ctx := context.Background()
	r := newRig(t, sampledPipeline)
	r.sub.ChunkItems = c.chunk
	r.worker.BudgetEvery = -1
	var q *faultQueue
	if c.queue != nil {
		q = c.queue(r)
		r.worker.Queue = q
	}
	const id = "brk"
	var auto *float64
	if c.decide == "auto" {
		v := 1000.0
		auto = &v
	}
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", MaxAttempts: 3, ItemsPerMessage: c.k,
		Sample: c.sample, AutoApproveUSD: auto, Source: api.SourceSpec{Items: items(c.n)}}); err != nil {
		t.Fatal(err)
	}
	if c.decide == "none" {
		if _, err := r.ctl.Approve(ctx, id); err != nil {
			t.Logf("approve before any delivery: %v", err)
		}
	}
	if c.pauseDuringSample {
		if _, err := r.ctl.Pause(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	var res fanOutResult
	_, maxIdx := sampleUnits(c.n, c.chunk, c.k, c.sample)
	var b ledger.Batch
	for i := range 8 {
		if i == 0 && c.dupFirst {
			ds := r.queue.take()
			r.queue.put(append(ds, ds...))
		}
		if i == 3 && c.pauseDuringSample {
			if _, err := r.ctl.Unpause(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		b = r.step(t, ctx, id, 10*time.Second)
	}
	res.approval = b.Approval
	res.sampleCalls = r.totalCalls()
	p, _ := r.store.Progress(ctx, id, 1, b.CounterShards)
	res.fannedWait = p.FannedOut
	if c.decide != "auto" && c.decide != "none" {
		r.calls.Range(func(k, _ any) bool {
			s := k.(string)
			n, _ := strconv.Atoi(s[strings.LastIndex(s, "-")+1:])
			if n >= maxIdx {
				res.outside = append(res.outside, s)
			}
			return true
		})
	}
	if c.beforeDecide != nil {
		c.beforeDecide(t, r, id)
	}
	switch c.decide {
	case "approve":
		if _, err := r.ctl.Approve(ctx, id); err != nil {
			t.Fatal(err)
		}
	case "reject":
		if _, err := r.ctl.Reject(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	r.drain(t, ctx, max(1, c.dupAll))
	fr, err := r.fin.Finalize(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	res.census = fr.Report.Census
	res.calls = r.totalCalls()
	p, _ = r.store.Progress(ctx, id, 1, b.CounterShards)
	res.fannedEnd, res.done = p.FannedOut, p.Done
	res.triggers = r.trigger.n.Load()
	r.calls.Range(func(k, _ any) bool {
		if n := r.callsOf(k.(string)); n != 1 {
			res.twice = append(res.twice, fmt.Sprintf("%s×%d", k, n))
		}
		return true
	})
	t.Logf("%+v: sample calls %d (want %d units' items), fanned while waiting %d, calls %d, census S%d F%d C%d T%d, progress done %d, fanned %d, triggers %d, twice %v, outside %v",
		c, res.sampleCalls, func() int { a, _ := sampleUnits(c.n, c.chunk, c.k, c.sample); return a }(), res.fannedWait, res.calls,
		res.census.Succeeded, res.census.Failed, res.census.Cancelled, res.census.Total, res.done, res.fannedEnd, res.triggers, res.twice, res.outside)
	return res
}

func checkFanOutCase(t *testing.T, c fanOutCase, res fanOutResult, wantCalls int64) {
	t.Helper()
	want, _ := sampleUnits(c.n, c.chunk, c.k, c.sample)
	if c.decide != "auto" && c.decide != "none" && res.sampleCalls != int64(want) {
		t.Errorf("sample calls %d, want %d", res.sampleCalls, want)
	}
	if len(res.outside) > 0 {
		t.Errorf("items outside the sample called before the decision: %v", res.outside)
	}
	if len(res.twice) > 0 {
		t.Errorf("items called more than once: %v", res.twice)
	}
	cs := res.census
	if cs.Succeeded+cs.Failed+cs.Cancelled != int64(c.n) || cs.Total != int64(c.n) {
		t.Errorf("census %+v: want %d ended", cs, c.n)
	}
	if res.calls != wantCalls {
		t.Errorf("calls %d, want %d", res.calls, wantCalls)
	}
	if res.fannedEnd != int64(c.n) {
		t.Errorf("fanned out %d at the end, want %d", res.fannedEnd, c.n)
	}
	if c.decide != "reject" && res.done != int64(c.n) {
		t.Errorf("progress done %d, want %d", res.done, c.n)
	}
}

// fannedWaitWant: the chunks holding the sample's units, as far as their units go.
func fannedWaitWant(n, chunk, k, sample int) int64 {
	var total int64
	for f := 0; f < n; f += chunk {
		c := min(chunk, n-f)
		if f >= sample {
			continue
		}
		m := (sample - f + k - 1) / k * k
		if m >= c {
			total += int64(c)
		} else {
			total += int64(m)
		}
	}
	return total
}

// Samples around pack and chunk boundaries (200 items in chunks of 100,
// K = 1 and 10): while awaiting, only the sample's messages were sent
// and counted fanned out; approved, every item is called once, the
// census and the counters count 200, and the fanned-out count is 200.
func TestSampleFanOutBoundaries(t *testing.T) {
	for _, k := range []int{1, 10} {
		for _, s := range []int{1, 9, 10, 11, 29, 30, 31, 99, 100, 101, 150, 199, 200} {
			c := fanOutCase{n: 200, chunk: 100, k: k, sample: s, decide: "approve"}
			t.Run(fmt.Sprintf("k%d_s%d", k, s), func(t *testing.T) {
				res := runFanOutCase(t, c)
				if w := fannedWaitWant(c.n, c.chunk, c.k, c.sample); res.fannedWait != w {
					t.Errorf("fanned while waiting %d, want %d", res.fannedWait, w)
				}
				if res.approval == nil || res.approval.State != api.ApprovalAwaiting {
					t.Errorf("approval %+v, want awaiting", res.approval)
				}
				checkFanOutCase(t, c, res, int64(c.n))
			})
		}
	}
}

// Chunks not a multiple of K, and a short last chunk, approved or
// rejected (the items outside the sample cancelled, never called).
func TestSampleFanOutOddChunks(t *testing.T) {
	for _, c := range []fanOutCase{
		{n: 203, chunk: 25, k: 10, sample: 11, decide: "approve"},
		{n: 203, chunk: 25, k: 10, sample: 21, decide: "approve"},
		{n: 203, chunk: 25, k: 10, sample: 40, decide: "approve"},
		{n: 203, chunk: 25, k: 10, sample: 202, decide: "approve"},
		{n: 95, chunk: 100, k: 10, sample: 50, decide: "approve"},
		{n: 203, chunk: 25, k: 7, sample: 33, decide: "reject"},
	} {
		t.Run(fmt.Sprintf("n%d_c%d_k%d_s%d_%s", c.n, c.chunk, c.k, c.sample, c.decide), func(t *testing.T) {
			res := runFanOutCase(t, c)
			if w := fannedWaitWant(c.n, c.chunk, c.k, c.sample); res.fannedWait != w {
				t.Errorf("fanned while waiting %d, want %d", res.fannedWait, w)
			}
			checkFanOutCase(t, c, res, c.wantCalls())
		})
	}
}

// Rejections, duplicate deliveries before and after the decision,
// auto-approval, an approval before any delivery, a caller's pause
// during the sample and a sample larger than a chunk: each item called
// at most once, none outside the sample before the decision.
func TestSampleFanOutRejectDupAuto(t *testing.T) {
	for name, c := range map[string]fanOutCase{
		"reject_k10":      {n: 200, chunk: 100, k: 10, sample: 25, decide: "reject"},
		"reject_k1":       {n: 200, chunk: 100, k: 1, sample: 25, decide: "reject", dupAll: 2},
		"dupfirst_k10":    {n: 200, chunk: 100, k: 10, sample: 25, decide: "approve", dupFirst: true, dupAll: 2},
		"dupfirst_k1":     {n: 200, chunk: 100, k: 1, sample: 25, decide: "approve", dupFirst: true, dupAll: 3},
		"auto_k10":        {n: 200, chunk: 100, k: 10, sample: 25, decide: "auto"},
		"auto_k1_dup":     {n: 200, chunk: 100, k: 1, sample: 25, decide: "auto", dupFirst: true, dupAll: 2},
		"approvedearly":   {n: 200, chunk: 100, k: 10, sample: 25, decide: "none"},
		"pause_k10":       {n: 200, chunk: 100, k: 10, sample: 25, decide: "approve", pauseDuringSample: true},
		"sample_gt_chunk": {n: 500, chunk: 100, k: 10, sample: 250, decide: "approve", dupAll: 2},
	} {
		t.Run(name, func(t *testing.T) {
			res := runFanOutCase(t, c)
			checkFanOutCase(t, c, res, c.wantCalls())
		})
	}
}

// The chunk of the sample's end whose first message after the sample is
// its last, short pack (chunk of 25 at K = 10, sample 11: packs 0–9 and
// 10–19 are the sample's, 20–24 the rest): that pack is made by the
// packer's Flush, after the chunk's lines are read, and the fan-out
// stops there as at any other message after the sample. Left to itself
// (no decision) the sample runs and is estimated. It stalled once: the
// stop was only recognized while the lines were read, and the fan-out
// failed before sending the sample's two packs.
func TestSampleFanOutShortLastPackRunsTheSample(t *testing.T) {
	for _, c := range []struct{ n, chunk, k, sample int }{{50, 25, 10, 11}, {95, 100, 10, 85}} {
		t.Run(fmt.Sprintf("n%d_c%d_k%d_s%d", c.n, c.chunk, c.k, c.sample), func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, sampledPipeline)
			r.sub.ChunkItems = c.chunk
			r.worker.BudgetEvery = -1
			const id = "short"
			if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", MaxAttempts: 3, ItemsPerMessage: c.k,
				Sample: c.sample, Source: api.SourceSpec{Items: items(c.n)}}); err != nil {
				t.Fatal(err)
			}
			var b ledger.Batch
			for range 30 {
				b = r.step(t, ctx, id, 10*time.Second)
			}
			kinds, _ := r.queuedKinds(t)
			var rc int
			for _, d := range r.queue.take() {
				rc = max(rc, d.ReceiveCount)
			}
			p, _ := r.store.Progress(ctx, id, 1, b.CounterShards)
			want, _ := sampleUnits(c.n, c.chunk, c.k, c.sample)
			t.Logf("after 30 rounds: %d calls (want %d), approval %+v (estimate %v), queued %v, max receive count %d, fanned %d",
				r.totalCalls(), want, b.Approval, b.Approval.Estimate != nil, kinds, rc, p.FannedOut)
			if r.totalCalls() != int64(want) || b.Approval.Estimate == nil {
				t.Errorf("the sample did not run: %d calls, want %d; estimate %v", r.totalCalls(), want, b.Approval.Estimate)
			}
		})
	}
}

// The queue refusing a message (its items recorded failed, never called)
// or not taking it (sent again) in the sample or in the rest: the run's
// counters count every item, so the worker triggers finalize; a refusal
// in the sample was once left out of the counters (the sample's send
// returned before counting it).
func TestSampleFanOutQueueFaults(t *testing.T) {
	once := func(match func(f int64, k ledger.MessageKind) bool, refuse bool) func(r *rig) *faultQueue {
		return func(r *rig) *faultQueue {
			done := false
			return &faultQueue{memQueue: r.queue, decide: func(f int64, k ledger.MessageKind) (bool, bool) {
				if !done && match(f, k) {
					done = true
					return refuse, !refuse
				}
				return false, false
			}}
		}
	}
	isUnit := func(at int64) func(int64, ledger.MessageKind) bool {
		return func(f int64, k ledger.MessageKind) bool { return k != ledger.KindFanout && f == at }
	}
	for name, c := range map[string]fanOutCase{
		"refuse_sample_pack_k10": {n: 200, chunk: 100, k: 10, sample: 25, decide: "approve", queue: once(isUnit(10), true)},
		"refuse_sample_item_k1":  {n: 200, chunk: 100, k: 1, sample: 25, decide: "approve", queue: once(isUnit(3), true)},
		"refuse_rest_pack_k10":   {n: 200, chunk: 100, k: 10, sample: 25, decide: "approve", queue: once(isUnit(50), true)},
		"unsent_sample_pack_k10": {n: 200, chunk: 100, k: 10, sample: 25, decide: "approve", queue: once(isUnit(10), false)},
		"unsent_sample_item_k1":  {n: 200, chunk: 100, k: 1, sample: 25, decide: "approve", queue: once(isUnit(24), false)},
		"unsent_rest_pack_k10":   {n: 200, chunk: 100, k: 10, sample: 25, decide: "approve", queue: once(isUnit(30), false)},
		"refuse_sample_reject":   {n: 200, chunk: 100, k: 10, sample: 25, decide: "reject", queue: once(isUnit(0), true)},
	} {
		t.Run(name, func(t *testing.T) {
			res := runFanOutCase(t, c)
			a, _ := sampleUnits(c.n, c.chunk, c.k, c.sample)
			refusedItems := int64(0)
			if strings.HasPrefix(name, "refuse") {
				refusedItems = int64(c.k)
			}
			want := int64(c.n) - refusedItems
			if c.decide == "reject" {
				want = int64(a) - refusedItems
			}
			// the refused unit's items end failed, never called
			res.sampleCalls += refusedItems * boolInt(strings.Contains(name, "refuse_sample"))
			checkFanOutCase(t, c, res, want)
			if res.triggers < 1 {
				t.Errorf("finalize never triggered by the worker")
			}
		})
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// The same refusal without a sample is counted too.
func TestSampleFanOutRefusedNoSampleControl(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, sampledPipeline)
	r.sub.ChunkItems = 100
	done := false
	r.worker.Queue = &faultQueue{memQueue: r.queue, decide: func(f int64, k ledger.MessageKind) (bool, bool) {
		if !done && k == ledger.KindPack && f == 10 {
			done = true
			return true, false
		}
		return false, false
	}}
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "ctl", Pipeline: "counted", MaxAttempts: 3, ItemsPerMessage: 10,
		Source: api.SourceSpec{Items: items(200)}}); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	b, _ := r.store.GetBatch(ctx, "ctl")
	p, _ := r.store.Progress(ctx, "ctl", 1, b.CounterShards)
	t.Logf("no sample, pack 10 refused: calls %d, progress done %d, triggers %d", r.totalCalls(), p.Done, r.trigger.n.Load())
	if p.Done != 200 || r.trigger.n.Load() < 1 {
		t.Errorf("control broken")
	}
}

// A decision given while the chunk of the sample's end sends its sample
// (inside the queue's Send): approval, rejection.
func TestSampleFanOutDecisionDuringPartialSend(t *testing.T) {
	for _, decide := range []string{"approve", "reject"} {
		for _, k := range []int{1, 10} {
			t.Run(fmt.Sprintf("%s_k%d", decide, k), func(t *testing.T) {
				fired := false
				c := fanOutCase{n: 200, chunk: 100, k: k, sample: 25, decide: "already"}
				c.queue = func(r *rig) *faultQueue {
					return &faultQueue{memQueue: r.queue, onSend: func(firsts []int64) {
						if fired || len(firsts) == 0 || firsts[0] != 0 {
							return
						}
						fired = true
						var err error
						if decide == "approve" {
							_, err = r.ctl.Approve(context.Background(), "brk")
						} else {
							_, err = r.ctl.Reject(context.Background(), "brk")
						}
						if err != nil {
							t.Logf("%s during send: %v", decide, err)
						}
					}}
				}
				res := runFanOutCase(t, c)
				want := int64(200)
				if decide == "reject" {
					want = 0 // rejected before the sample ran: all 200 cancelled, none called
				}
				res.outside = nil
				c.decide = "none"
				checkFanOutCase(t, c, res, want)
			})
		}
	}
}

// Duplicate deliveries of the chunk's fan-out message straddling the
// approval: the original (no sent mark) delivered again after the approval
// alongside the held copy (with its mark), several times, in one Handle.
func TestSampleFanOutDuplicateAcrossApproval(t *testing.T) {
	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("k%d", k), func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, sampledPipeline)
			r.sub.ChunkItems = 100
			r.worker.BudgetEvery = -1
			const id = "dupx"
			if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", MaxAttempts: 3, ItemsPerMessage: k,
				Sample: 25, Source: api.SourceSpec{Items: items(200)}}); err != nil {
				t.Fatal(err)
			}
			orig := r.queue.take()
			r.queue.put(orig)
			for range 6 {
				r.step(t, ctx, id, 10*time.Second)
			}
			before := r.totalCalls()
			if _, err := r.ctl.Approve(ctx, id); err != nil {
				t.Fatal(err)
			}
			// the originals come back, twice, with the held copies
			r.queue.put(append(append([]worker.Delivery{}, orig...), orig...))
			r.drain(t, ctx, 2)
			fr, err := r.fin.Finalize(ctx, id, 1)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := r.store.GetBatch(ctx, id)
			p, _ := r.store.Progress(ctx, id, 1, b.CounterShards)
			cs := fr.Report.Census
			var twice []string
			r.calls.Range(func(kk, _ any) bool {
				if n := r.callsOf(kk.(string)); n != 1 {
					twice = append(twice, fmt.Sprintf("%s×%d", kk, n))
				}
				return true
			})
			t.Logf("k%d: before approval %d calls; end %d calls, census S%d F%d C%d, done %d, fanned %d (chunks %d), twice %v", k, before, r.totalCalls(), cs.Succeeded, cs.Failed, cs.Cancelled, p.Done, p.FannedOut, p.FanChunks, twice)
			if r.totalCalls() != 200 || cs.Succeeded+cs.Failed != 200 || p.Done != 200 || p.FannedOut != 200 || len(twice) > 0 {
				t.Errorf("wrong")
			}
		})
	}
}

// Samples at K = 1 around the fan-out's 500-body send.
func TestSampleFanOutFlushBoundary(t *testing.T) {
	for _, s := range []int{499, 500, 501, 700} {
		c := fanOutCase{n: 1200, chunk: 1000, k: 1, sample: s, decide: "approve"}
		t.Run(fmt.Sprintf("s%d", s), func(t *testing.T) {
			res := runFanOutCase(t, c)
			if w := fannedWaitWant(c.n, c.chunk, c.k, c.sample); res.fannedWait != w {
				t.Errorf("fanned while waiting %d, want %d", res.fannedWait, w)
			}
			checkFanOutCase(t, c, res, int64(c.n))
		})
	}
}

// Run 2 of a sampled batch: resume after run 1 (approved), and a correction.
func TestSampleFanOutSecondRun(t *testing.T) {
	for _, how := range []string{"resume", "correct"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			fixed := false
			r := newRig(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
				if fixed {
					return pipeline.Result{Output: []byte(`{}`)}, nil
				}
				return sampledPipeline(ctx, req)
			})
			r.sub.ChunkItems = 100
			r.worker.BudgetEvery = -1
			const id = "second"
			if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", MaxAttempts: 3, ItemsPerMessage: 10,
				Sample: 25, Source: api.SourceSpec{Items: items(200)}}); err != nil {
				t.Fatal(err)
			}
			for range 6 {
				r.step(t, ctx, id, 10*time.Second)
			}
			if _, err := r.ctl.Approve(ctx, id); err != nil {
				t.Fatal(err)
			}
			r.drain(t, ctx, 1)
			if _, err := r.fin.Finalize(ctx, id, 1); err != nil {
				t.Fatal(err)
			}
			fixed = true
			before := r.totalCalls()
			var err error
			if how == "resume" {
				_, err = r.sub.Resume(ctx, id)
			} else {
				var sb strings.Builder
				sb.WriteString("[")
				for i := 7; i < 200; i += 10 {
					if i > 7 {
						sb.WriteString(",")
					}
					fmt.Fprintf(&sb, `{"id":"item-%010d","n":%d}`, i, i)
				}
				sb.WriteString("]")
				_, err = r.sub.Correct(ctx, id, api.CorrectRequest{Source: api.SourceSpec{Items: json.RawMessage(sb.String())}, KeyField: "id"})
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := r.store.GetBatch(ctx, id)
			for range 3 {
				b = r.step(t, ctx, id, 10*time.Second)
			}
			r.drain(t, ctx, 2)
			fr, err := r.fin.Finalize(ctx, id, b.Run)
			if err != nil {
				t.Fatal(err)
			}
			p, _ := r.store.Progress(ctx, id, b.Run, b.CounterShards)
			cs := fr.Report.Census
			t.Logf("%s: run %d, approval %+v; calls run1 %d, run2 %d; census S%d F%d C%d T%d; done %d fanned %d (chunks %d), triggers %d",
				how, b.Run, b.Approval, before, r.totalCalls()-before, cs.Succeeded, cs.Failed, cs.Cancelled, cs.Total, p.Done, p.FannedOut, p.FanChunks, r.trigger.n.Load())
			if r.totalCalls()-before != 20 || cs.Succeeded != 200 || cs.Total != 200 {
				t.Errorf("run 2 wrong")
			}
		})
	}
}
