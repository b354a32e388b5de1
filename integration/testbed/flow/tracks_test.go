package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// TestTracksScheduleMaxConcurrency guards "max_concurrency is a schedule,
// not a poll" (shared/pace, docs/adr/0028) at K = 1 and 10 and limits 1
// and 10: 1,000 items of which every 17th fails once (a transient error)
// and every 23rd is throttled once (429, Retry-After 2 s); each round
// every queued message is delivered twice at once (duplicates), and the
// clock then moves past every wait. No more than the limit run at once,
// every item succeeds with one extra call for each failure or throttle,
// the census is exact, the live view counts every chunk fanned out, and
// the queue carries a bounded number of
// messages: the tracks, one send per slice claimed, and one per wait of
// a track — never one per waiting unit per second.
func TestTracksScheduleMaxConcurrency(t *testing.T) {
	const n = 1000
	for _, k := range packKs {
		for _, limit := range []int{1, 10} {
			t.Run(fmt.Sprintf("K=%d/max_concurrency=%d", k, limit), func(t *testing.T) {
				ctx := context.Background()
				var calls atOnce
				var r *rig
				r = newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
					defer calls.enter()()
					time.Sleep(50 * time.Microsecond)
					i, _ := strconv.Atoi(strings.TrimPrefix(req.Key, "item-"))
					switch first := r.callsOf(req.Key) == 1; {
					case first && i%17 == 0:
						return pipeline.Result{}, errors.New("downstream hiccup")
					case first && i%23 == 0:
						return pipeline.Result{}, pipeline.Throttled("http", "429", 2*time.Second, errors.New("429 Too Many Requests"))
					}
					return pipeline.Result{Output: json.RawMessage(`{}`)}, nil
				})
				r.sub.ChunkItems = 250
				// The throttle paces the downstream (docs/adr/0036); the
				// clock here moves by rounds, so a pace's sleep takes no
				// time (a unit runs at the start it leased, or waits on
				// the queue for a later round).
				r.worker.Sleep = func(context.Context, time.Duration) {}
				b := submitK(t, r, "paced", k, n, func(req *api.SubmitRequest) { req.MaxConcurrency = limit })
				sent := twiceEachRound(ctx, t, r)
				if m := calls.most.Load(); m > int64(limit) || m < 1 {
					t.Fatalf("%d pipelines ran at once, want 1–%d", m, limit)
				}
				extra := 0
				for i := range n {
					want := int64(1)
					if i%17 == 0 || i%23 == 0 {
						want, extra = 2, extra+1
					}
					if c := r.callsOf(api.PositionalKey(int64(i))); c != want {
						t.Errorf("%s: %d calls, want %d", api.PositionalKey(int64(i)), c, want)
					}
				}
				if p, err := r.store.Progress(ctx, "paced", 1, max(1, b.CounterShards)); err != nil || p.FannedOut != n || p.FanChunks != 4 {
					t.Errorf("fanned out: %d items in %d chunks (%v), want %d in 4", p.FannedOut, p.FanChunks, err, n)
				}
				r.finalizeFour(t, ctx, "paced", func(c api.Census) {
					if c.Total != n || c.Succeeded != n {
						t.Errorf("census %+v", c)
					}
				})
				// Tracks + one send per slice claimed (none for a claim
				// past the last) + one send per wait, each wait at least
				// one failed or throttled unit.
				slices := n / int(pace.SliceSize(k, n, limit))
				bound := 2*limit + slices + extra
				t.Logf("%d items, %d messages sent (%.3f per item; bound %d), %d at once at most", n, sent, float64(sent)/n, bound, calls.most.Load())
				if sent > bound {
					t.Errorf("%d messages sent, want at most %d", sent, bound)
				}
			})
		}
	}
}

