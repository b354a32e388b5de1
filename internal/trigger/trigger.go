// Package trigger is the Lambda adapter of ledger.Trigger and
// submit.Handoff: it invokes the finalize function, or the submit function
// itself, asynchronously (InvocationType Event).
package trigger

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/bulkrun/bulkrun/internal/awsfault"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Lambda triggers finalize by an asynchronous invocation. Safe for
// concurrent use.
type Lambda struct {
	client   *lambda.Client
	function string
}

var _ ledger.Trigger = (*Lambda)(nil)

// New returns a trigger invoking function (name or ARN). It uses a copy
// of client whose errors are classified by awsfault's table
// (awsfault.Tag: throttling, 5xx and no answer past the SDK's tries are
// ledger.ErrUnavailable); client is not changed.
func New(client *lambda.Client, function string) *Lambda {
	client = lambda.New(client.Options(), func(o *lambda.Options) {
		o.APIOptions = append(slices.Clip(o.APIOptions), awsfault.Tag("lambda"))
	})
	return &Lambda{client: client, function: function}
}

// Finalize invokes finalize for (batchID, run) asynchronously. Lambda
// retries asynchronous invocations that fail (twice by default); finalize
// is idempotent.
func (l *Lambda) Finalize(ctx context.Context, batchID string, run int) error {
	payload, err := json.Marshal(ledger.FinalizeEvent{BatchID: batchID, Run: run})
	if err != nil {
		return err
	}
	_, err = l.client.Invoke(ctx, &lambda.InvokeInput{FunctionName: &l.function, InvocationType: types.InvocationTypeEvent, Payload: payload})
	if err != nil {
		return fmt.Errorf("invoke %s for %s run %d: %w", l.function, batchID, run, err)
	}
	return nil
}

// Continue invokes finalize for (batchID, run) asynchronously as link
// chain of a chain of chunks (ledger.FinalizeEvent.Chain): finalize invoking itself.
func (l *Lambda) Continue(ctx context.Context, batchID string, run, chain int) error {
	payload, err := json.Marshal(ledger.FinalizeEvent{BatchID: batchID, Run: run, Chain: chain})
	if err != nil {
		return err
	}
	_, err = l.client.Invoke(ctx, &lambda.InvokeInput{FunctionName: &l.function, InvocationType: types.InvocationTypeEvent, Payload: payload})
	if err != nil {
		return fmt.Errorf("invoke %s to go on with %s run %d: %w", l.function, batchID, run, err)
	}
	return nil
}

// StartFinalizePart invokes finalize asynchronously for part `part`
// (0-based) of plan `plan` of (batchID, run): finalize invoking itself,
// one invocation per part, all at once. chain is the part's place in its
// chain of calls (ledger.FinalizeEvent.Chain): one more than the call
// that starts it — 1 from a trigger or the tick, more from a call deep in
// a chain that starts a lost part again — and the part that merges goes
// on from there, so that finalize.MaxFinalizeChain bounds what Lambda's
// recursive loop detection counts. Lambda retries a failed invocation
// twice; a part lost for good is started again by the run's next
// finalize call once its mark has passed.
func (l *Lambda) StartFinalizePart(ctx context.Context, batchID string, run, plan, part, chain int) error {
	payload, err := json.Marshal(ledger.FinalizeEvent{BatchID: batchID, Run: run, Chain: chain, Part: part + 1, Plan: plan})
	if err != nil {
		return err
	}
	_, err = l.client.Invoke(ctx, &lambda.InvokeInput{FunctionName: &l.function, InvocationType: types.InvocationTypeEvent, Payload: payload})
	if err != nil {
		return fmt.Errorf("invoke %s for part %d of %s run %d: %w", l.function, part, batchID, run, err)
	}
	return nil
}

// StartFinalizeRange invokes finalize asynchronously for range rng
// (0-based) of the merge planned by checkpoint cp of (batchID, run),
// split by key ranges (finalize.FinalizeRanges): finalize invoking
// itself, one invocation per range, all at once, chain as for a part.
// A range lost for good is started again by the run's next finalize
// call once its mark has passed.
func (l *Lambda) StartFinalizeRange(ctx context.Context, batchID string, run, cp, rng, chain int) error {
	payload, err := json.Marshal(ledger.FinalizeEvent{BatchID: batchID, Run: run, Chain: chain, Range: rng + 1, Plan: cp})
	if err != nil {
		return err
	}
	_, err = l.client.Invoke(ctx, &lambda.InvokeInput{FunctionName: &l.function, InvocationType: types.InvocationTypeEvent, Payload: payload})
	if err != nil {
		return fmt.Errorf("invoke %s for range %d of %s run %d: %w", l.function, rng, batchID, run, err)
	}
	return nil
}

// StartSubmit invokes the function asynchronously with the internal event
// ledger.SubmitEvent ({"bulkrun_submit": batchID}): the submit function
// hands the background read of an accepted batch to itself. Lambda queues
// the event durably and retries a failed invocation twice (Lambda
// developer guide, "Asynchronous invocation"); the submit tick hands off
// again after that.
func (l *Lambda) StartSubmit(ctx context.Context, batchID string) error {
	payload, err := json.Marshal(ledger.SubmitEvent{BatchID: batchID})
	if err != nil {
		return err
	}
	_, err = l.client.Invoke(ctx, &lambda.InvokeInput{FunctionName: &l.function, InvocationType: types.InvocationTypeEvent, Payload: payload})
	if err != nil {
		return fmt.Errorf("invoke %s to read the source of %s: %w", l.function, batchID, err)
	}
	return nil
}

// StartPart invokes the function asynchronously with the internal event
// ledger.PartEvent: the submit function hands one step of a source read in
// parts to itself (a part's count or read, a key partition's check). Lambda queues
// the event and retries a failed invocation twice; a step lost for good
// is handed off again when the submit tick resumes the read.
func (l *Lambda) StartPart(ctx context.Context, ev ledger.PartEvent) error {
	payload, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	_, err = l.client.Invoke(ctx, &lambda.InvokeInput{FunctionName: &l.function, InvocationType: types.InvocationTypeEvent, Payload: payload})
	if err != nil {
		return fmt.Errorf("invoke %s for the %s step %d of %s: %w", l.function, ev.Step, ev.Index, ev.BatchID, err)
	}
	return nil
}
