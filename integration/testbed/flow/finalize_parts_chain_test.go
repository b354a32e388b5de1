package flow

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/bulkrun/bulkrun/internal/trigger"
	"github.com/bulkrun/bulkrun/shared/finalize"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// invocations is a Lambda endpoint that takes every asynchronous Invoke
// (202) and keeps its payload, a finalize event.
type invocations struct {
	mu   sync.Mutex
	sent []ledger.FinalizeEvent
}

func (v *invocations) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ev ledger.FinalizeEvent
	if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	v.mu.Lock()
	v.sent = append(v.sent, ev)
	v.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

func (v *invocations) take() []ledger.FinalizeEvent {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := v.sent
	v.sent = nil
	return s
}

// TestFinalizePartsCarryTheirChain guards the count Lambda's recursive
// loop detection keeps (16 calls of one chain; finalize.MaxFinalizeChain):
// a part is its starter's chain's next call, so its event carries the
// starter's chain + 1, whoever starts it. The triggered call (chain 0)
// starts every part at chain 1; the parts are lost; a call 7 links into a
// chain (chain 7) starts them again at chain 8, not 1; the tick, a chain
// of its own, starts them at chain 1. The parts' invocations go through
// internal/trigger to a Lambda endpoint that keeps each payload.
func TestFinalizePartsCarryTheirChain(t *testing.T) {
	ctx := context.Background()
	r := ranRun(t, 900, 1)
	r.fin.PartRows = 100 // 900 rows: several parts
	lambdaAPI := &invocations{}
	srv := httptest.NewServer(lambdaAPI)
	defer srv.Close()
	client := lambda.New(lambda.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: aws.AnonymousCredentials{}})
	r.fin.Parts = trigger.New(client, "finalize")

	startedAt := func(what string, want int, ev ledger.FinalizeEvent) {
		t.Helper()
		res, err := r.fin.Trigger(ctx, ev)
		if err != nil || !res.Parts {
			t.Fatalf("%s: %+v %v, want the parts started", what, res, err)
		}
		sent := lambdaAPI.take()
		if len(sent) < 2 {
			t.Fatalf("%s: %d parts started, want several", what, len(sent))
		}
		for _, s := range sent {
			if s.Part < 1 || s.Chain != want {
				t.Errorf("%s: part %d started at chain %d, want %d", what, s.Part, s.Chain, want)
			}
		}
	}
	startedAt("the triggered call", 1, ledger.FinalizeEvent{BatchID: "b", Run: 1})

	markPassed := finalize.DefaultChunkTime + finalize.DefaultChunkMargin + time.Second
	r.clock.T = r.clock.T.Add(markPassed) // every part lost: its mark has passed
	startedAt("call 7 of a chain", 8, ledger.FinalizeEvent{BatchID: "b", Run: 1, Chain: 7})

	r.clock.T = r.clock.T.Add(markPassed)
	r.clock.T = r.clock.T.Add(time.Hour) // the counters stood still: the tick finalizes
	if _, err := r.fin.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	sent := lambdaAPI.take()
	if len(sent) < 2 {
		t.Fatalf("the tick started %d parts, want every lost part again", len(sent))
	}
	for _, s := range sent {
		if s.Chain != 1 {
			t.Errorf("the tick started part %d at chain %d, want 1 (the tick begins a chain)", s.Part, s.Chain)
		}
	}
}
