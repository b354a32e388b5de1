package pacer

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestDownstreamKey guards the key a batch with no rate is paced on: a
// webhook's host (and port), lower-cased; a Lambda function; else the
// pipeline's name.
func TestDownstreamKey(t *testing.T) {
	for _, c := range []struct {
		pipeline, options, want string
	}{
		{"webhook", `{"url":"https://API.example.com/v1/items?x=1"}`, "api.example.com"},
		{"webhook", `{"url":"http://127.0.0.1:8080/hook"}`, "127.0.0.1:8080"},
		{"lambda", `{"function":"arn:aws:lambda:us-east-1:123456789012:function:thumbs"}`, "lambda:arn:aws:lambda:us-east-1:123456789012:function:thumbs"},
		{"counted", ``, "pipeline:counted"},
		{"webhook", `{"url":"not a url"}`, "pipeline:webhook"},
	} {
		b := ledger.Batch{Batch: api.Batch{Plan: api.Plan{Pipeline: c.pipeline, Options: json.RawMessage(c.options)}}}
		if got := DownstreamKey(b); got != c.want {
			t.Errorf("DownstreamKey(%s %s) = %q, want %q", c.pipeline, c.options, got, c.want)
		}
	}
}

// TestDownstreamThrottle guards that only the downstream's throttling
// paces its key: a receiver's 429 with its Retry-After, Lambda's 429 —
// not a secret store's or S3's, nor any other error.
func TestDownstreamThrottle(t *testing.T) {
	base := errors.New("refused")
	if d, ok := DownstreamThrottle(pipeline.Throttled("http", "429", 2*time.Second, base)); !ok || d != 2*time.Second {
		t.Errorf("a receiver's 429: %v, %v", d, ok)
	}
	if _, ok := DownstreamThrottle(pipeline.Throttled("lambda", "TooManyRequestsException", 0, base)); !ok {
		t.Error("Lambda's throttling is not the downstream's")
	}
	for _, err := range []error{pipeline.Throttled("secretsmanager", "ThrottlingException", 0, base), pipeline.Throttled("s3", "SlowDown", 0, base), base, nil} {
		if _, ok := DownstreamThrottle(err); ok {
			t.Errorf("%v taken for the downstream's throttling", err)
		}
	}
}

// adaptStub is a key's adaptive row behind AdaptStore, CutAdapt
// comparing Cut and Hold as the store does.
type adaptStub struct {
	mu    sync.Mutex
	row   pace.Adapt
	reads int
	cuts  int
	// latency is each read's time (0: none).
	latency time.Duration
}

func (s *adaptStub) ReadAdapt(context.Context, string) (pace.Adapt, error) {
	time.Sleep(s.latency)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	return s.row, nil
}

func (s *adaptStub) CutAdapt(_ context.Context, c pace.AdaptCut) (pace.Adapt, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.row.Cut.Equal(c.Was.Cut) || !s.row.Hold.Equal(c.Was.Hold) {
		return s.row, false, nil
	}
	s.cuts++
	c.Row.Booked = s.row.Booked
	s.row = c.Row
	return s.row, true, nil
}

func (s *adaptStub) LeaseAdapt(_ context.Context, l pace.AdaptLease) (pace.AdaptGrant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pos := max(s.row.Booked, l.At)
	s.row.Booked = pos + float64(l.N)
	return pace.AdaptGrant{Granted: true, Pos: pos, Row: s.row}, nil
}

