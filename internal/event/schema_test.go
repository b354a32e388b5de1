package event_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/integration/testbed/eventschema"
	"github.com/bulkrun/bulkrun/internal/event"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestStateChangeSchema holds the Batch State Change events bulkrun
// builds to their published schema (docs/events/batch-state-change.schema.json,
// closed to undocumented fields): a finished run of each verdict, pauses
// and their ends, a sample's estimate and its approvals, a submitted
// batch and its run, a refusal. The published
// examples of version 1 must stay valid (the schema only grows), and
// events that break the schema are refused (the check can fail).
func TestStateChangeSchema(t *testing.T) {
	s, err := eventschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	examples, err := eventschema.Examples()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[api.StateChange]bool{}
	for i, ex := range examples {
		if err := s.Validate(ex); err != nil {
			t.Errorf("example %d: %v", i, err)
		}
		var e api.StateChangeEvent
		if err := json.Unmarshal(ex, &e); err != nil {
			t.Fatalf("example %d: %v", i, err)
		}
		seen[e.Change] = true
	}
	for _, c := range api.StateChanges() {
		if !seen[c] {
			t.Errorf("no example of change %q in %s", c, eventschema.ExamplesPath)
		}
	}

	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, status := range []api.Status{api.StatusCompleted, api.StatusThresholdExceeded, api.StatusCancelled} {
		r := api.Report{BatchID: "b1", Run: 2, Pipeline: "webhook", Status: status, NeedsAttention: true, CreatedAt: now, FinishedAt: now,
			Census: api.Census{Total: 3, Succeeded: 2, Failed: 1, Cost: pipeline.CostSum{}, RunSpent: pipeline.CostSum{}}}
		d, err := event.StateChangeDetail(r, "bkt")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate([]byte(d)); err != nil {
			t.Errorf("finished %s: %v\n%s", status, err, d)
		}
	}
	var b ledger.Batch
	b.ID, b.Run, b.Status, b.Pipeline, b.ItemCount, b.SubmittedBy, b.CreatedAt = "b1", 1, api.StatusRunning, "webhook", 3, "arn:aws:iam::000000000000:root", now
	p := api.Pause{By: api.PauseByOutage, Since: now, Class: "http 502", Error: strings.Repeat("é", 5000), Probes: 1, NextCheckAt: now.Add(time.Minute)}
	budget := api.Pause{By: api.PauseByBudget, Since: now, Class: "budget", Error: "budget $5 reached ($5.0001 spent: pipeline $5, DynamoDB $0.0001; Lambda and SQS not counted)"}
	submitting := b
	submitting.Status, submitting.ItemCount = api.StatusSubmitting, 0
	refused := submitting
	refused.Status, refused.Refusal = api.StatusRefused, &api.SubmitRefusal{Code: api.RefusalInvalid, Message: "line 4: not valid JSON", Line: 4}
	refusedEvent := ledger.StateChangeOf(refused, api.ChangeRefused, now, now)
	refusedEvent.Refusal = refused.Refusal
	failed := b
	failed.Status = api.StatusFinalizeFailed
	failedEvent := ledger.StateChangeOf(failed, api.ChangeFinished, now, now)
	failedEvent.Verdict, failedEvent.Failure = api.StatusFinalizeFailed, "write report: AccessDenied"
	sampled := b
	sampled.Sample, sampled.ItemCount = 200, 20000
	est := &api.SampleEstimate{MadeAt: now, Items: 20000, SampleItems: 200, Failed: 4, FailureRate: 0.02, FailureLow: 0.0078, FailureHigh: 0.0503,
		ProjectedFailures: 400, SampleUSD: 2.0005, CostUSD: 200.05, PipelineUSD: 200, InfraUSD: 0.05, ProjectedCost: pipeline.CostSum{},
		SampleSeconds: 40.125, ItemsPerSecond: 24.922, Seconds: 795, Pace: "the sample's pace (4.98 items/s)"}
	for i := range api.MaxCensusCostNames + 20 {
		est.ProjectedCost[fmt.Sprintf("cost-%03d", i)] = decimal.NewFromInt(int64(i))
	}
	decidedAt := now.Add(90*time.Second + 123456789)
	awaiting := ledger.ApprovalChangeOf(sampled, *api.ApprovalOf(200, "", "", time.Time{}, est), now)
	approved := ledger.ApprovalChangeOf(sampled, *api.ApprovalOf(200, api.ApprovalApproved, api.DecidedByCaller, decidedAt, est), decidedAt)
	early := ledger.ApprovalChangeOf(sampled, *api.ApprovalOf(200, api.ApprovalApproved, api.DecidedByCaller, decidedAt, nil), decidedAt)
	if awaiting.Change != api.ChangeAwaitingApproval || awaiting.EventID != "b1:1:awaiting_approval:"+strconv.FormatInt(now.UnixMilli(), 10) ||
		approved.Change != api.ChangeApproved || approved.EventID != "b1:1:approved:"+strconv.FormatInt(decidedAt.UnixMilli(), 10) ||
		!approved.Approval.DecidedAt.Equal(decidedAt.Truncate(time.Millisecond)) || approved.Approval.DecidedBy != api.DecidedByCaller {
		t.Errorf("approval changes %+v, %+v: want their ids from made_at and the decision's time, to the millisecond", awaiting, approved)
	}
	if n := len(awaiting.Approval.Estimate.ProjectedCost); n != api.MaxCensusCostNames || len(est.ProjectedCost) != api.MaxCensusCostNames+20 {
		t.Errorf("projected costs: %d names in the event, %d in the estimate; want %d and the estimate unchanged", n, len(est.ProjectedCost), api.MaxCensusCostNames)
	}
	valid := map[string]api.StateChangeEvent{
		"awaiting_approval":                awaiting,
		"approved":                         approved,
		"approved by auto_approve":         ledger.ApprovalChangeOf(sampled, *api.ApprovalOf(200, api.ApprovalApproved, api.DecidedByAuto, now, est), now),
		"approved before the sample's end": early,
		"submitted (inline)":               ledger.StateChangeOf(b, api.ChangeSubmitted, now, now),
		"submitted (S3 source)":            ledger.StateChangeOf(submitting, api.ChangeSubmitted, now, now),
		"running":                          ledger.StateChangeOf(b, api.ChangeRunning, now, now),
		"paused":                           ledger.PauseChangeOf(b, p, true, api.PauseByOutage, now),
		"unpaused":                         ledger.PauseChangeOf(b, p, false, api.PauseByCaller, now),
		"paused at the budget":             ledger.PauseChangeOf(b, budget, true, api.PauseByBudget, now),
		"unpaused by a raise":              ledger.PauseChangeOf(b, budget, false, api.PauseByBudget, now),
		"refused":                          refusedEvent,
		"finalize_failed":                  failedEvent,
	}
	for name, e := range valid {
		if err := s.ValidateValue(e); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	// What the schema refuses: a field it does not name, a finished run
	// without a verdict, an unknown change, an estimate's change without
	// its estimate, an approval without who decided.
	extra, _ := json.Marshal(valid["running"])
	extra = []byte(strings.Replace(string(extra), `{`, `{"undocumented":1,`, 1))
	noVerdict := failedEvent
	noVerdict.Verdict = ""
	unknown := valid["running"]
	unknown.Change = "resumed"
	noEstimate := awaiting
	noEstimate.Approval = &api.Approval{State: api.ApprovalAwaiting, Sample: 200}
	noDecider := approved
	noDecider.Approval = &api.Approval{State: api.ApprovalApproved, Sample: 200, DecidedAt: decidedAt, Estimate: est}
	for name, d := range map[string]any{"an undocumented field": json.RawMessage(extra), "no verdict": noVerdict, "an unknown change": unknown,
		"awaiting_approval without its estimate": noEstimate, "approved without decided_by": noDecider} {
		if err := s.ValidateValue(d); err == nil {
			t.Errorf("%s: valid, want refused", name)
		}
	}
}
