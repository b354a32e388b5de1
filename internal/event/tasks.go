package event

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/bulkrun/bulkrun/internal/awsfault"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Tasks answers Step Functions task tokens (ledger.Tasks) with
// SendTaskSuccess and SendTaskFailure, and sends their heartbeats with
// SendTaskHeartbeat. Safe for concurrent use.
type Tasks struct {
	client *sfn.Client
}

var _ ledger.Tasks = (*Tasks)(nil)

// NewTasks returns Tasks calling Step Functions through a copy of client
// whose errors are classified by awsfault's table (awsfault.Tag:
// throttling, 5xx and no answer past the SDK's tries are
// ledger.ErrUnavailable); client is not changed.
func NewTasks(client *sfn.Client) *Tasks {
	client = sfn.New(client.Options(), func(o *sfn.Options) {
		o.APIOptions = append(slices.Clip(o.APIOptions), awsfault.Tag("states"))
	})
	return &Tasks{client: client}
}

// Succeed calls SendTaskSuccess with output (JSON, at most 256 KiB).
func (t *Tasks) Succeed(ctx context.Context, token string, output []byte) error {
	_, err := t.client.SendTaskSuccess(ctx, &sfn.SendTaskSuccessInput{TaskToken: aws.String(token), Output: aws.String(string(output))})
	return taskErr("SendTaskSuccess", err)
}

// Fail calls SendTaskFailure with the error name and cause.
func (t *Tasks) Fail(ctx context.Context, token, name, cause string) error {
	_, err := t.client.SendTaskFailure(ctx, &sfn.SendTaskFailureInput{TaskToken: aws.String(token), Error: aws.String(name), Cause: aws.String(cause)})
	return taskErr("SendTaskFailure", err)
}

// Heartbeat calls SendTaskHeartbeat.
func (t *Tasks) Heartbeat(ctx context.Context, token string) error {
	_, err := t.client.SendTaskHeartbeat(ctx, &sfn.SendTaskHeartbeatInput{TaskToken: aws.String(token)})
	return taskErr("SendTaskHeartbeat", err)
}

// taskErr wraps ledger.ErrTaskGone around Step Functions' answers for a
// token no longer awaited: TaskTimedOut (answered already, or timed out),
// TaskDoesNotExist and InvalidToken (AWS Step Functions API Reference,
// "SendTaskSuccess" and "SendTaskHeartbeat", Errors).
func taskErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var timedOut *types.TaskTimedOut
	var missing *types.TaskDoesNotExist
	var invalid *types.InvalidToken
	if errors.As(err, &timedOut) || errors.As(err, &missing) || errors.As(err, &invalid) {
		return fmt.Errorf("%s: %w: %w", op, ledger.ErrTaskGone, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}
