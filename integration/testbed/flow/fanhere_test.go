package flow

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/submit"
)

// kindsOnQueue counts the messages waiting on q by kind, leaving them
// there.
func kindsOnQueue(t *testing.T, q *memQueue) map[ledger.MessageKind]int {
	t.Helper()
	ds := q.take()
	q.put(ds)
	kinds := map[ledger.MessageKind]int{}
	for _, d := range ds {
		var m ledger.Message
		if err := json.Unmarshal(d.Body, &m); err != nil {
			t.Fatalf("message %s: %v", d.MessageID, err)
		}
		kinds[m.Kind]++
	}
	return kinds
}

// slowQueue is a memQueue whose Send, when its context has a deadline
// within submit.FanOutHereTime (submit's own sends), takes nothing and
// reports every message unsent at that deadline, as the queue adapter
// does for sends SQS has not taken when the caller gives up; other sends
// (the fan-out message, the item function's) it takes.
type slowQueue struct{ *memQueue }

func (q slowQueue) Send(ctx context.Context, bodies [][]byte) error {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= submit.FanOutHereTime {
		ue := &ledger.UnsentError{Err: context.DeadlineExceeded}
		for i := range bodies {
			ue.Unsent = append(ue.Unsent, i)
		}
		return ue
	}
	return q.memQueue.Send(ctx, bodies)
}

