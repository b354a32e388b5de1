package layout

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
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
		Request: "{}", SubmitAttempts: 1, SubmitDeadMs: 1, Refusal: "{}", Forgetting: true, PublishedRun: 1,
		StopOnThreshold: &on, BatchesPK: "p", BatchesSK: "s", Checked: "{}", CSV: "{}", SourceFormat: "csv", CheckPlan: "c", TaskGone: true}
	item, batchAttrs := full(ItemRow{}), full(br)
	for _, name := range []string{AttrAttempt, AttrCost, AttrError, AttrFirstAttempt, AttrLeaseUntilMs, AttrOutcome,
		AttrOutput, AttrOutputRef, AttrReason, AttrReleased, AttrRetryScheduled, AttrRun, AttrSpent, AttrSpentRun, AttrUpdatedAtMs} {
		if !item[name] {
			t.Errorf("item attribute %q is not a field of itemRow", name)
		}
	}
	for _, name := range []string{AttrBatchID, AttrCensus, AttrChunks, AttrCounterShards, AttrExpiresAtMs, AttrFannedOut,
		AttrFinishedAtMs, AttrForgetting, AttrItemCount, AttrListShards, AttrManifestBytes, AttrManifestDigest, AttrManifestKey,
		AttrNeedsAttention, AttrPublishedRun, AttrRefusal, AttrReportKey, AttrRun, AttrRunStartedAtMs, AttrStatus, AttrStop,
		AttrStopDetail, AttrSubmitAttempts, AttrSubmitDeadlineMs, AttrChecked, AttrCSV, attrSourceFormat, AttrTaskGone} {
		if !batchAttrs[name] {
			t.Errorf("batch attribute %q is not a field of batchRow", name)
		}
	}
}
