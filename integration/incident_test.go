//go:build integration && incident

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
)

// The on-call incidents, run against the deployed stack at the product's
// defaults (make deploy, no test context: a 5-minute retry policy), so
// they take minutes and stay out of make test and CI:
//
//	BULKRUN_INCIDENT_ITEMS=3000 go test -tags 'integration incident' -count=1 -timeout 45m -run TestIncidentReceiverDown5Minutes -v ./integration/
//
// TestIncidentReceiverDown5Minutes: a webhook receiver answers 502 for
// 5 minutes from 10 s after the submit, in a batch of 3,000 items with a
// 10 % threshold. With the retry policy's default (5 min, ×2, ≤ 15 min,
// jitter 0.5: 3 attempts spread over 15–22.5 minutes) no item fails and
// every key is answered 200 exactly once. It prints the timeline (every
// 30 s: the counters' census, the receiver's state, its calls).
func TestIncidentReceiverDown5Minutes(t *testing.T) {
	ctx := context.Background()
	n := 3000
	if v := os.Getenv("BULKRUN_INCIDENT_ITEMS"); v != "" {
		fmt.Sscan(v, &n)
	}
	id := newID(t)
	start := time.Now()
	downFrom, downTo := start.Add(10*time.Second), start.Add(10*time.Second+5*time.Minute)
	var mu sync.Mutex
	ok, failedCalls := map[string]int{}, 0
	down := func() bool { now := time.Now(); return !now.Before(downFrom) && now.Before(downTo) }
	url := env.hook.route(id, func(key string, attempt int) int {
		mu.Lock()
		defer mu.Unlock()
		if down() {
			failedCalls++
			return http.StatusBadGateway
		}
		ok[key]++
		return http.StatusOK
	})
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"k":"k%05d"}`, i)
	}
	pct := 10.0
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "webhook", KeyField: "k", ItemsPerMessage: 1,
		Threshold: api.Threshold{FailurePercent: &pct},
		Source:    api.SourceSpec{Items: json.RawMessage("[" + strings.Join(items, ",") + "]")}, Options: json.RawMessage(fmt.Sprintf(`{"url":%q}`, url))}); err != nil {
		t.Fatal(err)
	}
	t.Logf("t+0s submitted %s: %d items, receiver down (502) from t+10s to t+5m10s", id, n)
	var final api.Census
	for {
		time.Sleep(30 * time.Second)
		v, err := env.api.Status(ctx, id)
		if err != nil {
			t.Logf("status: %v", err)
			continue
		}
		mu.Lock()
		succeeded, calls502 := len(ok), failedCalls
		mu.Unlock()
		state := "up"
		if down() {
			state = "DOWN"
		}
		c := v.Census
		if c == nil {
			c = &api.Census{}
		}
		t.Logf("t+%s status %s: succeeded %d, failed %d, pending %d (census %s); receiver %s: %d keys answered 200, %d calls answered 502",
			time.Since(start).Round(time.Second), v.Status, c.Succeeded, c.Failed, c.Pending, v.CensusSource, state, succeeded, calls502)
		if v.Status.Finished() {
			final = *c
			if v.Status != api.StatusCompleted || final.Failed != 0 {
				t.Errorf("finished %s with %d failed: want completed, none failed", v.Status, final.Failed)
			}
			break
		}
		if time.Since(start) > 40*time.Minute {
			t.Fatal("not finished after 40 minutes")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for _, c := range ok {
		if c != 1 {
			twice++
		}
	}
	t.Logf("finished after %s: %d succeeded, %d failed; %d keys answered 200 (%d more than once), %d calls answered 502",
		time.Since(start).Round(time.Second), final.Succeeded, final.Failed, len(ok), twice, failedCalls)
	if len(ok) != n || twice != 0 {
		t.Errorf("%d of %d keys answered 200, %d more than once", len(ok), n, twice)
	}
}