// TestSubmitFansOutASmallBatchItself guards submit's own fan-out
// (Submitter.FanOutHere): a batch in one chunk of at most that many
// messages (counted in messages: packs of 10 at the limit and one over)
// has its item (or pack) messages on the queue when Submit returns, no
// fan-out message, its items counted fanned out; a larger one, one in
// several chunks, one with max_concurrency and a sampled one (its
// approval) get the chunk's fan-out message (or its tracks) as before. A
// queue that takes only part of submit's messages, does not take them
// within submit.FanOutHereTime, or refuses one as the sender's fault
// (with others unsent in the same Send too), gets the fan-out message
// carrying what it took, so
// the item function sends only the rest (and records a refused
// message's items failed with the queue's reason). In every case but
// the sampled one (its approval holds the rest: sample_fanout_test.go)
// each item runs once (a refused one never) and the run ends with every
// item counted; the messages the queue took are counted where their
// number is fixed (not on max_concurrency's tracks, which send again as
// they go).
func TestSubmitFansOutASmallBatchItself(t *testing.T) {
	type want struct {
		units, fans int
		fanned      int64 // items counted fanned out when Submit returns
		total       int   // messages the queue took by the run's end; 0: not checked
	}
	// takeFirstOnce's first Send takes only the message of item 0 and
	// reports the others unsent (as SQS for entries it failed); its
	// later sends take everything.
	takeFirstOnce := func(r *rig) ledger.Queue {
		sends := 0
		return &faultQueue{memQueue: r.queue, onSend: func([]int64) { sends++ }, decide: func(first int64, _ ledger.MessageKind) (bool, bool) {
			return false, sends == 1 && first > 0
		}}
	}
	refuse3 := func(r *rig) ledger.Queue {
		return &faultQueue{memQueue: r.queue, decide: func(first int64, kind ledger.MessageKind) (bool, bool) {
			return first == 3 && kind != ledger.KindFanout, false
		}}
	}
	// refuse3Unsent refuses item 3's message every time, and its first
	// Send leaves items 10–19 unsent beside (SQS's failed entries): the
	// refusal's record fails in submit (errRefusedHere), so the fan-out
	// message must carry what was refused and what was unsent as not sent.
	refuse3Unsent := func(r *rig) ledger.Queue {
		sends := 0
		return &faultQueue{memQueue: r.queue, onSend: func([]int64) { sends++ }, decide: func(first int64, kind ledger.MessageKind) (bool, bool) {
			return first == 3 && kind != ledger.KindFanout, sends == 1 && first >= 10
		}}
	}
	for _, tc := range []struct {
		name   string
		n      int
		here   int
		chunk  int                       // the manifest's chunk; 0: the default 5,000 items
		queue  func(r *rig) ledger.Queue // submit's queue; nil: the rig's
		edit   func(*api.SubmitRequest)
		refuse int64 // the item whose message the queue refuses; -1: none
		want   want
	}{
		{name: "one item a message", n: 20, here: 100, refuse: -1, want: want{units: 20, fanned: 20, total: 20}},
		{name: "packs of 10", n: 45, here: 100, refuse: -1, edit: func(r *api.SubmitRequest) { r.ItemsPerMessage = 10 }, want: want{units: 5, fanned: 45, total: 5}},
		{name: "packs of 10 at the limit", n: 200, here: 20, refuse: -1, edit: func(r *api.SubmitRequest) { r.ItemsPerMessage = 10 }, want: want{units: 20, fanned: 200, total: 20}},
		{name: "packs of 10 over the limit", n: 200, here: 19, refuse: -1, edit: func(r *api.SubmitRequest) { r.ItemsPerMessage = 10 }, want: want{fans: 1, total: 21}},
		{name: "over the limit", n: 20, here: 19, refuse: -1, want: want{fans: 1, total: 21}},
		{name: "several chunks", n: 20, here: 100, chunk: 7, refuse: -1, want: want{fans: 3, total: 23}},
		{name: "off", n: 20, here: 0, refuse: -1, want: want{fans: 1, total: 21}},
		{name: "max_concurrency", n: 20, here: 100, refuse: -1, edit: func(r *api.SubmitRequest) { r.MaxConcurrency = 5 }, want: want{fans: 5}}, // its 5 tracks
		{name: "sampled", n: 20, here: 100, refuse: -1, edit: func(r *api.SubmitRequest) { r.Sample = 5 }, want: want{fans: 1}},
		// The Expander sends in rounds of 500: 20 messages are one Send,
		// which takes the first only. The item function sends the other
		// 19, not the first again: 21 messages in all.
		{name: "a queue taking part", n: 20, here: 100, refuse: -1, queue: takeFirstOnce, want: want{units: 1, fans: 1, total: 21}},
		// Submit's sends bounded by FanOutHereTime: none in time, all 20
		// left to the fan-out message.
		{name: "a queue past FanOutHereTime", n: 20, here: 100, refuse: -1, queue: func(r *rig) ledger.Queue { return slowQueue{r.queue} },
			want: want{fans: 1, total: 21}},
		// Item 3's message is refused every time it is sent: submit leaves
		// it to the item function, which sends it alone (refused again) and
		// records item 3 failed: 19 + 1 messages taken.
		{name: "a refused message", n: 20, here: 100, refuse: 3, queue: refuse3, want: want{units: 19, fans: 1, total: 20}},
		// Item 3 refused and items 10–19 unsent in submit's one Send: the
		// fan-out message sends 3 (refused again) and 10–19, not 0–9 again:
		// 9 + 1 + 10 messages taken, items 10–19 run once each.
		{name: "a refused message and others unsent", n: 20, here: 100, refuse: 3, queue: refuse3Unsent, want: want{units: 9, fans: 1, total: 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, failOn3)
			r.sub.ChunkItems, r.sub.FanOutHere = tc.chunk, tc.here
			if tc.queue != nil {
				r.sub.Queue = tc.queue(r)
				if tc.refuse >= 0 {
					r.worker.Queue = r.sub.Queue // the queue refuses the message from the item function too
				}
			}
			req := api.SubmitRequest{BatchID: "small", Pipeline: "counted", Source: api.SourceSpec{Items: items(tc.n)}}
			if tc.edit != nil {
				tc.edit(&req)
			}
			if _, err := r.sub.Submit(ctx, req); err != nil {
				t.Fatal(err)
			}
			kinds := kindsOnQueue(t, r.queue)
			units := kinds[ledger.KindItem] + kinds[ledger.KindPack]
			b, err := r.store.GetBatch(ctx, "small")
			if err != nil {
				t.Fatal(err)
			}
			p, err := r.store.Progress(ctx, "small", 1, b.CounterShards)
			if err != nil {
				t.Fatal(err)
			}
			if units != tc.want.units || kinds[ledger.KindFanout] != tc.want.fans || p.FannedOut != tc.want.fanned || !b.FannedOut {
				t.Fatalf("after Submit: %d unit messages, %d fan-out, %d items counted fanned out, batch fanned out %v; want %d, %d, %d, true",
					units, kinds[ledger.KindFanout], p.FannedOut, b.FannedOut, tc.want.units, tc.want.fans, tc.want.fanned)
			}
			if b.Approval.Holds() {
				return // the sample's path is the fan-out message's (sample_fanout_test.go)
			}
			r.drain(t, ctx, 1)
			for i := range int64(tc.n) {
				want := int64(1)
				if i == tc.refuse {
					want = 0
				}
				if c := r.callsOf(api.PositionalKey(i)); c != want {
					t.Errorf("item %d: %d calls, want %d", i, c, want)
				}
			}
			if p, err = r.store.Progress(ctx, "small", 1, b.CounterShards); err != nil || p.FannedOut != int64(tc.n) || p.Done != int64(tc.n) {
				t.Errorf("at the end: %d fanned out, %d done (%v), want %d each", p.FannedOut, p.Done, err, tc.n)
			}
			if tc.want.total > 0 && r.queue.n != tc.want.total {
				t.Errorf("the queue took %d messages, want %d", r.queue.n, tc.want.total)
			}
			if tc.refuse >= 0 {
				key := api.PositionalKey(tc.refuse)
				its, err := r.store.ReadItems(ctx, "small", b.ListShards, []string{key})
				if err != nil || len(its) != 1 || its[0].Outcome != api.OutcomeFailed || !strings.Contains(its[0].Error, "refused") {
					t.Errorf("item %s: %+v (%v), want it failed with the queue's refusal", key, its, err)
				}
			}
			if r.trigger.n.Load() < 1 {
				t.Error("the run's last item did not trigger finalize")
			}
		})
	}
	if submit.DefaultFanOutHere != 100 {
		t.Errorf("DefaultFanOutHere %d: the docs give 100", submit.DefaultFanOutHere)
	}
}
