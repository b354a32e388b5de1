package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/bulkrun/bulkrun/shared/api"

	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/spf13/cobra"

	"github.com/bulkrun/bulkrun/shared/config"
)

// sweepCmd runs the retention sweep now: one synchronous invocation of the
// stack's sweep function (stack output SweepFunctionName) with the payload
// {}, as its hourly schedule sends. It deletes only batches whose
// retention has passed, so it is safe to run at any time, and again.
// Needs lambda:InvokeFunction on the sweep function.
func (a *app) sweepCmd() *cobra.Command {
	return a.simple("sweep", "Run the retention sweep now: delete the batches whose retention has passed (as the hourly sweep does)", 0, "no arguments",
		func(ctx context.Context, _ []string) (any, error) {
			fn, err := a.outs.Get(config.OutputSweepFunction)
			if err != nil {
				return nil, err
			}
			out, err := lambda.NewFromConfig(a.aws).Invoke(ctx, &lambda.InvokeInput{FunctionName: &fn,
				InvocationType: types.InvocationTypeRequestResponse, Payload: []byte(`{}`)})
			if err != nil {
				return nil, fmt.Errorf("invoke the sweep function %s: %w", fn, err)
			}
			if out.FunctionError != nil {
				return nil, fmt.Errorf("the sweep function %s failed (%s): %s; its logs say more", fn, *out.FunctionError, out.Payload)
			}
			var res sweepAnswer
			if err := json.Unmarshal(out.Payload, &res); err != nil {
				return nil, fmt.Errorf("the sweep function %s answered %q: %w", fn, out.Payload, err)
			}
			return res, nil
		})
}

// sweepAnswer is the sweep function's counts, as `bulkrun sweep` shows them.
type sweepAnswer api.SweepResult

func (r sweepAnswer) String() string {
	return fmt.Sprintf("swept: %d expired, %d deleted, %d stale markers and %d malformed ones removed, %d failed, %d pending deletion",
		r.Expired, r.Deleted, r.Stale, r.Malformed, r.Failed, r.PendingDeletion)
}

// exit is exit 3 when expired batches are left for the next pass.
func (r sweepAnswer) exit() error {
	if left := r.Failed + r.PendingDeletion; left > 0 {
		return &ExitError{Code: ExitNeedsCheck, Err: fmt.Errorf("sweep: %s not deleted yet (answering 404 expired already): run bulkrun sweep again, or the hourly sweep finishes the deletion; the sweep function's logs name the ids", api.Count(left, "expired batch"))}
	}
	return nil
}
