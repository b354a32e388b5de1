// Package lambdafn is the built-in pipeline "lambda": it invokes a Lambda
// function, in any language, once per item attempt (synchronously,
// InvocationType RequestResponse) and maps its answer to the item's
// outcome. The request and answer JSON are versioned; this is version 1
// (RequestVersion).
//
// # Options
//
// The batch's pipeline options (an unknown option is an error):
//
//	{"function": "score", "params": {"model": "v2"}}
//
// function is required: a function name or ARN (config.CheckLambdaFunction)
// that the stack allow-lists (config.EnvLambdaFunctions, the Runner's
// LambdaFunctions prop). A name matches an allow-listed ARN of that name
// and an ARN matches an allow-listed name of the same function name, so
// either form may be used; the stack grants lambda:InvokeFunction on
// exactly the allow-listed functions. params is any JSON, passed on as is
// (default null).
//
// # Request (the function's event)
//
//	{
//	  "version": 1,
//	  "batch_id": "orders-2026-11-30",
//	  "key": "order-17",
//	  "run_id": "5f0c…",           hex SHA-256 of "{batch id}/{key}": the same on every attempt and run
//	  "attempt": 1,                 from 1
//	  "input": {"order_id": 17},    the item's input as in the manifest
//	  "headers": {"Authorization": "…"},   headers given at submit, secret references resolved ({} when none)
//	  "params": {"model": "v2"}     the options' params (null when none)
//	}
//
// The function should be idempotent per run_id: an attempt whose outcome
// was not recorded (the item function died after the call) is run again
// with the same run_id and attempt + 1.
//
// # Answer (the function's result)
//
// A result payload that is a JSON object:
//
//	{"output": {"score": 0.92}, "cost": {"calls": 1, "tokens": 812}}
//
// output is the item's output (any JSON; null when absent), cost its cost
// records (name → number; none when absent). An answer may also carry an
// error instead of an output, which lets the function report what the
// failed attempt cost:
//
//	{"error": {"class": "permanent", "message": "order 17 has no lines"}, "cost": {"calls": 1}}
//
// class is "permanent" (the item fails, never retried), "quarantine" (set
// aside until released) or "transient" (retried with backoff); message is
// the error text. An answer may instead suspend the item (pipeline.Suspend):
//
//	{"suspend": {"reason": "awaiting approval", "wake_at": "2026-12-03T10:00:00Z", "token": "t-17"}}
//
// reason required, wake_at (RFC 3339) and token optional; the attempt
// after a signal carries the signal's payload in the event's "signal".
// "version", when present, must be 1. Any other member, or
// a result that is not a JSON object, fails the item permanently
// ([ErrBadAnswer]): the function breaks the contract, and a retry would
// too.
//
// # Function errors
//
// A function that raises or returns an error (Lambda's X-Amz-Function-Error,
// with the payload {"errorType", "errorMessage", …}) is classified by its
// errorType:
//
//   - the Lambda service's and runtimes' own error types that fail the
//     same way every time are permanent, naming the type (awsfault.Table's
//     function errors: Function.ResponseSizeTooLarge, an answer over 6 MB;
//     Runtime.HandlerNotFound, Runtime.ImportModuleError,
//     Runtime.UserCodeSyntaxError, Runtime.MalformedHandlerName,
//     Runtime.InvalidEntrypoint, Runtime.MarshalError,
//     Runtime.UnmarshalError; Runtime.ExitError when the runtime's process
//     exited by itself, "exit status N"): retrying them would only use the
//     item's attempts (AWS Lambda developer guide, "Troubleshoot
//     invocation issues in Lambda" and "Troubleshoot execution issues in
//     Lambda");
//   - otherwise by its last dot-separated part, so that Python's class
//     name, Java's qualified class name and Go's type name all work:
//     PermanentErrorType ("PermanentError") is permanent,
//     QuarantineErrorType ("QuarantineError") quarantine, anything else
//     ("ValueError", "Sandbox.Timedout", Runtime.ExitError by a signal,
//     …) transient.
//
// # Invoke errors
//
// Lambda's own refusals, from the Invoke call ([InvokeError]), are
// classified by awsfault.Table (docs/design/errors.md, from the Invoke API
// reference): throttling and capacity, and a function not ready or being
// updated (429 TooManyRequestsException, EC2ThrottledException,
// ENILimitReachedException, SubnetIPAddressLimitReachedException,
// ResourceNotReadyException, ResourceConflictException), are a
// *pipeline.ThrottledError, which waits without using an attempt; 5xx
// ServiceException, EC2UnexpectedException, the EFS errors, timeouts and
// lost connections are transient; what fails the same way every time
// (ResourceNotFoundException, AccessDeniedException,
// RequestTooLargeException and RequestEntityTooLargeException: a request
// over 6 MB, InvalidRequestContentException, InvalidRuntimeException, the
// KMS* errors of the function's environment, …) is permanent, naming the
// function. An unknown code is classified by its status.
package lambdafn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bulkrun/bulkrun/internal/awsfault"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Name is the name the pipeline is registered under.
const Name = "lambda"

