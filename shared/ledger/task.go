package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// ErrTaskGone is Tasks' answer for a task token that Step Functions no
// longer waits on (TaskTimedOut, TaskDoesNotExist, InvalidToken): it was
// answered already, or its task timed out or its execution ended. An end
// answered twice (a call died before marking it) gets it the second time.
var ErrTaskGone = errors.New("task token no longer awaited")

// TaskRun is the run whose end answers a batch's task token: the first,
// the run its submit started. Later runs (resume, correct, rerun) carry
// none.
const TaskRun = 1

// TaskEnd answers b's task token, if it has one and run is TaskRun, with
// how the run ended: SendTaskSuccess with out when failName is empty,
// else SendTaskFailure with failName and cause (cut to
// api.MaxTaskCauseBytes). ErrTaskGone is logged and not returned (the
// token was answered, or nobody waits on it any more); other errors are
// returned.
func TaskEnd(ctx context.Context, tasks Tasks, log interface {
	Warn(string, ...any)
}, b Batch, run int, out *api.TaskOutput, failName, cause string) error {
	if tasks == nil || b.TaskToken == "" || run != TaskRun {
		return nil
	}
	var err error
	if failName == "" {
		body, merr := json.Marshal(out)
		if merr != nil {
			return merr
		}
		err = tasks.Succeed(ctx, b.TaskToken, body)
	} else {
		err = tasks.Fail(ctx, b.TaskToken, failName, pipeline.CutText(cause, api.MaxTaskCauseBytes))
	}
	if errors.Is(err, ErrTaskGone) {
		log.Warn("task token no longer awaited", "batch_id", b.ID, "run", run, "error", err.Error())
		return nil
	}
	if err != nil {
		return fmt.Errorf("answer task token of %s run %d: %w", b.ID, run, err)
	}
	return nil
}

// TaskBeat sends b's task token a heartbeat (SendTaskHeartbeat) when the
// task asks for them: b has a token and a TaskHeartbeat, its run TaskRun
// has not ended (submitting, running or paused) and no heartbeat found
// the task gone. The ticks call it for every batch they visit, so the
// task hears from it once per tick (api.MinTaskHeartbeatSeconds is twice
// the default tick). ErrTaskGone (the task timed out, its execution ended
// or the token was answered) marks the batch (gone.SetTaskGone) and is
// logged once, and the run goes on: a heartbeat never changes a run or an
// item. It reports whether a heartbeat was taken; other errors are
// returned for the caller to log (the next tick sends again).
func TaskBeat(ctx context.Context, tasks Tasks, gone interface {
	SetTaskGone(ctx context.Context, id string) error
}, log interface {
	Warn(string, ...any)
}, b Batch) (bool, error) {
	if tasks == nil || b.TaskToken == "" || b.TaskHeartbeat <= 0 || b.TaskGone || b.Run != TaskRun || b.Status.Finished() {
		return false, nil
	}
	err := tasks.Heartbeat(ctx, b.TaskToken)
	if errors.Is(err, ErrTaskGone) {
		if serr := gone.SetTaskGone(ctx, b.ID); serr != nil {
			return false, fmt.Errorf("mark task gone of %s: %w", b.ID, serr)
		}
		log.Warn("task no longer awaited; heartbeats stopped, the run goes on", "batch_id", b.ID, "error", err.Error())
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("heartbeat task token of %s: %w", b.ID, err)
	}
	return true, nil
}
