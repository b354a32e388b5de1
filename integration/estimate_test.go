//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/eta"
)

// TestEstimateAgainstTheFinish reads a running batch's live view once a
// second, from submit to its end, through the API as `bulkrun status`
// does, and holds its estimate (live.estimate) to what the counters say:
// a rate basis of recent_60s or run_average; over the run, ended +
// remaining = the run's items and the rate is the run's average; over
// the recent window, the window's items are at most those ended, over a
// span of 30 to 60 s (ended / rate); the finish is the read plus
// remaining / rate, and the projected cost is set. A run read every
// second for 90 s from its first estimate is told over the recent window
// at least once, and the pace ring the reads kept (the counters' pace
// row) holds at most eta.MaxSamples samples, eta.SampleEvery apart or
// more. It logs the estimate at 25, 50 and 75 % of the items ended beside
// the run's actual end — a measurement, not an assertion: the emulator's
// pace is not AWS's. BULKRUN_ETA_ITEMS sets the batch's size (default
// 400, which the suite runs; 10000 for a measurement).
func TestEstimateAgainstTheFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := 400
	if v := os.Getenv("BULKRUN_ETA_ITEMS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 4 {
			t.Fatalf("BULKRUN_ETA_ITEMS=%q: want a number of items ≥ 4", v)
		}
	}
	id := newID(t)
	url := env.hook.route(id, func(string, int) int { return http.StatusOK })
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"k":"k%06d"}`, i)
	}
	submitted := time.Now()
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "webhook", KeyField: "k", ItemsPerMessage: 1,
		Source: api.SourceSpec{Items: json.RawMessage("[" + strings.Join(items, ",") + "]")}, Options: json.RawMessage(fmt.Sprintf(`{"url":%q}`, url))}); err != nil {
		t.Fatal(err)
	}
	type reading struct {
		at  time.Time
		est api.Estimate
	}
	var marks [3]*reading // the first reading at or past 25, 50 and 75 %
	reads, withEstimate, recent := 0, 0, 0
	var firstEstimate, lastEstimate time.Time
	var ring []eta.Sample // the pace ring, read at the last reading
	deadline := time.Now().Add(time.Duration(n/2+180) * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("batch %s did not end by %s", id, deadline.Format(time.TimeOnly))
		}
		v, err := env.api.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		read := time.Now()
		if p, err := env.store.Progress(ctx, id, v.Run, max(1, v.CounterShards)); err == nil && len(p.Pace) > 0 {
			ring = p.Pace
		}
		if v.Status.Finished() {
			if v.Status != api.StatusCompleted || v.Census == nil || v.Census.Succeeded != int64(n) {
				t.Fatalf("batch %s ended %s, census %+v: want completed with %d succeeded", id, v.Status, v.Census, n)
			}
			break
		}
		reads++
		if v.Live == nil || v.Live.Estimate == nil {
			time.Sleep(time.Second)
			continue
		}
		withEstimate++
		e := *v.Live.Estimate
		if firstEstimate.IsZero() {
			firstEstimate = read
		}
		switch e.RateBasis {
		case api.RateBasisRunAverage:
			if e.Ended <= 0 || e.Ended+e.Remaining != int64(n) || e.RatePerSecond != e.RunRatePerSecond {
				t.Fatalf("estimate %+v: over the run, ended + remaining ≠ %d items or the rate is not the run's", e, n)
			}
		case api.RateBasisRecent:
			recent++
			span := float64(e.Ended) / e.RatePerSecond
			if e.Ended <= 0 || e.Ended+e.Remaining > int64(n) || e.RunRatePerSecond <= 0 || span < eta.MinSpan.Seconds()-0.01 || span > eta.Window.Seconds()+0.01 {
				t.Fatalf("estimate %+v: over the recent window, want 0 < ended ≤ %d − remaining over 30–60 s (%.1f s)", e, n, span)
			}
		default:
			t.Fatalf("estimate %+v: rate basis %q, want one of %v", e, e.RateBasis, api.RateBases())
		}
		if len(e.ProjectedCost) == 0 {
			t.Fatalf("estimate %+v: no projected cost (the webhook pipeline reports its calls)", e)
		}
		lastEstimate = read
		secs := e.FinishAt.Sub(e.Since).Seconds()
		if e.RatePerSecond <= 0 || secs <= 0 || e.FinishAt.Before(e.Since) {
			t.Fatalf("estimate %+v: no pace or a finish before the run's start", e)
		}
		// The finish at the rate, read on the API's clock: since + ended/rate
		// is the read, to the second, plus remaining/rate.
		elapsed := float64(e.Ended) / e.RatePerSecond
		if want := elapsed + float64(e.Remaining)/e.RatePerSecond; secs < want-2 || secs > want+2 {
			t.Fatalf("estimate %+v: finish %.1f s after the run's start, want %.1f s (ended/rate + remaining/rate)", e, secs, want)
		}
		r := &reading{read, e}
		for i, pct := range []int64{25, 50, 75} {
			if marks[i] == nil && (int64(n)-e.Remaining)*100 >= pct*int64(n) {
				marks[i] = r // one reading may pass more than one mark
			}
		}
		time.Sleep(time.Second)
	}
	end := time.Now()
	if withEstimate == 0 {
		t.Fatalf("batch %s: %d reads while it ran, none with an estimate", id, reads)
	}
	if lastEstimate.Sub(firstEstimate) >= 90*time.Second && recent == 0 {
		t.Errorf("batch %s: read every second for %s with an estimate, never over the recent window", id, lastEstimate.Sub(firstEstimate).Round(time.Second))
	}
	if len(ring) == 0 || len(ring) > eta.MaxSamples {
		t.Errorf("pace ring of %d samples, want 1 to %d", len(ring), eta.MaxSamples)
	}
	for i := 1; i < len(ring); i++ {
		if gap := ring[i].At().Sub(ring[i-1].At()); gap < eta.SampleEvery {
			t.Errorf("pace samples %d and %d %s apart, want at least %s: %+v", i-1, i, gap, eta.SampleEvery, ring)
		}
	}
	t.Logf("batch of %d items, one per message: submitted %s, ended by %s (%s; %d reads while running, %d with an estimate, %d of them over the recent window)",
		n, submitted.Format(time.TimeOnly), end.Format(time.TimeOnly), end.Sub(submitted).Round(time.Second), reads, withEstimate, recent)
	t.Logf("| ended (%% of the items) | basis | rate/s (run average) | remaining | estimated finish | actual end (±1 s, the poll) | error |")
	t.Logf("| ---: | --- | ---: | ---: | --- | --- | ---: |")
	for i, m := range marks {
		if m == nil || (i > 0 && m == marks[i-1]) {
			continue // no reading after the mark, or the one logged already
		}
		left := end.Sub(m.at).Seconds()
		errPct := 100 * (m.est.FinishAt.Sub(m.at).Seconds() - left) / left
		ended := int64(n) - m.est.Remaining
		t.Logf("| %d (%.0f %%) | %s | %.1f (%.1f) | %d | %s | %s | %+.0f %% of the time left |", ended, 100*float64(ended)/float64(n), m.est.RateBasis,
			m.est.RatePerSecond, m.est.RunRatePerSecond, m.est.Remaining, m.est.FinishAt.Format(time.TimeOnly), end.Format(time.TimeOnly), errPct)
	}
}