// RequestVersion is the version of the request and answer JSON.
const RequestVersion = 1

// The errorType names (their last dot-separated part) that classify a
// function error as permanent or quarantine.
const (
	PermanentErrorType  = "PermanentError"
	QuarantineErrorType = "QuarantineError"
)

// Answer error classes ("error": {"class": …}).
const (
	ClassPermanent  = "permanent"
	ClassQuarantine = "quarantine"
	ClassTransient  = "transient"
)

// MaxPayloadBytes is the largest request Invoke takes synchronously:
// 6 MB, 6,291,456 bytes (AWS Lambda quotas, "Invocation payload (request
// and response)", 6 MB each for synchronous invocations,
// https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
// A larger request (an item whose input and headers make it so) fails
// permanently before the call, naming the item and the limit.
const MaxPayloadBytes = 6 << 20

// Errors of the pipeline (see the package comment for their class).
var (
	// ErrTooLarge: the request is over MaxPayloadBytes.
	ErrTooLarge = errors.New("lambda: request too large")
	// ErrInvalidOptions: the options are not {"function": …, "params": …}
	// with an allow-listed function.
	ErrInvalidOptions = errors.New("lambda: invalid pipeline options")
	// ErrBadAnswer: the function's result is not an answer of version 1.
	ErrBadAnswer = errors.New("lambda: the function's answer breaks the contract")
	// ErrNoInvoker: the pipeline was built without a Lambda client.
	ErrNoInvoker = errors.New("lambda: no Lambda client")
)

// Request is the function's event, version 1 (see the package comment).
type Request struct {
	Version int               `json:"version"`
	BatchID string            `json:"batch_id"`
	Key     string            `json:"key"`
	RunID   string            `json:"run_id"`
	Attempt int               `json:"attempt"`
	Input   json.RawMessage   `json:"input"`
	Headers map[string]string `json:"headers"`
	Params  json.RawMessage   `json:"params"`
	// Signal is the payload of the signal that resumed the suspended
	// item (pipeline.Request.Signal), on that attempt only.
	Signal json.RawMessage `json:"signal,omitempty"`
}

// Answer is the function's result payload, version 1.
type Answer struct {
	Version int             `json:"version,omitempty"`
	Output  json.RawMessage `json:"output,omitempty"`
	Cost    pipeline.Cost   `json:"cost,omitempty"`
	Error   *AnswerError    `json:"error,omitempty"`
	// Suspend, instead of an output or an error, suspends the item
	// (pipeline.SuspendError).
	Suspend *AnswerSuspend `json:"suspend,omitempty"`
}

// AnswerSuspend is an answer's suspension: {"reason": "…", "wake_at":
// "2026-12-03T10:00:00Z", "token": "…"}, reason required, the others
// optional (wake_at RFC 3339).
type AnswerSuspend struct {
	Reason string    `json:"reason"`
	WakeAt time.Time `json:"wake_at,omitzero"`
	Token  string    `json:"token,omitempty"`
}

// AnswerError is an error the function answers instead of an output.
type AnswerError struct {
	Class   string `json:"class"`
	Message string `json:"message"`
}

// FunctionError is Lambda's payload of a function error.
type FunctionError struct {
	ErrorType    string `json:"errorType"`
	ErrorMessage string `json:"errorMessage"`
}

// Result is one Invoke's outcome as the Invoker reports it.
type Result struct {
	// Payload is the function's result, or its error payload when
	// FunctionError is set.
	Payload []byte
	// FunctionError is Lambda's X-Amz-Function-Error ("Unhandled",
	// "Handled"), empty when the function returned normally.
	FunctionError string
}

// InvokeError is Lambda refusing or failing an Invoke: Status is the HTTP
// status (0 when no answer came: a timeout, a lost connection), Code the
// error code (e.g. "TooManyRequestsException").
type InvokeError struct {
	Status int
	Code   string
	Err    error
}

func (e *InvokeError) Error() string { return e.Err.Error() }
func (e *InvokeError) Unwrap() error { return e.Err }

// Transient reports whether a retry may succeed (Class is not
// ClassPermanent).
func (e *InvokeError) Transient() bool { return e.Class() != ClassPermanent }

// Kinds of Invoke errors (InvokeError.Class).
const (
	ClassThrottled = "throttled" // Lambda's rate or capacity: back off
)

