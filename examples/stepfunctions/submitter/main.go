// Command submitter is the Lambda function of the example state machine
// (examples/stepfunctions): its Task state invokes it with
// `lambda:invoke.waitForTaskToken`, and it submits the batch to bulkrun's
// API (SigV4, IAM authorization, through shared/client) with the task's
// token, then returns at once. The task waits for bulkrun's answer:
// SendTaskSuccess when the batch's first run completed or exceeded its
// threshold, SendTaskFailure (bulkrun.Cancelled, bulkrun.Refused,
// bulkrun.FinalizeFailed) otherwise (docs/api.md, "Step Functions").
//
// Its event (the Task state's Payload):
//
//	{"task_token": "<$$.Task.Token>", "execution": "<$$.Execution.Name>",
//	 "request": {…an api.SubmitRequest: pipeline, source, threshold, …}}
//
// The batch id is the request's batch_id, else the execution's name: a
// retried invocation (the state's Retry on Lambda's service errors)
// submits the same request and token again, which bulkrun answers with
// the same batch (a submit is idempotent by batch id). The request's
// task_heartbeat_seconds, when unset, is BATCH_HEARTBEAT_SECONDS (the
// state's HeartbeatSeconds). It returns {"batch_id", "status"}; Step
// Functions ignores a waitForTaskToken function's result.
//
// Environment (set by the workflow construct): BATCH_API_ID,
// BATCH_API_STAGE and BATCH_API_URL (bulkrun's REST API: its id, stage
// and invoke URL; with AWS_ENDPOINT_URL set, as on the emulator, the
// client calls {endpoint}/restapis/{id}/{stage}/_user_request_ instead),
// BATCH_HEARTBEAT_SECONDS.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/aws/aws-lambda-go/lambda"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/config"
)

// The environment the construct sets (workflow.New).
const (
	EnvAPIID            = "BATCH_API_ID"
	EnvAPIStage         = "BATCH_API_STAGE"
	EnvAPIURL           = "BATCH_API_URL"
	EnvHeartbeatSeconds = "BATCH_HEARTBEAT_SECONDS"
)

// AppID is the AWS SDK application id of the function's configuration:
// not a bulkrun function's ("bulkrun-{function}"), so bulkrun's
// IAM-checked lane does not take its calls for bulkrun's own.
const AppID = "batch-workflow"

// Event is the Task state's payload.
type Event struct {
	TaskToken string            `json:"task_token"`
	Execution string            `json:"execution"`
	Request   api.SubmitRequest `json:"request"`
}

// Answer is what the function returns.
type Answer struct {
	BatchID string     `json:"batch_id"`
	Status  api.Status `json:"status"`
}

// Submitter submits batches through one API client.
type Submitter struct {
	API              *client.Client
	HeartbeatSeconds int
}

// Handle submits e.Request with e.TaskToken. A request that already
// names a task token is refused: the token is the state's.
func (s *Submitter) Handle(ctx context.Context, e Event) (Answer, error) {
	if e.TaskToken == "" {
		return Answer{}, errors.New("event has no task_token: invoke this function from a Task state with .waitForTaskToken and \"task_token.$\": \"$$.Task.Token\"")
	}
	req := e.Request
	if req.TaskToken != "" {
		return Answer{}, errors.New("request.task_token is set: the Task state's token is the one bulkrun answers")
	}
	req.TaskToken = e.TaskToken
	if req.BatchID == "" {
		req.BatchID = e.Execution
	}
	if req.TaskHeartbeatSeconds == 0 {
		req.TaskHeartbeatSeconds = s.HeartbeatSeconds
	}
	v, err := s.API.Submit(ctx, req)
	if err != nil {
		return Answer{}, err
	}
	return Answer{BatchID: v.ID, Status: v.Status}, nil
}

// New builds a Submitter from the environment.
func New(ctx context.Context) (*Submitter, error) {
	c, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithAppID(AppID))
	if err != nil {
		return nil, err
	}
	stack := client.Stack{config.OutputAPIID: os.Getenv(EnvAPIID), config.OutputAPIStage: os.Getenv(EnvAPIStage), config.OutputAPIURL: os.Getenv(EnvAPIURL)}
	api, err := client.New(c, stack)
	if err != nil {
		return nil, err
	}
	s := &Submitter{API: api}
	if v := os.Getenv(EnvHeartbeatSeconds); v != "" {
		if s.HeartbeatSeconds, err = strconv.Atoi(v); err != nil || s.HeartbeatSeconds < 0 {
			return nil, fmt.Errorf("%s: %q is not a whole number of seconds", EnvHeartbeatSeconds, v)
		}
	}
	return s, nil
}

func main() {
	s, err := New(context.Background())
	if err != nil {
		b, _ := json.Marshal(map[string]string{"error": err.Error()})
		fmt.Fprintln(os.Stderr, string(b))
		os.Exit(1)
	}
	lambda.Start(s.Handle)
}
