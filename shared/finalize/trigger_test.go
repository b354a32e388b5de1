package finalize

import (
	"encoding/json"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// TestTriggerAnswers pins the finalize function's answer in each case, as
// callers that invoke it synchronously read it (a repeated finalize says
// "wrote": false; a chained call says its place, 0 included).
func TestTriggerAnswers(t *testing.T) {
	part := 2
	for _, tt := range []struct {
		res  TriggerResult
		want string
	}{
		{finished(FinalizeResult{Wrote: true, Report: api.Report{Status: api.StatusCompleted}}), `{"status":"completed","wrote":true}`},
		{finished(FinalizeResult{Report: api.Report{Status: api.StatusCompleted}}), `{"status":"completed","wrote":false}`},
		{continued(ledger.FinalizeEvent{BatchID: "b", Run: 1}), `{"status":"running","continued":true,"chain":0}`},
		{TriggerResult{Status: api.StatusRunning, Parts: true}, `{"status":"running","parts":true}`},
		{TriggerResult{Status: api.StatusRunning, Part: &part}, `{"status":"running","part":2}`},
		{TriggerResult{Status: api.StatusRunning}, `{"status":"running"}`},
	} {
		if b, _ := json.Marshal(tt.res); string(b) != tt.want {
			t.Errorf("answer %s, want %s", b, tt.want)
		}
	}
}