// Class is the kind of the Invoke error, from its row of awsfault.Table
// (by its code and status): ClassThrottled for class backoff (and pause:
// the item function's own credentials, not the item's fault),
// ClassTransient for class retry, ClassPermanent for permanent and
// conflict; an error no row names by its status: no answer (0) or a 5xx
// is transient, 429 throttled, any other 4xx permanent.
func (e *InvokeError) Class() string {
	message := ""
	if e.Err != nil {
		message = e.Err.Error()
	}
	if r, ok := awsfault.ClassifyCode("lambda", "Invoke", e.Code, message, e.Status); ok {
		switch r.Class {
		case ledger.FaultBackoff, ledger.FaultPause:
			return ClassThrottled
		case ledger.FaultRetry:
			return ClassTransient
		}
		return ClassPermanent
	}
	switch {
	case e.Status == 429:
		return ClassThrottled
	case e.Status == 0 || e.Status >= 500:
		return ClassTransient
	}
	return ClassPermanent
}

// Invoker invokes a function synchronously with payload. An error is an
// *InvokeError (or the context's error). Implementations are safe for
// concurrent use.
type Invoker interface {
	Invoke(ctx context.Context, function string, payload []byte) (Result, error)
}

// Pipeline is the "lambda" pipeline. Safe for concurrent use.
type Pipeline struct {
	invoker Invoker
	allowed []string
}

var (
	_ pipeline.Pipeline         = (*Pipeline)(nil)
	_ pipeline.OptionsValidator = (*Pipeline)(nil)
)

// New returns the pipeline invoking through invoker (nil: every item fails
// permanently with ErrNoInvoker; submit, which only checks options, needs
// none) the functions of allowed (config.EnvLambdaFunctions entries).
func New(invoker Invoker, allowed []string) *Pipeline {
	return &Pipeline{invoker: invoker, allowed: slices.Clone(allowed)}
}

// options are the batch's pipeline options.
type options struct {
	Function string          `json:"function"`
	Params   json.RawMessage `json:"params"`
}

func (p *Pipeline) parse(raw json.RawMessage) (options, error) {
	var o options
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return o, fmt.Errorf("%w: want {\"function\": NAME_OR_ARN, \"params\": ANY}: %v", ErrInvalidOptions, err)
	}
	if o.Function == "" {
		return o, &pipeline.OptionError{Option: "function", Err: fmt.Errorf("%w: function is required (a Lambda function name or ARN)", ErrInvalidOptions)}
	}
	if err := config.CheckLambdaFunction(o.Function); err != nil {
		return o, &pipeline.OptionError{Option: "function", Err: fmt.Errorf("%w: function %q: %v", ErrInvalidOptions, o.Function, err)}
	}
	if !p.allows(o.Function) {
		return o, &pipeline.OptionError{Option: "function", Err: fmt.Errorf("%w: %s", ErrInvalidOptions, p.refusal(o.Function))}
	}
	return o, nil
}

// refusal says that function f is not allow-listed, which are, and how
// to allow it: the exact command with the functions allowed now and f
// (the emulator's make deploy, AWS's TARGET=aws), or the construct's
// prop in a CDK app of one's own.
func (p *Pipeline) refusal(f string) string {
	now := "the stack allows none"
	if len(p.allowed) > 0 {
		now = "the stack allows only " + strings.Join(p.allowed, ", ")
	}
	with := strings.Join(append([]string{f}, p.allowed...), ",")
	return fmt.Sprintf("function %q is not allow-listed (%s: its LambdaFunctions, %s); allow it and deploy again: make deploy LAMBDA_FUNCTIONS=%s "+
		"(on AWS: TARGET=aws make deploy LAMBDA_FUNCTIONS=…, with its ARN; in a CDK app of your own: the construct's LambdaFunctions prop)",
		f, now, config.EnvLambdaFunctions, with)
}

// allows reports whether f is allow-listed: equal to an entry, or the
// same function name (with qualifier) when one of the two is an ARN and
// the other a name.
func (p *Pipeline) allows(f string) bool {
	for _, a := range p.allowed {
		if a == f {
			return true
		}
		aARN, fARN := strings.HasPrefix(a, "arn:"), strings.HasPrefix(f, "arn:")
		if aARN != fARN && config.LambdaFunctionName(a) == config.LambdaFunctionName(f) {
			return true
		}
	}
	return false
}

// ValidateOptions checks a batch's options at submit: a *pipeline.OptionError
// naming "function", or ErrInvalidOptions.
func (p *Pipeline) ValidateOptions(raw json.RawMessage) error {
	_, err := p.parse(raw)
	return err
}

