package submit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// A repeated submit with another retry policy is another plan.
func TestSameSettingsRetry(t *testing.T) {
	a, b := ledger.Batch{Batch: api.Batch{Plan: api.Plan{Retry: new(api.DefaultRetryPolicy)}}}, ledger.Batch{Batch: api.Batch{Plan: api.Plan{Retry: &api.RetryPolicy{IntervalSeconds: 1, BackoffRate: 2, MaxDelaySeconds: 2}}}}
	if field, _, _ := a.DiffPlan(b); field != "retry" {
		t.Fatalf("field %q, want retry", field)
	}
	if field, _, _ := a.DiffPlan(ledger.Batch{Batch: api.Batch{Plan: api.Plan{Retry: new(api.DefaultRetryPolicy)}}}); field != "" {
		t.Fatalf("the same policy differs in %q", field)
	}
}

// A webhook timeout_ms at or above what an item invocation leaves a call
// is accepted with a warning naming the option and the bound.
func TestSubmitWarnsOfATimeoutAboveTheItemTimeout(t *testing.T) {
	s := &Submitter{ItemTimeout: 5 * time.Minute}
	for opts, warned := range map[string]bool{`{"timeout_ms":290000}`: true, `{"timeout_ms":289999}`: false, `{"url":"x"}`: false, `{"timeout_ms":900000}`: true} {
		w := s.Warnings(context.Background(), api.SubmitRequest{Options: []byte(opts)})
		if (len(w) == 1) != warned || warned && !strings.Contains(w[0], "pipeline_options.timeout_ms") {
			t.Errorf("%s: warnings %q, want warned %v", opts, w, warned)
		}
	}
	if w := (&Submitter{}).Warnings(context.Background(), api.SubmitRequest{Options: []byte(`{"timeout_ms":900000}`)}); len(w) != 0 {
		t.Errorf("unknown item timeout: %q", w)
	}
}