// TestTrackGoesOnPastItsInvocation guards a track's hand-over between
// invocations: each round's invocation has 1.2 s (a 10 ms deadline
// margin, and the worker keeps 1 s for the next unit), far less than a
// slice of 100 items of 5 ms takes once its track stops ≈ 1 s before the
// deadline, so each track stops mid-slice and sends itself on from where
// it stopped, many times. Every invocation returns before its deadline,
// every item runs once and succeeds, no more than the limit at once.
func TestTrackGoesOnPastItsInvocation(t *testing.T) {
	const n, limit = 800, 2
	var calls atOnce
	r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) {
		defer calls.enter()()
		time.Sleep(5 * time.Millisecond)
		return pipeline.Result{Output: json.RawMessage(`{}`)}, nil
	})
	r.sub.ChunkItems = 100
	r.worker.Margin = 10 * time.Millisecond
	submitK(t, r, "handover", 1, n, func(req *api.SubmitRequest) { req.MaxConcurrency = limit })
	rounds := 0
	for ; rounds < 200; rounds++ {
		ds := r.queue.take()
		if len(ds) == 0 {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
		failed := r.worker.Handle(ctx, ds)
		if ctx.Err() != nil {
			t.Errorf("round %d: the invocation ran past its deadline", rounds)
		}
		cancel()
		redeliver(r, ds, failed)
	}
	t.Logf("%d rounds, %d at once at most", rounds, calls.most.Load())
	if slices := n / int(pace.SliceSize(1, n, limit)); rounds <= slices {
		t.Fatalf("%d rounds for %d slices: no track stopped mid-slice", rounds, slices)
	}
	if m := calls.most.Load(); m > limit {
		t.Fatalf("%d pipelines ran at once, want at most %d", m, limit)
	}
	for i := range n {
		if c := r.callsOf(api.PositionalKey(int64(i))); c != 1 {
			t.Errorf("%s: %d calls, want 1", api.PositionalKey(int64(i)), c)
		}
	}
	r.finalizeFour(t, context.Background(), "handover", func(c api.Census) {
		if c.Total != n || c.Succeeded != n {
			t.Errorf("census %+v", c)
		}
	})
}

// everyThirdRequeue is the rig's queue whose every third Requeue (a track
// sent on) fails, so that the delivery comes back from the message it
// was given, before the claims it made.
type everyThirdRequeue struct {
	*memQueue
	n atomic.Int64
}

func (q *everyThirdRequeue) Requeue(ctx context.Context, body []byte, d time.Duration) error {
	if q.n.Add(1)%3 == 0 {
		return errors.New("sqs: unavailable")
	}
	return q.memQueue.Requeue(ctx, body, d)
}

// TestTracksOnSeveralCounters guards the claim counters of a run of more
// than pace.TracksPerCounter tracks (docs/adr/0028): 3,000 items at
// max_concurrency 150 (150 tracks on 3 counters, 600 slices at K = 1 and
// 300 at K = 10), each round's messages delivered twice at once, and every
// third send of a track failing, so that its delivery comes back from the
// message before its claims — also those that drained a counter and
// moved on to the next. Every item is called exactly once and succeeds,
// no more than the limit run at once, every counter dealt slices, and
// the run's one-counter row (the key a track of a release before counters
// were several claims from) was not written.
func TestTracksOnSeveralCounters(t *testing.T) {
	const n, limit = 3000, 150
	for _, k := range packKs {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			ctx := context.Background()
			var calls atOnce
			r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
				defer calls.enter()()
				return pipeline.Result{Output: json.RawMessage(`{}`)}, nil
			})
			r.sub.ChunkItems = 250
			q := &everyThirdRequeue{memQueue: r.queue}
			r.worker.Queue = q
			submitK(t, r, "wide", k, n, func(req *api.SubmitRequest) { req.MaxConcurrency = limit })
			twiceEachRound(ctx, t, r)
			if q.n.Load() < 3 {
				t.Fatalf("%d sends of tracks: no send failed", q.n.Load())
			}
			if m := calls.most.Load(); m > limit || m < 1 {
				t.Fatalf("%d pipelines ran at once, want 1–%d", m, limit)
			}
			for i := range n {
				if c := r.callsOf(api.PositionalKey(int64(i))); c != 1 {
					t.Errorf("%s: %d calls, want 1", api.PositionalKey(int64(i)), c)
				}
			}
			r.finalizeFour(t, ctx, "wide", func(c api.Census) {
				if c.Total != n || c.Succeeded != n {
					t.Errorf("census %+v", c)
				}
			})
			size := pace.SliceSize(k, n, limit)
			tracks := pace.Tracks(limit, (n+size-1)/size)
			counters := pace.Counters(tracks)
			if counters < 2 {
				t.Fatalf("%d tracks on %d counter: the test needs several", tracks, counters)
			}
			// Counter c deals slice numbers tracks + c, tracks + c +
			// counters, …: its stripe, each once, and answers past it at
			// most once per track that claimed from it drained.
			sliceCount := int((n + size - 1) / size)
			for c := range counters {
				got, err := r.store.SliceCounter(ctx, ledger.SliceCounterRead{BatchID: "wide", Run: 1, Counters: counters, Counter: c})
				stripe := int64((sliceCount - tracks - c + counters - 1) / counters)
				if err != nil || got.Claims < stripe || got.Claims > stripe+int64(tracks) {
					t.Errorf("counter %d of %d: %d claims answered (%v); want its %d slices and at most one past them per track", c, counters, got.Claims, err, stripe)
				}
			}
			if got, err := r.store.SliceCounter(ctx, ledger.SliceCounterRead{BatchID: "wide", Run: 1, Counters: 1}); err != nil || got.Claims != 0 {
				t.Errorf("the one-counter row: %+v, %v; want untouched", got, err)
			}
		})
	}
}

