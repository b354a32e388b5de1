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
}

func (s *adaptStub) ReadAdapt(context.Context, string) (pace.Adapt, error) {
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
		as.Called("k", now.Add(time.Duration(i)*10*time.Millisecond))
	}
	ctx := context.Background()
	throttled := pipeline.Throttled("http", "429", 0, errors.New("429"))
	for i := range 20 {
		if _, _, err := as.Observe(ctx, st, "k", now.Add(500*time.Millisecond), now.Add(500*time.Millisecond+time.Duration(i)*time.Millisecond), throttled); err != nil {
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
}