// TestThrottleCutsOncePerSecond guards the process's side of a cut: the
// row read at most once per AdaptReadEvery, a cut from the process's own
// calls in the last second, one cut however many of its calls were
// throttled in that second, and a cut made by another process read
// again and not cut over.
func TestThrottleCutsOncePerSecond(t *testing.T) {
	var as Adapts
	st := &adaptStub{}
	now := time.Unix(1_800_000_000, 0)
	for i := range 50 {
		as.Called("k", now.Add(time.Duration(i)*10*time.Millisecond), false, false)
	}
	ctx := context.Background()
	throttled := pipeline.Throttled("http", "429", 0, errors.New("429"))
	for i := range 20 {
		if _, _, err := as.Observe(ctx, st, "k", now.Add(500*time.Millisecond), now.Add(500*time.Millisecond+time.Duration(i)*time.Millisecond), false, throttled); err != nil {
			t.Fatal(err)
		}
	}
	if st.cuts != 1 || math.Abs(st.row.Limit-pace.AdaptBackoff*51) > 1e-9 || st.reads != 1 {
		t.Fatalf("20 throttled calls in one second: %d cuts, limit %v, %d reads; want 1 cut at 0.7 × 51 own calls (50 and the throttled one), 1 read", st.cuts, st.row.Limit, st.reads)
	}
	// Another process cut meanwhile: this one's copy is stale, its write
	// refused, the row read back and not cut again within the second.
	other := st.row
	other.Cut, other.Limit = now.Add(1500*time.Millisecond), 20
	st.row = other
	if _, _, err := as.Throttle(ctx, st, "k", now.Add(2*time.Second), 0); err != nil {
		t.Fatal(err)
	}
	if st.cuts != 1 || st.row.Limit != 20 {
		t.Errorf("a throttle 0.5 s after another process's cut: %d cuts, limit %v; want it left at 20", st.cuts, st.row.Limit)
	}
	// A second on, 20 of the process's 50 paced calls in the last second
	// were throttled: the next cut takes the limit to the 60 % the
	// downstream took, not to 70 %.
	at := now.Add(3 * time.Second)
	for i := range 49 { // 19 throttled; the 50th, throttled, cuts below
		as.Called("k", at.Add(time.Duration(i-50)*10*time.Millisecond), true, i < 19)
	}
	was := st.row.LimitAt(at)
	if _, _, err := as.Observe(ctx, st, "k", at.Add(-10*time.Millisecond), at, true, throttled); err != nil {
		t.Fatal(err)
	}
	if st.cuts != 2 || math.Abs(st.row.Limit-0.6*was) > 1e-9 {
		t.Errorf("a throttle with 20 of 50 paced calls refused: %d cuts, limit %v; want 0.6 × %v (the share taken)", st.cuts, st.row.Limit, was)
	}
}

// TestAdaptReadsOnceForManyUnits guards the process's copy of a row: many
// units finding it missing at once make one read between them, and a key
// not paced is read again only after AdaptIdleReadEvery, a paced one after
// AdaptReadEvery.
func TestAdaptReadsOnceForManyUnits(t *testing.T) {
	var as Adapts
	st := &adaptStub{latency: 5 * time.Millisecond} // the units meet at the read
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if _, err := as.Adapt(ctx, st, "k", now); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if st.reads != 1 {
		t.Fatalf("10 units at once: %d reads, want 1", st.reads)
	}
	if _, _ = as.Adapt(ctx, st, "k", now.Add(AdaptIdleReadEvery-time.Millisecond)); st.reads != 1 {
		t.Errorf("a key not paced, read again within %v: %d reads, want 1", AdaptIdleReadEvery, st.reads)
	}
	if _, _ = as.Adapt(ctx, st, "k", now.Add(AdaptIdleReadEvery)); st.reads != 2 {
		t.Errorf("a key not paced, %v later: %d reads, want 2", AdaptIdleReadEvery, st.reads)
	}
	st.row = pace.Adapt{Limit: 10, Step: 1, Cut: now.Add(AdaptIdleReadEvery)}
	var other Adapts // another process: no copy yet
	at := now.Add(AdaptIdleReadEvery)
	if _, _ = other.Adapt(ctx, st, "k", at); st.reads != 3 {
		t.Fatalf("another process: %d reads, want 3", st.reads)
	}
	if _, _ = other.Adapt(ctx, st, "k", at.Add(AdaptReadEvery-time.Millisecond)); st.reads != 3 {
		t.Errorf("a paced key read again within %v: %d reads, want 3", AdaptReadEvery, st.reads)
	}
	if _, _ = other.Adapt(ctx, st, "k", at.Add(AdaptReadEvery)); st.reads != 4 {
		t.Errorf("a paced key %v later: %d reads, want 4", AdaptReadEvery, st.reads)
	}
}

