package handler

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/bulkrun/bulkrun/shared/control"
)

// envelope is what tells bulkrun's events apart: the fields that name an
// event's kind, whichever function receives it.
type envelope struct {
	HTTPMethod string `json:"httpMethod"` // an API Gateway (REST, proxy) request
	// Records are an S3 notification's (eventSource "aws:s3") or an SQS
	// batch's ("aws:sqs").
	Records []struct {
		EventSource string `json:"eventSource"`
	} `json:"Records"`
	Event      string `json:"Event"`               // "s3:TestEvent", when a notification is configured
	Schedule   string `json:"bulkrun_schedule"`    // a schedule's tick (ScheduleEvent)
	Submit     string `json:"bulkrun_submit"`      // a background read (ledger.SubmitEvent)
	SubmitPart string `json:"bulkrun_submit_part"` // a step of a read in parts (ledger.PartEvent)
	SubmitTick bool   `json:"bulkrun_submit_tick"` // the submit tick (SubmitTickEvent)
	Tick       bool   `json:"tick"`                // the finalize tick
}

// route is one kind of event a function answers: match tells it by its
// envelope, serve decodes the raw event and answers it.
type route struct {
	kind  string
	match func(envelope) bool
	serve func(ctx context.Context, raw json.RawMessage) (any, error)
}

// Router dispatches the raw events of one function to their routes, the
// first that matches, in order: every bulkrun function is started as a
// Router (submit: API requests, uploads, schedules, background reads and
// their parts, the submit tick; item: SQS batches; finalize: triggers,
// parts and the tick; sweep: its schedule). An event no route matches is
// an error naming the function.
type Router struct {
	function string
	routes   []route
}

// Handle answers one raw event.
func (r Router) Handle(ctx context.Context, raw json.RawMessage) (any, error) {
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, fmt.Errorf("%s: event is not a JSON object: %w", r.function, err)
	}
	for _, rt := range r.routes {
		if rt.match(env) {
			return rt.serve(ctx, raw)
		}
	}
	return nil, fmt.Errorf("%s: unknown event shape", r.function)
}

// decode unmarshals raw into a new E and hands it to fn: a route's serve.
func decode[E, R any](kind string, fn func(context.Context, E) (R, error)) func(context.Context, json.RawMessage) (any, error) {
	return func(ctx context.Context, raw json.RawMessage) (any, error) {
		var ev E
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, fmt.Errorf("%s event: %w", kind, err)
		}
		return fn(ctx, ev)
	}
}

// Sweep is the sweep function's one route: every scheduled invocation
// runs the sweep's passes and answers their counts.
func Sweep(sw *control.Sweeper) Router {
	return Router{function: "sweep", routes: []route{
		{"schedule", func(envelope) bool { return true }, func(ctx context.Context, _ json.RawMessage) (any, error) {
			return sw.Run(ctx), nil
		}},
	}}
}
