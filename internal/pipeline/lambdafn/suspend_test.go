package lambdafn_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/pipeline/lambdafn"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestLambdaPipelineSuspend guards the Lambda function's form of
// pipeline.Suspend: an answer's "suspend" suspends the item with its
// wake time and token (its cost kept), one with an output, an error or
// no reason breaks the contract, and the attempt after a signal carries
// the payload in the event's "signal".
func TestLambdaPipelineSuspend(t *testing.T) {
	run := func(answer string, signal json.RawMessage) (*fake, pipeline.Result, error) {
		f := &fake{res: lambdafn.Result{Payload: []byte(answer)}}
		req := request(`{"function":"score"}`)
		req.Signal = signal
		res, err := lambdafn.New(f, []string{"score"}).Run(context.Background(), req)
		return f, res, err
	}
	_, res, err := run(`{"suspend":{"reason":"awaiting approval","wake_at":"2026-12-03T10:00:00Z","token":"t-1"},"cost":{"calls":1}}`, nil)
	s, ok := pipeline.SuspendOf(err)
	if !ok || s.Reason != "awaiting approval" || s.Token != "t-1" || !s.WakeAt.Equal(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)) || res.Cost["calls"] != 1 {
		t.Fatalf("suspend answer: %+v %v; want a suspension with its wake time, token and cost", res, err)
	}
	for _, bad := range []string{
		`{"suspend":{"reason":"x"},"output":{"a":1}}`,
		`{"suspend":{"reason":"x"},"error":{"class":"transient","message":"m"}}`,
		`{"suspend":{"wake_at":"2026-12-03T10:00:00Z"}}`,
	} {
		if _, _, err := run(bad, nil); pipeline.Classify(err) != pipeline.ClassPermanent || !strings.Contains(err.Error(), "contract") {
			t.Errorf("%s: %v, want a permanent breach of the contract", bad, err)
		}
	}
	f, _, err := run(`{"output":1}`, json.RawMessage(`{"approved":true}`))
	if err != nil || !strings.Contains(string(f.payload), `"signal":{"approved":true}`) {
		t.Errorf("event %s (%v), want the signal's payload in \"signal\"", f.payload, err)
	}
	f, _, _ = run(`{"output":1}`, nil)
	if strings.Contains(string(f.payload), `"signal"`) {
		t.Errorf("event %s carries a signal on a first attempt", f.payload)
	}
}