// atOnce counts the pipeline calls running at once and the most seen.
type atOnce struct{ running, most atomic.Int64 }

// enter counts a call begun; the function it returns counts it ended.
func (a *atOnce) enter() (leave func()) {
	c := a.running.Add(1)
	for m := a.most.Load(); c > m && !a.most.CompareAndSwap(m, c); m = a.most.Load() {
	}
	return func() { a.running.Add(-1) }
}

// redeliver puts the deliveries of ds that failed back on r's queue,
// each received once more, and says how many.
func redeliver(r *rig, ds []worker.Delivery, failed []string) int {
	var again []worker.Delivery
	for _, d := range ds {
		if slices.Contains(failed, d.MessageID) {
			d.ReceiveCount++
			again = append(again, d)
		}
	}
	r.queue.put(again)
	return len(again)
}

// twiceEachRound runs r's queue in rounds until it is empty (at most
// 500): each round hands every queued message to the worker twice at
// once (duplicates), puts back those that failed, and moves the clock a
// minute, past every wait. It answers the messages sent (taken, less
// those delivered again).
func twiceEachRound(ctx context.Context, t *testing.T, r *rig) int {
	t.Helper()
	sent := 0
	for round := 0; ; round++ {
		if round > 500 {
			t.Fatal("the tracks did not end in 500 rounds")
		}
		ds := r.queue.take()
		if len(ds) == 0 {
			return sent
		}
		sent += len(ds)
		sent -= redeliver(r, ds, r.worker.Handle(ctx, append(append([]worker.Delivery{}, ds...), ds...)))
		r.clock.T = r.clock.T.Add(time.Minute)
	}
}

// laneCounting counts a store's counter-lane writes (Store.CountLane).
type laneCounting struct {
	worker.Store
	n atomic.Int64
}

func (s *laneCounting) CountLane(ctx context.Context, c ledger.LaneCount) (ledger.LaneCounted, error) {
	s.n.Add(1)
	return s.Store.CountLane(ctx, c)
}

// TestTrackCountsEveryTenSeconds guards how often a track counts what it
// ended (worker.TrackProgressEvery, docs/adr/0027 "Tracks"): 80 items at
// max_concurrency 1, one item a message, each call 3 s of the test's
// clock, on one track of 4 slices of 20 items (one delivery each). Every
// item is counted once, and the track writes its counter lane while a
// delivery runs (more writes than deliveries) but at most once per 10 s
// of calls plus once per delivery: 28 writes, where counting every 2 s
// would write once per item (80).
func TestTrackCountsEveryTenSeconds(t *testing.T) {
	ctx := context.Background()
	const n = 80
	var r *rig
	r = newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		r.clock.T = r.clock.T.Add(3 * time.Second)
		return pipeline.Result{Output: json.RawMessage(`{}`)}, nil
	})
	lanes := &laneCounting{Store: r.worker.Store}
	r.worker.Store = lanes
	b := submitK(t, r, "slow-track", 1, n, func(req *api.SubmitRequest) { req.MaxConcurrency = 1 })
	r.worker.Handle(ctx, r.queue.take()) // the fan-out: the track's first send
	lanes.n.Store(0)
	deliveries := 0
	for range 100 {
		ds := r.queue.take()
		if len(ds) == 0 {
			break
		}
		deliveries += len(ds)
		if failed := r.worker.Handle(ctx, ds); len(failed) > 0 {
			t.Fatalf("%d deliveries failed", len(failed))
		}
	}
	p, err := r.store.Progress(ctx, b.ID, 1, max(1, b.CounterShards))
	if err != nil {
		t.Fatal(err)
	}
	if p.Done != n {
		t.Fatalf("the counters show %d items ended, want %d", p.Done, n)
	}
	for i := range n {
		if c := r.callsOf(api.PositionalKey(int64(i))); c != 1 {
			t.Errorf("%s: %d calls, want 1", api.PositionalKey(int64(i)), c)
		}
	}
	most := int64(n*3/10 + deliveries)
	t.Logf("%d items of 3 s on one track in %d deliveries: %d counter lane writes (at most %d)", n, deliveries, lanes.n.Load(), most)
	if w := lanes.n.Load(); w > most || w <= int64(deliveries) {
		t.Errorf("%d counter lane writes in %d deliveries of %d items of 3 s: want more than one per delivery (counted while it runs) and at most %d (once per 10 s and per delivery)", w, deliveries, n, most)
	}
}