// TestCalledCountsCallsEndedOutOfOrder guards the process's own count of
// a key's calls (the first limit's base): calls are counted as they end,
// so a slow call started earlier is recorded after quicker ones started
// later, and every one of them within the window counts.
func TestCalledCountsCallsEndedOutOfOrder(t *testing.T) {
	var as Adapts
	t0 := time.Unix(1_800_000_000, 0)
	for _, ms := range []int{500, 600, 700, 100, 50} { // the slow ones, started first, end last
		as.Called("k", t0.Add(time.Duration(ms)*time.Millisecond), false, false)
	}
	s := as.of("k")
	if n := s.own(t0.Add(800 * time.Millisecond)).calls; n != 5 {
		t.Errorf("5 calls in the last second, recorded out of order: own %d, want 5", n)
	}
	if n := s.own(t0.Add(1550 * time.Millisecond)).calls; n != 2 {
		t.Errorf("at +1.55 s: own %d, want 2 (those started at +0.6 s and +0.7 s; the rest are a window old)", n)
	}
}

// TestUnpacedRefusalsCutByBackoff guards that the share a cut goes by
// counts only calls the key's row paced: a process's refused calls made
// unpaced (before it read the key's cut) cut by pace.AdaptBackoff, not
// by the share they got through.
func TestUnpacedRefusalsCutByBackoff(t *testing.T) {
	var as Adapts
	now := time.Unix(1_800_000_000, 0)
	st := &adaptStub{row: pace.Adapt{Limit: 40, Step: 4, Cut: now.Add(-5 * time.Second)}}
	for i := range 49 {
		as.Called("k", now.Add(time.Duration(i-50)*10*time.Millisecond), false, i < 29)
	}
	was := st.row.LimitAt(now)
	if _, _, err := as.Observe(context.Background(), st, "k", now.Add(-10*time.Millisecond), now, false, pipeline.Throttled("http", "429", 0, errors.New("429"))); err != nil {
		t.Fatal(err)
	}
	if math.Abs(st.row.Limit-pace.AdaptBackoff*was) > 1e-9 {
		t.Errorf("30 of 50 unpaced calls refused: limit %v, want %v × %v", st.row.Limit, pace.AdaptBackoff, was)
	}
}

// TestRetryAfterSlowStartsOnlyAClosedDownstream guards the process's
// side of a cut with a Retry-After: after one of its paced calls was
// taken within pace.AdaptTookWithin, the key is cut and held, out of
// slow start (a quota); with none taken in that time (every call
// refused: a downstream closed for a while), it is in slow start again. An unpaced call taken
// is no evidence: it ran above the limit.
func TestRetryAfterSlowStartsOnlyAClosedDownstream(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	ra := pipeline.Throttled("http", "429", time.Second, errors.New("429"))
	for _, c := range []struct {
		name        string
		paced, took bool
		slow        bool
	}{
		{"a paced call taken since the cut", true, true, false},
		{"a paced call refused since the cut", true, false, true},
		{"an unpaced call taken since the cut", false, true, true},
	} {
		var as Adapts
		st := &adaptStub{row: pace.Adapt{Limit: 40, Step: 4, Cut: now.Add(-5 * time.Second)}}
		as.Called("k", now.Add(-pace.AdaptTookWithin), true, false) // taken too long ago: no evidence of now
		as.Called("k", now.Add(-300*time.Millisecond), c.paced, !c.took)
		if _, _, err := as.Observe(context.Background(), st, "k", now.Add(-10*time.Millisecond), now, true, ra); err != nil {
			t.Fatal(err)
		}
		if st.row.Slow != c.slow || !st.row.Hold.Equal(now.Add(time.Second)) || !st.row.Cut.Equal(now) {
			t.Errorf("%s: row %+v; want cut at now, held 1 s, slow start %v", c.name, st.row, c.slow)
		}
	}
}
