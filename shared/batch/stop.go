package batch

import (
	"context"
	"fmt"
)

// stopRun marks run of b as stopping with status and detail (Store.Stop),
// with how far the run had got by its counters (one Progress read, O(counter
// shards)): the items that had ended succeeded, failed or quarantined, and
// the failures among them. Items in flight when the stop is marked finish
// after it; the report tells how many (StopSummary). A counter read that
// fails marks the stop without counts (the stop matters more than them).
// ErrConflict as Store.Stop.
func stopRun(ctx context.Context, store Store, b Batch, run int, status Status, detail string) error {
	m := StopMark{BatchID: b.ID, Run: run, Status: status, Detail: detail}
	if p, err := store.Progress(ctx, b.ID, run, max(1, b.CounterShards)); err == nil {
		m.Ran = p.Done - p.ByOutcome[OutcomeCancelled]
		m.Failures = p.ByOutcome[OutcomeFailed] + p.ByOutcome[OutcomeQuarantined]
	}
	return store.Stop(ctx, m)
}

// StopSummary is what a stopped run's report says of its stop: the status
// it stopped with and why, the items that had ended (succeeded, failed or
// quarantined) and failed when it was marked, and the items that were
// already in flight then and finished after it, and failed. So "stopping:
// threshold_exceeded (251 failures of 5000 items)" and a final census of
// 256 failed agree: 5 items in flight at the stop failed after it.
type StopSummary struct {
	Status            Status `json:"status"`
	Detail            string `json:"detail,omitempty"`
	RanAtStop         int64  `json:"ran_at_stop"`
	FailuresAtStop    int64  `json:"failures_at_stop"`
	FinishedAfterStop int64  `json:"finished_after_stop"`
	FailuresAfterStop int64  `json:"failures_after_stop"`
}

// StopSummaryOf is b's stop as the report tells it with the run's final
// census c; nil when the run was not stopped.
func StopSummaryOf(b Batch, c Census) *StopSummary {
	if b.Stop == "" {
		return nil
	}
	failures := c.Failed + c.Quarantined
	return &StopSummary{
		Status: b.Stop, Detail: b.StopDetail, RanAtStop: b.StopRan, FailuresAtStop: b.StopFailures,
		FinishedAfterStop: max(0, c.Succeeded+failures-b.StopRan),
		FailuresAfterStop: max(0, failures-b.StopFailures),
	}
}

// Text is the stop in one line, as the CLI and the console print it:
// "threshold_exceeded (251 failures of 5000 items); 5 items already in
// flight finished after the stop, 5 of them failed".
func (s StopSummary) Text() string {
	return fmt.Sprintf("%s (%s); %d items already in flight finished after the stop, %d of them failed",
		s.Status, s.Detail, s.FinishedAfterStop, s.FailuresAfterStop)
}
