package pacer

import (
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// AdaptStore is the ledger port an adaptive pace reads, cuts and leases
// on (pace.Rows.ReadAdapt, CutAdapt, LeaseAdapt).
type AdaptStore interface {
	AdaptRows
	LeaseAdapt(ctx context.Context, l pace.AdaptLease) (pace.AdaptGrant, error)
}

// AdaptRows is the part of AdaptStore that reads and rewrites a key's
// adaptive row (Adapt, Throttle, Resume).
type AdaptRows interface {
	ReadAdapt(ctx context.Context, key string) (pace.Adapt, error)
	CutAdapt(ctx context.Context, c pace.AdaptCut) (pace.Adapt, bool, error)
}

// AdaptReadEvery is how long a process keeps what it read of a key's
// adaptive row while the key is paced: 1 s, so that a cut made by
// another process is felt within a second, at one read a second per
// process and key.
const AdaptReadEvery = time.Second

// AdaptIdleReadEvery is how long a process keeps what it read of a key
// that is not paced (no row, or its limit past the ceiling or forgotten):
// 10 s. A key is paced only after a throttled call, and a process whose
// own call is throttled writes the row at once (Throttle); one whose
// calls pass learns of another's first cut within 10 s, at a read per 10
// s per process and key — on the emulator, a read a second cost 0.10 read
// units per item at one item a message, as much as the rest of an item's
// reads.
const AdaptIdleReadEvery = 10 * time.Second

// adaptTries bounds the writes of one throttled call's cut when other
// processes cut the row under it.
const adaptTries = 3

// adaptSeen is a key's adaptive row as the process last read or wrote it,
// and its own calls of the key in the last pace.AdaptWindow.
type adaptSeen struct {
	// reading is held while the row is read, so that the process's
	// units that find its copy stale together make one read, not one
	// each (ten on the emulator's first message batch).
	reading sync.Mutex
	mu      sync.Mutex
	row     pace.Adapt
	read    time.Time // zero: never read
	calls   []ownCall
	// accepted is when the process's last paced call of the key that
	// the downstream took started (zero: none): a throttled call's cut
	// restarts slow start on a Retry-After only when none was taken in
	// the last pace.AdaptTookWithin (pace.Adapt.Throttled).
	accepted time.Time
	// first is the process's first call of the key (Pacer.First).
	first firstCall
}

// ownCall is one of the process's own calls of a key: when it started,
// whether it started at a place leased on the key's adaptive row
// (paced), and whether the downstream throttled it.
type ownCall struct {
	at               time.Time
	paced, throttled bool
}

// Adapts is what one item engine (a worker: one a process) knows of its
// downstream keys' adaptive rows: each key's row as last read or written,
// and its own calls of the key in the last pace.AdaptWindow. The zero
// Adapts is ready to use; it holds one entry per key called.
type Adapts struct {
	keys sync.Map // downstream key → *adaptSeen
}

func (as *Adapts) of(key string) *adaptSeen {
	v, _ := as.keys.LoadOrStore(key, &adaptSeen{})
	return v.(*adaptSeen)
}

// Adapt is key's adaptive row as of at most AdaptReadEvery ago
// (AdaptIdleReadEvery while the copy says the key is not paced): the
// process's copy, or one strongly consistent read (pace.Rows.ReadAdapt)
// when it is older, from the future (a test's clock) or missing.
func (as *Adapts) Adapt(ctx context.Context, st AdaptRows, key string, now time.Time) (pace.Adapt, error) {
	s := as.of(key)
	fresh := func() (pace.Adapt, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		every := AdaptReadEvery
		if !s.row.Paced(now) {
			every = AdaptIdleReadEvery
		}
		return s.row, !s.read.IsZero() && !s.read.After(now) && now.Sub(s.read) < every
	}
	if a, ok := fresh(); ok {
		return a, nil
	}
	s.reading.Lock()
	defer s.reading.Unlock()
	if a, ok := fresh(); ok {
		return a, nil // another unit read it meanwhile
	}
	a, err := st.ReadAdapt(ctx, key)
	if err != nil {
		// The units waiting on this read use the copy as it is for the
		// copy's time, not one failing read after another.
		s.mu.Lock()
		s.read = now
		s.mu.Unlock()
		return pace.Adapt{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.row, s.read = a, now
	return a, nil
}

// Seen is key's adaptive row as the process last read or wrote it (the
// zero Adapt: never), without a read.
func (as *Adapts) Seen(key string) pace.Adapt {
	s := as.of(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.row
}

// Called counts a call of key started at at, paced (at a place leased
// on the key's adaptive row) or not, throttled or not, among the
// process's own calls (pace.AdaptWindow), from which a key's first
// throttled call starts its limit and a cut takes its depth
// (pace.Backoff, from the paced calls only).
func (as *Adapts) Called(key string, at time.Time, paced, throttled bool) {
	s := as.of(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	// Calls are counted as they end, out of the order they started in:
	// only those a window older than this one go.
	s.calls = slices.DeleteFunc(s.calls, func(c ownCall) bool { return at.Sub(c.at) >= pace.AdaptWindow })
	s.calls = append(s.calls, ownCall{at: at, paced: paced, throttled: throttled})
	if paced && !throttled && at.After(s.accepted) {
		s.accepted = at
	}
}

// ownCalls counts a process's own calls of a key in the
// pace.AdaptWindow to a time: all of them, those paced, and the paced
// ones the downstream throttled.
type ownCalls struct{ calls, paced, pacedThrottled int }

// own is the process's calls of key in the pace.AdaptWindow to now.
func (s *adaptSeen) own(now time.Time) ownCalls {
	var o ownCalls
	for _, c := range s.calls {
		if now.Sub(c.at) < pace.AdaptWindow && !c.at.After(now) {
			o.calls++
			if c.paced {
				o.paced++
				if c.throttled {
					o.pacedThrottled++
				}
			}
		}
	}
	return o
}

// Throttle applies a throttled call of key at now, the downstream asking
// for retryAfter (0: none), to the key's adaptive row (pace.Adapt.
// Throttled): read (Adapt), cut and written (pace.Rows.CutAdapt) when
// it changes, read again from the stored row and tried again when
// another process wrote first, up to adaptTries writes. It answers the
// row as it stands and whether this call changed it.
func (as *Adapts) Throttle(ctx context.Context, st AdaptRows, key string, now time.Time, retryAfter time.Duration) (pace.Adapt, bool, error) {
	s := as.of(key)
	s.mu.Lock()
	o, accepted := s.own(now), s.accepted
	s.mu.Unlock()
	// The share taken says how far the downstream is from the limit only
	// over calls the limit paced: a process's calls made before it read
	// a cut (AdaptIdleReadEvery) ran above it, and their share would cut
	// the limit far below what the downstream takes.
	f := pace.Backoff(o.paced, o.pacedThrottled)
	return as.rewrite(ctx, st, key, now, func(a pace.Adapt) (pace.Adapt, bool) { return a.Throttled(now, o.calls, f, retryAfter, accepted) })
}

// Resume starts key's pace again from pace.AdaptResume in slow start
// when a batch calling it resumes at now after a pause (pace.Adapt.
// Resumed), written as Throttle writes a cut. Other processes read the
// row within AdaptReadEvery: until then, their units run unpaced.
func (as *Adapts) Resume(ctx context.Context, st AdaptRows, key string, now time.Time) (pace.Adapt, bool, error) {
	return as.rewrite(ctx, st, key, now, func(a pace.Adapt) (pace.Adapt, bool) { return a.Resumed(now) })
}

// rewrite writes next(row) on key's adaptive row when it changes it: read
// (Adapt), written (pace.Rows.CutAdapt, conditional on the row read),
// read again from the stored row and tried again when another process
// wrote first, up to adaptTries writes.
func (as *Adapts) rewrite(ctx context.Context, st AdaptRows, key string, now time.Time, next func(pace.Adapt) (pace.Adapt, bool)) (pace.Adapt, bool, error) {
	a, err := as.Adapt(ctx, st, key, now)
	if err != nil {
		return pace.Adapt{}, false, err
	}
	s := as.of(key)
	for range adaptTries {
		n, changed := next(a)
		if !changed {
			return a, false, nil
		}
		got, ok, err := st.CutAdapt(ctx, pace.AdaptCut{Key: key, Was: a, Row: n, Now: now})
		if err != nil {
			return a, false, err
		}
		s.mu.Lock()
		s.row, s.read = got, now
		s.mu.Unlock()
		if ok {
			return got, true, nil
		}
		a = got
	}
	return a, false, nil
}

// LeaseAdaptive leases the next n positions in line on key's adaptive
// row a (as this process last read it): from its allowance now on, up
// to pace.Adapt.Ahead past it (pace.Rows.LeaseAdapt). It answers the
// lease's first position (granted) and the row as the lease left it,
// which the process keeps as its copy.
func (as *Adapts) LeaseAdaptive(ctx context.Context, st AdaptStore, key string, a pace.Adapt, n int, now time.Time) (float64, bool, pace.Adapt, error) {
	g, err := st.LeaseAdapt(ctx, pace.AdaptLease{Key: key, N: n, At: a.Allowance(now), Ahead: a.Ahead(now), Now: now})
	if err != nil {
		return 0, false, a, err
	}
	s := as.of(key)
	s.mu.Lock()
	// The lease's answer is as fresh as a read: kept unless a newer cut
	// was seen meanwhile.
	if !g.Row.Cut.Before(s.row.Cut) {
		s.row, s.read = g.Row, now
	}
	s.mu.Unlock()
	return g.Pos, g.Granted, g.Row, nil
}

// ownServices are the AWS services bulkrun calls for its own bookkeeping
// around an item's call (a secret's read, an output's write): their
// throttling is not the downstream's.
var ownServices = []string{"dynamodb", "s3", "sqs", "secretsmanager", "ssm", "kms", "events", "states"}

// DownstreamThrottle is the throttling a call's err carries when it is
// the downstream's own (pipeline.ThrottleOf, its Service not one of
// bulkrun's own AWS services): the delay it asked for (Retry-After; 0:
// none).
func DownstreamThrottle(err error) (time.Duration, bool) {
	t, ok := pipeline.ThrottleOf(err)
	if !ok || slices.Contains(ownServices, strings.ToLower(t.Service)) {
		return 0, false
	}
	return t.Delay, true
}

// Observe counts a call of key started at start, paced or not (Called),
// and, when it
// ended throttled by the downstream (DownstreamThrottle), applies the
// throttling at now (Throttle), answering the row and whether it changed.
func (as *Adapts) Observe(ctx context.Context, st AdaptStore, key string, start, now time.Time, paced bool, err error) (pace.Adapt, bool, error) {
	d, ok := DownstreamThrottle(err)
	as.Called(key, start, paced, ok)
	if !ok {
		return pace.Adapt{}, false, nil
	}
	return as.Throttle(ctx, st, key, now, d)
}

// DownstreamKey is the key a batch with no rate is paced on once its
// downstream throttles (docs/adr/0036): the host (and port) of its
// pipeline_options' url (a webhook), lower-cased; else its
// pipeline_options' function (a Lambda function); else the pipeline's
// name, "pipeline:{name}". Batches calling one host or function share
// its pace.
func DownstreamKey(b ledger.Batch) string {
	var o struct {
		URL      string `json:"url"`
		Function string `json:"function"`
	}
	if len(b.Options) > 0 && json.Unmarshal(b.Options, &o) == nil {
		if u, err := url.Parse(o.URL); err == nil && u.Host != "" {
			return strings.ToLower(u.Host)
		}
		if o.Function != "" {
			return "lambda:" + o.Function
		}
	}
	return "pipeline:" + b.Pipeline
}
