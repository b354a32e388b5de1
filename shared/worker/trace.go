package worker

import (
	"context"
	"errors"

	"github.com/bulkrun/bulkrun/internal/tracing"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// traceAttempt starts the span of the attempt of item s (its attempt
// number s.Attempt) in delivery d, a child of the batch's trace context
// (ledger.Batch.TraceParent; a batch stored before traces: none, the
// attempt's span a root); ctx carries it on to the pipeline's call even
// without an exporter. end ends it with the attempt's ending in r.
func (w *Worker) traceAttempt(ctx context.Context, b ledger.Batch, s ledger.ItemState, d Delivery) (_ context.Context, end func(r *itemRun)) {
	ctx = tracing.Resume(ctx, tracing.Context{Parent: b.TraceParent, State: b.TraceState})
	ctx, done := w.Traces.StartAttempt(ctx, tracing.Attempt{BatchID: b.ID, Key: s.Key, RunID: ledger.RunIDOf(b.ID, s.Key, s.Revision),
		Run: b.Run, Attempt: s.Attempt, Pipeline: b.Pipeline, MessageID: d.MessageID})
	return ctx, func(r *itemRun) {
		switch {
		case !r.started:
			done("", nil) // given back before its call
		case r.state.Outcome.Terminal() || r.state.Outcome.Held():
			var err error
			if r.state.Error != "" {
				err = errors.New(r.state.Error)
			}
			done(string(r.state.Outcome), err)
		case r.ending.Retry():
			done("retry", errors.New(r.ending.Error))
		default:
			done(string(r.state.Outcome), nil)
		}
	}
}
