package dynamo

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
)

// TestAttributeConstantsNameStoredAttributes guards the row shapes: every
// attribute name that condition and update expressions use (the attr…
// constants) is one that itemRow's or batchRow's dynamodbav tags write, so
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
	br := batchRow{Chunks: 1, MaxConcurrency: 1, OnInterrupt: "x", Headers: map[string]string{"a": "b"}, KeyField: "k",
		SubmittedBy: "s", FinishedAtMs: 1, ReportKey: "r", Census: "{}", Stop: "s", StopDetail: "d", ExpiresAtMs: 1,
		Request: "{}", SubmitAttempts: 1, SubmitDeadMs: 1, Refusal: "{}", Forgetting: true, PublishedRun: 1,
		StopOnThreshold: &on, BatchesPK: "p", BatchesSK: "s", Checked: "{}", SourceFormat: "csv", CheckPlan: "c"}
	item, batchAttrs := full(itemRow{}), full(br)
	for _, name := range []string{attrAttempt, attrCost, attrError, attrFirstAttempt, attrLeaseUntilMs, attrOutcome,
		attrOutput, attrOutputRef, attrReason, attrReleased, attrRetryScheduled, attrRun, attrSpent, attrSpentRun, attrUpdatedAtMs} {
		if !item[name] {
			t.Errorf("item attribute %q is not a field of itemRow", name)
		}
	}
	for _, name := range []string{attrBatchID, attrCensus, attrChunks, attrCounterShards, attrExpiresAtMs, attrFannedOut,
		attrFinishedAtMs, attrForgetting, attrItemCount, attrListShards, attrManifestBytes, attrManifestDigest, attrManifestKey,
		attrNeedsAttention, attrPublishedRun, attrRefusal, attrReportKey, attrRun, attrRunStartedAtMs, attrStatus, attrStop,
		attrStopDetail, attrSubmitAttempts, attrSubmitDeadlineMs, attrChecked, attrSourceFormat} {
		if !batchAttrs[name] {
			t.Errorf("batch attribute %q is not a field of batchRow", name)
		}
	}
}
