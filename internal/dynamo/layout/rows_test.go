package layout

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// TestAttributeConstantsNameStoredAttributes guards the row shapes: every
// attribute name that condition and update expressions use (the attr…
// constants) is one that ItemRow's or BatchRow's dynamodbav tags write, so
// a renamed tag cannot leave an expression testing an attribute no row
// has (a condition that then never holds, or always does).
func TestAttributeConstantsNameStoredAttributes(t *testing.T) {
	full := func(v any) map[string]bool {
		t.Helper()
		av, err := attributevalue.MarshalMap(v)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for k := range av {
			names[k] = true
		}
		return names
	}
	// Fill every omitempty field so that it is marshalled.
	on := true
	br := BatchRow{Chunks: 1, MaxConcurrency: 1, OnInterrupt: "x", Headers: map[string]string{"a": "b"}, KeyField: "k",
		SubmittedBy: "s", FinishedAtMs: 1, ReportKey: "r", Census: "{}", Stop: "s", StopDetail: "d", ExpiresAtMs: 1,
		Request: "{}", SubmitAttempts: 1, SubmitDeadMs: 1, Refusal: "{}", Forgetting: true, ForgettingAtMs: 1, ForgettingBy: "t", PublishedRun: 1,
		StopOnThreshold: &on, BatchesPK: "p", BatchesSK: "s", Checked: "{}", CSV: "{}", SourceFormat: "csv", CheckPlan: "c", TaskGone: true}
	item, batchAttrs := full(ItemRow{}), full(br)
	for _, name := range []string{AttrAttempt, AttrCost, AttrError, AttrFirstAttempt, AttrLeaseUntilMs, AttrOutcome,
		AttrOutput, AttrOutputRef, AttrReason, AttrReleased, AttrRetryScheduled, AttrRun, AttrSpent, AttrSpentRun, AttrUpdatedAtMs} {
		if !item[name] {
			t.Errorf("item attribute %q is not a field of itemRow", name)
		}
	}
	for _, name := range []string{AttrBatchID, AttrCensus, AttrChunks, AttrCounterShards, AttrExpiresAtMs, AttrFannedOut,
		AttrFinishedAtMs, AttrForgetting, AttrForgettingAtMs, AttrForgettingBy, AttrCreatedAtMs, AttrItemCount, AttrListShards, AttrManifestBytes, AttrManifestDigest, AttrManifestKey,
		AttrNeedsAttention, AttrPublishedRun, AttrRefusal, AttrReportKey, AttrRun, AttrRunStartedAtMs, AttrStatus, AttrStop,
		AttrStopDetail, AttrSubmitAttempts, AttrSubmitDeadlineMs, AttrChecked, AttrCSV, attrSourceFormat, AttrTaskGone} {
		if !batchAttrs[name] {
			t.Errorf("batch attribute %q is not a field of batchRow", name)
		}
	}
}

// TestBatchRowKeepsThePlan guards the batch row's plan attributes: a
// plan with every field set comes back from setPlan and plan unchanged.
func TestBatchRowKeepsThePlan(t *testing.T) {
	pct, stop := 2.5, false
	p := api.Plan{Pipeline: "webhook", Digest: "d", Threshold: api.Threshold{FailurePercent: &pct}, MaxAttempts: 4,
		Retry: &api.RetryPolicy{IntervalSeconds: 60, BackoffRate: 2}, MaxConcurrency: 7, Rate: &api.Rate{Key: "k", RequestsPerSecond: 5},
		Priority: 3, ItemsPerMessage: 10, OnInterrupt: api.InterruptQuarantine, Headers: map[string]string{"a": "b"},
		Options: json.RawMessage(`{"url":"http://a"}`), StopOnThreshold: &stop}
	var r BatchRow
	if err := r.setPlan(p, ledger.HiddenPlan{TaskToken: "t"}); err != nil {
		t.Fatal(err)
	}
	got, h, err := r.plan()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) || h.TaskToken != "t" {
		t.Errorf("plan through the row:\n got %+v\nwant %+v", got, p)
	}
}