// TestTrackWithoutItsSizeKeepsItsRunsSlices guards the change of slice
// size from 100 items to 100 units (pace.SliceSize): the submit sends
// the size with each track (ledger.Track.Size) and every track numbers
// the run's slices by it; a track message without one, as a stack
// before the change sent, numbers them by the old rule
// (pace.SliceSizeItems), as every other track of its run does. 8,000
// items at K = 10 on 2 tracks, 1,000-item chunks: 100-unit slices are
// 1,000 items (8 slices, 6 claimed), the old rule's 100 items (80, 78
// claimed); with the sizes stripped from the queued tracks the claim
// counter deals the old rule's. Either way every item runs once.
func TestTrackWithoutItsSizeKeepsItsRunsSlices(t *testing.T) {
	const n, k, limit = 8000, 10, 2
	for _, strip := range []bool{false, true} {
		t.Run(fmt.Sprintf("stripped=%v", strip), func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) {
				return pipeline.Result{Output: json.RawMessage(`{}`)}, nil
			})
			r.sub.ChunkItems = 1000
			b := submitK(t, r, "sized", k, n, func(req *api.SubmitRequest) { req.MaxConcurrency = limit })
			size, old := pace.SliceSize(k, n, limit), pace.SliceSizeItems(k, n, limit)
			if size != 1000 || old != 100 {
				t.Fatalf("slices of %d items, %d by the old rule; the test needs 1,000 and 100", size, old)
			}
			ds := r.queue.take()
			if len(ds) != limit {
				t.Fatalf("%d messages queued after the submit, want %d tracks", len(ds), limit)
			}
			for i := range ds {
				var m map[string]any
				if err := json.Unmarshal(ds[i].Body, &m); err != nil {
					t.Fatal(err)
				}
				tr, _ := m["track"].(map[string]any)
				if got, _ := tr["sz"].(float64); int64(got) != size {
					t.Fatalf("track %d sent with size %v, want %d", i, tr["sz"], size)
				}
				if strip {
					delete(tr, "sz")
					body, err := json.Marshal(m)
					if err != nil {
						t.Fatal(err)
					}
					ds[i].Body = body
				}
			}
			r.queue.put(ds)
			twiceEachRound(ctx, t, r)
			for i := range n {
				if c := r.callsOf(api.PositionalKey(int64(i))); c != 1 {
					t.Errorf("%s: %d calls, want 1", api.PositionalKey(int64(i)), c)
				}
			}
			per := size
			if strip {
				per = old
			}
			slices := int64(n) / per
			got, err := r.store.SliceCounter(ctx, ledger.SliceCounterRead{BatchID: "sized", Run: 1, Counters: 1})
			if want := slices - limit; err != nil || got.Claims < want || got.Claims > want+limit {
				t.Errorf("claims answered %d (%v); want the %d slices of %d items past the tracks' own, and at most one past them per track", got.Claims, err, want, per)
			}
			r.finalizeFour(t, ctx, b.ID, func(c api.Census) {
				if c.Total != n || c.Succeeded != n {
					t.Errorf("census %+v", c)
				}
			})
		})
	}
}
