// Package eta holds the rules of a running run's recent pace: the items
// it ended, and their cost, over the last Window, measured from a small
// ring of samples of its counters (docs/design/control.md, "The recent
// pace"), and the estimate made from them (Estimate: the finish, the
// projected cost). It is pure (the standard library, the API types, the
// pipeline contract's CostSum and decimal): the live view
// (live.Estimate) hands it a run's counters, and the ring
// lives in one row of the run's first counter partition, which the live
// view's read (Store.Progress) already queries, so it costs no read of
// its own.
//
// The ring is written by the API's batch view (GET /batches/{id}: what
// `bulkrun status`, `bulkrun watch` and the console read), at most once
// every SampleEvery per run, under a condition on the newest sample's
// time; a run nobody reads has no samples, and its estimate falls back to
// the run's average (api.RateBasisRunAverage).
package eta

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

const (
	// Window is how far back the recent pace looks: 60 s, long enough to
	// hold many invocations' counter writes (an invocation counts every
	// 2 s while it runs, ADR 0027) and several retry waits of a throttled
	// downstream, short enough that a change of pace (a downstream slowing
	// down, a max_concurrency raised) shows within a minute.
	Window = 60 * time.Second
	// MinSpan is the shortest span a recent pace is measured over: 30 s.
	// A sample younger than that is not used (a rate over a few seconds
	// is the lag of the counters, not a pace).
	MinSpan = 30 * time.Second
	// SampleEvery is the least time between two samples of a run: 15 s.
	// The ring then holds a sample between MinSpan and Window old as long
	// as the run is read at least every 15 s (`bulkrun watch` reads every
	// second while the run moves, at most 15 s apart while it does not;
	// the console every 2 s).
	SampleEvery = 15 * time.Second
	// MaxSamples is how many samples the ring keeps: those of the last
	// Window + SampleEvery (at most 6 at one per SampleEvery).
	MaxSamples = 6
	// MaxRingBytes bounds the ring's JSON: with the row's key and
	// attributes the row stays under 1 KB, so that each write of it costs
	// one write unit ("Item size and write units", DynamoDB developer
	// guide: 1 unit per 1 KB of the larger of the item before and after).
	// A sample whose costs do not fit is kept without them (Sample.NoCost).
	MaxRingBytes = 700
)

// Sample is one read of a run's counters: when (AtMs, Unix
// milliseconds), how many of its items had ended (Done), their cost by
// name (Cost, the counters' ChunkCount.Cost sums) and what the run had
// spent (Spent, the counters' Spent sums: every attempt, retried ones
// included; absent in samples written before it was kept, and when
// nothing was spent). NoCost: Cost and Spent were left out to keep the
// ring under MaxRingBytes; a pace measured from it projects them from the
// run's average. JSON: {"t": ms, "d": n, "c": {name: decimal}, "s":
// {name: decimal}, "x": true}.
type Sample struct {
	AtMs   int64            `json:"t"`
	Done   int64            `json:"d"`
	Cost   pipeline.CostSum `json:"c,omitempty"`
	Spent  pipeline.CostSum `json:"s,omitempty"`
	NoCost bool             `json:"x,omitempty"`
}

// At is the sample's time, UTC.
func (s Sample) At() time.Time { return time.UnixMilli(s.AtMs).UTC() }

// Pace is a run's recent pace: the items it ended (Ended), their cost
// and what the run spent meanwhile (Cost, Spent; nil with NoCost) from
// Since to the read, at RatePerSecond.
type Pace struct {
	Since         time.Time
	Ended         int64
	RatePerSecond float64
	Cost, Spent   pipeline.CostSum
	NoCost        bool
}

// Recent is the run's pace over the recent window at now, from the ring
// and the counters just read (done items ended, cost their cost): measured
// from the oldest sample taken within Window before now and at least
// MinSpan before it. ok is false — the caller falls back to the run's
// average — when there is no such sample, or when the window ended no
// item (a run whose items all wait for a retry will still end them: its
// average is the better guess; a run that ends none is told by the live
// view's Stalled).
func Recent(ring []Sample, now time.Time, done int64, cost, spent pipeline.CostSum) (Pace, bool) {
	for _, s := range ring { // oldest first
		age := now.Sub(s.At())
		if age > Window || age < MinSpan {
			continue
		}
		ended := done - s.Done
		if ended <= 0 {
			return Pace{}, false
		}
		p := Pace{Since: s.At(), Ended: ended, RatePerSecond: float64(ended) / age.Seconds(), NoCost: s.NoCost}
		if !s.NoCost {
			p.Cost, p.Spent = since(cost, s.Cost), since(spent, s.Spent)
		}
		return p, true
	}
	return Pace{}, false
}

// since is sum − then per name of sum, never below 0; nil when sum is
// empty.
func since(sum, then pipeline.CostSum) pipeline.CostSum {
	if len(sum) == 0 {
		return nil
	}
	out := pipeline.CostSum{}
	for name, v := range sum {
		out[name] = decimal.Max(decimal.Zero, v.Sub(then[name]))
	}
	return out
}

// Next is the ring to store after a read at now that saw done items
// ended at cost, and spent: the stored samples taken within Window + SampleEvery
// before now, oldest first, then this read's, at most MaxSamples and
// MaxRingBytes of JSON (this read's costs are left out first, then the
// oldest samples). write is false when the newest stored sample is
// younger than SampleEvery (or from a later time): nothing to write.
func Next(ring []Sample, now time.Time, done int64, cost, spent pipeline.CostSum) (next []Sample, write bool) {
	if n := len(ring); n > 0 && now.Sub(ring[n-1].At()) < SampleEvery {
		return nil, false
	}
	for _, s := range ring {
		if now.Sub(s.At()) <= Window+SampleEvery {
			next = append(next, s)
		}
	}
	s := Sample{AtMs: now.UnixMilli(), Done: done, Cost: cost, Spent: spent}
	next = append(next, s)
	if len(next) > MaxSamples {
		next = next[len(next)-MaxSamples:]
	}
	if Size(next) > MaxRingBytes {
		last := &next[len(next)-1]
		last.Cost, last.Spent, last.NoCost = nil, nil, true
	}
	for len(next) > 1 && Size(next) > MaxRingBytes {
		next = next[1:]
	}
	return next, true
}

// Size is the ring's JSON in bytes (Encode's length).
func Size(ring []Sample) int {
	b, _ := Encode(ring)
	return len(b)
}

// Encode is the ring as stored: a JSON array of Sample, oldest first.
func Encode(ring []Sample) ([]byte, error) { return json.Marshal(ring) }

// Decode reads a stored ring (Encode's output); the error is the JSON
// decoder's, wrapped with "pace ring".
func Decode(b []byte) ([]Sample, error) {
	var ring []Sample
	if err := json.Unmarshal(b, &ring); err != nil {
		return nil, fmt.Errorf("pace ring: %w", err)
	}
	return ring, nil
}
