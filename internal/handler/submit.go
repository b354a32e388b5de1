package handler

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/bulkrun/bulkrun/shared/source"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/submit"
)

// Submit is the submit function: it answers the REST API and starts
// batches for uploads under incoming/ (S3 notifications).
type Submit struct {
	API             *API
	Submitter       *submit.Submitter
	Heads           Header       // reads an upload's metadata
	Blobs           ledger.Blobs // where refused starts get their error report
	Events          Putter       // where refused starts get their Batch Refused event; nil: none
	DefaultPipeline string
	Log             *slog.Logger
}

// Header reads an object's user metadata (names lower-case, without the
// x-amz-meta- prefix), ETag and Content-Encoding, only if its ETag is etag
// ("" for any): a replaced object is api.ErrConflict, a missing one
// api.ErrNotFound.
type Header interface {
	HeadMatch(ctx context.Context, bucket, key, etag string) (source.ObjectInfo, map[string]string, error)
}

// Putter puts one event on an EventBridge bus (internal/event.Bus).
type Putter interface {
	Put(ctx context.Context, detailType string, detail any) error
}

// Handle answers one raw event of the submit function (Router): an API
// Gateway proxy request (has "httpMethod"), an S3 notification (Records),
// S3's test event, a schedule's tick, a background read or a step of a
// read in parts (the function invoking itself), or the submit tick.
func (s *Submit) Handle(ctx context.Context, raw json.RawMessage) (any, error) {
	return s.Router().Handle(ctx, raw)
}

// Router is the submit function's routes, in the order they are tried.
func (s *Submit) Router() Router {
	return Router{function: "submit", routes: []route{
		{"api", func(e envelope) bool { return e.HTTPMethod != "" }, decode("api", func(ctx context.Context, ev events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
			return s.API.Serve(ctx, ev)
		})},
		{"background read", func(e envelope) bool { return e.Submit != "" }, decode("background read", func(ctx context.Context, ev ledger.SubmitEvent) (any, error) {
			return nil, s.Background(ctx, ev.BatchID)
		})},
		{"part", func(e envelope) bool { return e.SubmitPart != "" }, decode("submit: part", func(ctx context.Context, ev ledger.PartEvent) (any, error) {
			return nil, s.Part(ctx, ev)
		})},
		{"submit tick", func(e envelope) bool { return e.SubmitTick }, func(ctx context.Context, _ json.RawMessage) (any, error) {
			res, err := s.Submitter.TickSubmitting(ctx)
			s.Log.InfoContext(ctx, "submit tick", "submitting", res.Submitting, "handed_off", res.HandedOff, "refused", res.Refused)
			return res, err
		}},
		{"schedule", func(e envelope) bool { return e.Schedule != "" }, decode("submit: schedule", s.Scheduled)},
		{"s3 test", func(e envelope) bool { return e.Event == "s3:TestEvent" }, func(ctx context.Context, _ json.RawMessage) (any, error) {
			s.Log.InfoContext(ctx, "S3 test event")
			return nil, nil
		}},
		{"upload", func(e envelope) bool { return len(e.Records) > 0 }, decode("upload", s.Uploads)},
	}}
}

// SubmitTickEvent is what the schedule sends submit for its backstop of
// background reads (submit.Submitter.TickSubmitting).
const SubmitTickEvent = `{"bulkrun_submit_tick": true}`

// Background reads the source of an accepted batch (the event
// ledger.SubmitEvent, sent by the submit function to itself). An error is
// returned so that Lambda retries the invocation; a batch forgotten
// meanwhile is not an error.
func (s *Submit) Background(ctx context.Context, batchID string) error {
	b, err := s.Submitter.Complete(ctx, batchID)
	switch {
	case errors.Is(err, api.ErrNotFound):
		s.Log.WarnContext(ctx, "background read of an unknown batch", "batch_id", batchID)
		return nil
	case err != nil:
		return err
	}
	s.Log.InfoContext(ctx, "background read done", "batch_id", batchID, "status", string(b.Status), "items", b.ItemCount)
	return nil
}

// Part runs one step of a source read in parts (the event
// ledger.PartEvent, sent by the submit function to itself). An error is
// returned so that Lambda retries the invocation (every step is
// idempotent); a batch forgotten meanwhile is not an error.
func (s *Submit) Part(ctx context.Context, ev ledger.PartEvent) error {
	b, err := s.Submitter.Part(ctx, ev)
	if err != nil {
		return err
	}
	s.Log.InfoContext(ctx, "source part step done", "batch_id", ev.BatchID, "step", ev.Step, "index", ev.Index, "status", string(b.Status))
	return nil
}

// ScheduleEvent is what a bulkrun schedule (an EventBridge rule declared by
// the stack) sends to submit: the schedule's name, the tick's scheduled
// time (EventBridge's "time" field, UTC) and the batch to start.
type ScheduleEvent struct {
	Schedule string            `json:"bulkrun_schedule"`
	Time     time.Time         `json:"time"`
	Request  api.SubmitRequest `json:"request"`
}

// ScheduleBatchID is the batch id of a schedule's tick:
// "{schedule}-{time as 20060102T150405Z}". A duplicate delivery of one tick
// is the same batch.
func ScheduleBatchID(schedule string, t time.Time) string {
	return schedule + "-" + t.UTC().Format("20060102T150405Z")
}

// Scheduled starts the batch of one schedule tick. Every tick leaves a
// trace: a batch, or an error report in
// schedule-errors/{schedule}/{batch id}.error.json (ScheduleErrorKey) and a
// Batch Refused event. A refused tick (bad input, an empty source, another
// batch under the tick's id) is not retried; a failed one is recorded as
// retrying and its error returned, so that Lambda retries the asynchronous
// invocation (twice by default) and then hands it to the failure queue.
func (s *Submit) Scheduled(ctx context.Context, ev ScheduleEvent) (any, error) {
	log := s.Log.With("schedule", ev.Schedule)
	if ev.Time.IsZero() {
		log.ErrorContext(ctx, "schedule event without time; refused")
		err := &api.InputError{Field: "time", Reason: "the schedule event carries no tick time"}
		return nil, s.refuse(ctx, log, Refusal{Source: SourceSchedule, Schedule: ev.Schedule}, err)
	}
	req := ev.Request
	req.BatchID = ScheduleBatchID(ev.Schedule, ev.Time)
	req.SubmittedBy = "schedule:" + ev.Schedule
	res, err := s.Submitter.Submit(ctx, req)
	if err == nil {
		log.InfoContext(ctx, "scheduled batch submitted", "batch_id", res.Batch.ID, "created", res.Created, "items", res.Batch.ItemCount)
		s.clearRetrying(ctx, log, ScheduleErrorKey(ev.Schedule, req.BatchID), "")
		return map[string]any{"batch_id": res.Batch.ID, "created": res.Created}, nil
	}
	tick := ev.Time.UTC()
	return nil, s.refuse(ctx, log, Refusal{Source: SourceSchedule, Schedule: ev.Schedule, Tick: &tick, BatchID: req.BatchID}, err)
}
