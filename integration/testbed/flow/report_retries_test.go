package flow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// A run's report counts the attempts that did not end their item: the
// retries it scheduled, those of them the downstream throttled (no
// attempt used), and the other retries by failure class. 30 items: the
// first call of every third item is throttled (HTTP 429, Retry-After 1 s),
// of every third after it answered a transient failure of the class
// "http 502", and the rest succeed at once; every second call succeeds.
// So 10 throttled and 10 "http 502" retries: 20 scheduled. At K = 1 and
// 10, each item run to its end before finalize.
func TestReportCountsRetries(t *testing.T) {
	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			ctx := context.Background()
			var mu sync.Mutex
			seen := map[string]int{}
			r := newRig(t, func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
				mu.Lock()
				seen[req.Key]++
				first := seen[req.Key] == 1
				mu.Unlock()
				var i int
				fmt.Sscanf(req.Key, "k%d", &i)
				switch {
				case first && i%3 == 0:
					return pipeline.Result{}, pipeline.Throttled("http", "429", time.Second, errors.New("webhook: HTTP 429 Too Many Requests"))
				case first && i%3 == 1:
					return pipeline.Result{}, classedError("http 502")
				}
				return pipeline.Result{Output: req.Input}, nil
			})
			r.clock.T = time.Now().UTC() // the pipeline's context ends at the lease, by the clock
			id := fmt.Sprintf("retries-k%d", k)
			var in []byte
			for i := range 30 {
				in = fmt.Appendf(in, "%s{\"id\":\"k%d\"}", map[bool]string{true: "", false: ","}[i == 0], i)
			}
			if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", ItemsPerMessage: k, KeyField: "id",
				Retry: &api.RetryPolicy{IntervalSeconds: 1, BackoffRate: 1, MaxDelaySeconds: 1}, Source: api.SourceSpec{Items: append(append([]byte{'['}, in...), ']')}}); err != nil {
				t.Fatal(err)
			}
			for range 20 { // each round delivers what is queued, then a minute passes: every retry comes due
				r.step(t, ctx, id, time.Minute)
			}
			res, err := r.fin.Finalize(ctx, id, 1)
			if err != nil {
				t.Fatal(err)
			}
			rep := res.Report
			if rep.Census.Succeeded != 30 {
				t.Fatalf("census %+v, want 30 succeeded", rep.Census)
			}
			rc := rep.Retries
			if rc == nil || rc.Scheduled != 20 || rc.Throttled != 10 || rc.Interrupted != 0 || rc.TimedOut != 0 ||
				len(rc.Causes) != 1 || rc.Causes[0].Class != "http 502" || rc.Causes[0].Items != 10 {
				t.Fatalf("report retries %+v, want 20 scheduled, 10 throttled, causes [http 502: 10]", rc)
			}
			if rep.Halts != nil {
				t.Errorf("report halts %+v, want none", rep.Halts)
			}
		})
	}
}

// classedError is a transient failure of its own class (as the webhook's
// StatusError names "http 502").
type classedError string

func (e classedError) Error() string        { return "webhook: " + string(e) }
func (e classedError) FailureClass() string { return string(e) }