// Run invokes the function once with req's Request and maps the answer
// (see the package comment).
func (p *Pipeline) Run(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
	o, err := p.parse(req.Options)
	if err != nil {
		return pipeline.Result{}, pipeline.Permanent(err)
	}
	if p.invoker == nil {
		return pipeline.Result{}, pipeline.Permanent(ErrNoInvoker)
	}
	headers := req.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	params := o.Params
	if len(params) == 0 {
		params = json.RawMessage("null")
	}
	input := req.Input
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	payload, err := json.Marshal(Request{Version: RequestVersion, BatchID: req.BatchID, Key: req.Key, RunID: req.RunID,
		Attempt: req.Attempt, Input: input, Headers: headers, Params: params, Signal: req.Signal})
	if err != nil {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("lambda: %s: request: %w", req.Key, err))
	}
	if len(payload) > MaxPayloadBytes {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("%w: lambda: %s: the request is %d bytes, more than Lambda's %d-byte synchronous payload (lambdafn.MaxPayloadBytes)",
			ErrTooLarge, req.Key, len(payload), MaxPayloadBytes))
	}
	res, err := p.invoker.Invoke(ctx, o.Function, payload)
	if err != nil {
		err = fmt.Errorf("lambda: %s: invoke %s: %w", req.Key, o.Function, err)
		var ie *InvokeError
		if errors.As(err, &ie) && ie.Class() == ClassPermanent {
			return pipeline.Result{}, pipeline.Permanent(err)
		}
		if errors.As(err, &ie) && ie.Class() == ClassThrottled {
			return pipeline.Result{}, pipeline.Throttled("lambda", ie.Code, 0, err)
		}
		return pipeline.Result{}, err
	}
	if res.FunctionError != "" {
		return pipeline.Result{}, functionError(req.Key, o.Function, res)
	}
	return answer(req.Key, o.Function, res.Payload)
}

// functionError classifies a function error by its errorType.
func functionError(key, function string, res Result) error {
	var fe FunctionError
	if err := json.Unmarshal(res.Payload, &fe); err != nil || fe.ErrorType == "" {
		return fmt.Errorf("lambda: %s: %s: function error (%s): %s", key, function, res.FunctionError, pipeline.CutText(string(res.Payload), 1024))
	}
	err := fmt.Errorf("lambda: %s: %s: %s: %s", key, function, fe.ErrorType, fe.ErrorMessage)
	if r, ok := awsfault.ClassifyFunction(fe.ErrorType, fe.ErrorMessage); ok {
		if r.Class == ledger.FaultPermanent {
			return pipeline.Permanent(fmt.Errorf("%w (%s: it fails the same way every time)", err, r.Note))
		}
		return err
	}
	kind := fe.ErrorType
	if i := strings.LastIndex(kind, "."); i >= 0 {
		kind = kind[i+1:]
	}
	switch kind {
	case PermanentErrorType:
		return pipeline.Permanent(err)
	case QuarantineErrorType:
		return pipeline.Quarantine(err)
	}
	return err
}

// answer maps a normal result payload.
func answer(key, function string, payload []byte) (pipeline.Result, error) {
	bad := func(why string) (pipeline.Result, error) {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("%w: %s: %s: %s: %s", ErrBadAnswer, key, function, why, pipeline.CutText(string(payload), 512)))
	}
	trimmed := bytes.TrimSpace(payload)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return bad(`want a JSON object {"output": …, "cost": {…}}`)
	}
	var a Answer
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return bad(err.Error())
	}
	if a.Version != 0 && a.Version != RequestVersion {
		return bad(fmt.Sprintf("version %d, want %d", a.Version, RequestVersion))
	}
	if s := a.Suspend; s != nil {
		if a.Error != nil || len(a.Output) > 0 && string(a.Output) != "null" || s.Reason == "" {
			return bad("a suspend carries a reason, and neither output nor error")
		}
		return pipeline.Result{Cost: a.Cost}, &pipeline.SuspendError{Reason: s.Reason, WakeAt: s.WakeAt, Token: s.Token}
	}
	if a.Error == nil {
		out := a.Output
		if len(out) == 0 {
			out = json.RawMessage("null")
		}
		return pipeline.Result{Output: out, Cost: a.Cost}, nil
	}
	if len(a.Output) > 0 && string(a.Output) != "null" {
		return bad("an answer carries output or error, not both")
	}
	err := fmt.Errorf("lambda: %s: %s: %s", key, function, a.Error.Message)
	res := pipeline.Result{Cost: a.Cost}
	switch a.Error.Class {
	case ClassPermanent:
		return res, pipeline.Permanent(err)
	case ClassQuarantine:
		return res, pipeline.Quarantine(err)
	case ClassTransient:
		return res, err
	}
	return bad(fmt.Sprintf("error class %q, want %q, %q or %q", a.Error.Class, ClassPermanent, ClassQuarantine, ClassTransient))
}
