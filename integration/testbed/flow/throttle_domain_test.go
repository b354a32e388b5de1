package flow

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/bulkrun/bulkrun/internal/pipeline/lambdafn"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// The user's own Lambda function throttled for 27 seconds (Lambda's 429
// TooManyRequestsException "Rate Exceeded.", as Lambda answers it: the
// status, X-Amzn-ErrorType and the JSON body, through the SDK client and
// the lambda pipeline) fails no item of a batch with 3 attempts: each
// throttled attempt is fenced (its attempt number rises) but not counted
// toward max attempts, and its wait is a message sent again, so no
// delivery's receive count climbs toward the queue's maxReceiveCount. Then
// every item succeeds with one successful call, and its results say
// attempts 1. One item per message and ten per pack row (where a pack's
// throttled item calls first and alone while the others wait).
func TestUserLambdaThrottled27sFailsNoItem(t *testing.T) {
	for _, k := range []int{1, 10} {
		t.Run(map[int]string{1: "K1", 10: "K10"}[k], func(t *testing.T) {
			ctx := context.Background()
			var r *rig
			var start time.Time
			var throttled, ran atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-Amzn-RequestId", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
				if r.clock.Now().Sub(start) < 27*time.Second {
					throttled.Add(1)
					w.Header().Set("X-Amzn-ErrorType", "TooManyRequestsException")
					w.WriteHeader(http.StatusTooManyRequests)
					_, _ = w.Write([]byte(`{"Type":"User","message":"Rate Exceeded.","Reason":"ReservedFunctionConcurrentInvocationLimitExceeded"}`))
					return
				}
				ran.Add(1)
				_, _ = w.Write([]byte(`{"output":{"ok":true}}`))
			}))
			defer srv.Close()
			client := lambda.New(lambda.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Retryer: aws.NopRetryer{},
				Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")})
			fn := lambdafn.New(lambdafn.SDK{Client: client}, []string{"score"})
			r = newRig(t, fn.Run)
			r.clock.T = time.Now().UTC() // the pipeline's context ends at the lease, by the clock
			start = r.clock.Now()
			// The key's adaptive pace sleeps a unit up to pace.LeaseSleep
			// before its call; the rounds move the test's clock instead
			// (2 s each), so the sleeps end at once.
			var slept atomic.Int64
			r.worker.Sleep = func(_ context.Context, d time.Duration) { slept.Add(int64(d)) }
			id := "throttled-" + map[int]string{1: "k1", 10: "k10"}[k]
			if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", MaxAttempts: 3, ItemsPerMessage: k,
				Options: json.RawMessage(`{"function":"score"}`), Source: api.SourceSpec{Items: items(20)}}); err != nil {
				t.Fatal(err)
			}
			maxReceives := 0
			for round := 0; ; round++ {
				ds := r.queue.take()
				if len(ds) == 0 {
					break
				}
				if round > 200 {
					t.Fatal("the queue did not drain in 200 rounds")
				}
				for _, d := range ds {
					maxReceives = max(maxReceives, d.ReceiveCount)
				}
				failed := r.worker.Handle(ctx, ds)
				for _, d := range ds {
					for _, f := range failed {
						if d.MessageID == f {
							d.ReceiveCount++
							r.queue.put([]worker.Delivery{d})
						}
					}
				}
				r.clock.T = r.clock.T.Add(2 * time.Second) // the waits pass
			}
			t.Logf("%d throttled calls, %d successful; the pace slept %v in all", throttled.Load(), ran.Load(), time.Duration(slept.Load()))
			if maxReceives > 2 {
				t.Errorf("a message was received %d times: throttled waits must not count receives (maxReceiveCount)", maxReceives)
			}
			// At one item a message every item is throttled past its 3
			// attempts; in a pack, the throttled item runs first and alone
			// and the others are given back uncalled (the worker's
			// throttledLead), so each pack's lead item is.
			if units := int64(20 / k); throttled.Load() < units*3 || ran.Load() != 20 {
				t.Fatalf("%d throttled calls, %d successful: want each of the %d units throttled past its 3 attempts, then one call each item", throttled.Load(), ran.Load(), units)
			}
			res, err := r.fin.Finalize(ctx, id, 1)
			if err != nil {
				t.Fatal(err)
			}
			if c := res.Report.Census; c.Succeeded != 20 || c.Failed != 0 {
				t.Fatalf("census %+v: want 20 succeeded, none failed", c)
			}
			body, err := r.blobs.Get(ctx, api.ResultsKey(id, 1, api.OutcomeSucceeded))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			err = api.ReadResults(bytes.NewReader(body), func(l api.ResultLine) error {
				n++
				if l.Attempts != 1 {
					t.Errorf("%s: %d attempts, want 1: the throttled ones do not count", l.Key, l.Attempts)
				}
				return nil
			})
			if err != nil || n != 20 {
				t.Fatalf("%d succeeded lines (%v), want 20", n, err)
			}
		})
	}
}
