package handler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bulkrun/bulkrun/shared/batch"
	"github.com/bulkrun/bulkrun/shared/config"
)

// Submit is the submit function: it answers the REST API and starts
// batches for uploads under incoming/ (S3 notifications).
type Submit struct {
	API             *API
	Submitter       *batch.Submitter
	Heads           Header      // reads an upload's metadata
	Blobs           batch.Blobs // where refused uploads get their error report
	DefaultPipeline string
	Log             *slog.Logger
}

// Header reads an object's user metadata (names lower-case, without the
// x-amz-meta- prefix) and ETag.
type Header interface {
	Head(ctx context.Context, bucket, key string) (batch.ObjectInfo, map[string]string, error)
}

// Handle dispatches a raw event: an API Gateway proxy request (has
// "httpMethod"), an S3 event (Records with "s3"), or S3's test event.
func (s *Submit) Handle(ctx context.Context, raw json.RawMessage) (any, error) {
	var probe struct {
		HTTPMethod string            `json:"httpMethod"`
		Records    []json.RawMessage `json:"Records"`
		Event      string            `json:"Event"`
		Schedule   string            `json:"bulkrun_schedule"`
		Submit     string            `json:"bulkrun_submit"`
		SubmitTick bool              `json:"bulkrun_submit_tick"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("submit: event is not JSON: %w", err)
	}
	switch {
	case probe.HTTPMethod != "":
		var ev events.APIGatewayProxyRequest
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, err
		}
		return s.API.Serve(ctx, ev)
	case probe.Submit != "":
		return nil, s.Background(ctx, probe.Submit)
	case probe.SubmitTick:
		res, err := s.Submitter.TickSubmitting(ctx)
		s.Log.Info("submit tick", "submitting", res.Submitting, "handed_off", res.HandedOff, "refused", res.Refused)
		return res, err
	case probe.Schedule != "":
		var ev ScheduleEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, fmt.Errorf("submit: schedule event: %w", err)
		}
		return s.Scheduled(ctx, ev)
	case probe.Event == "s3:TestEvent":
		s.Log.Info("S3 test event")
		return nil, nil
	case len(probe.Records) > 0:
		var ev events.S3Event
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, err
		}
		return nil, s.Uploads(ctx, ev)
	}
	return nil, fmt.Errorf("submit: unknown event shape")
}

// SubmitTickEvent is what the schedule sends submit for its backstop of
// background reads (batch.Submitter.TickSubmitting).
const SubmitTickEvent = `{"bulkrun_submit_tick": true}`

// Background reads the source of an accepted batch (the event
// batch.SubmitEvent, sent by the submit function to itself). An error is
// returned so that Lambda retries the invocation; a batch forgotten
// meanwhile is not an error.
func (s *Submit) Background(ctx context.Context, batchID string) error {
	b, err := s.Submitter.Complete(ctx, batchID)
	switch {
	case errors.Is(err, batch.ErrNotFound):
		s.Log.Warn("background read of an unknown batch", "batch_id", batchID)
		return nil
	case err != nil:
		return err
	}
	s.Log.Info("background read done", "batch_id", batchID, "status", string(b.Status), "items", b.ItemCount)
	return nil
}

// Object metadata an upload may carry (x-amz-meta-<name>).
const (
	MetaBatchID         = "batch-id"
	MetaPipeline        = "pipeline"
	MetaKeyField        = "key-field"
	MetaFormat          = "format"
	MetaFailurePercent  = "tolerated-failure-percent"
	MetaFailureCount    = "tolerated-failure-count"
	MetaMaxAttempts     = "max-attempts"
	MetaPipelineOptions = "pipeline-options"
	MetaCSVDelimiter    = "csv-delimiter"     // as csv_delimiter: one character, or comma, semicolon, tab, pipe
	MetaStopOnThreshold = "stop-on-threshold" // "false" runs every item and judges the threshold at the end
)

// Uploads starts a batch per uploaded object under incoming/. A duplicate
// notification of one upload is the same batch: the id derives from the
// bucket, key and ETag (UploadBatchID) unless metadata names one. Bad input
// is logged with its line, reported in incoming-errors/{name}.error.json
// (UploadErrorKey) and not retried; other errors are returned so that
// Lambda retries the event.
func (s *Submit) Uploads(ctx context.Context, ev events.S3Event) error {
	var errs []error
	for _, rec := range ev.Records {
		key, err := url.QueryUnescape(rec.S3.Object.Key)
		if err != nil {
			key = rec.S3.Object.Key
		}
		bucket := rec.S3.Bucket.Name
		log := s.Log.With("bucket", bucket, "object", key)
		if !strings.HasPrefix(key, config.IncomingPrefix) || !strings.HasPrefix(rec.EventName, "ObjectCreated") {
			continue
		}
		req, err := s.uploadRequest(ctx, bucket, key)
		if err == nil {
			var res batch.SubmitResult
			res, err = s.Submitter.Submit(ctx, req)
			if err == nil {
				log.Info("upload submitted", "batch_id", res.Batch.ID, "created", res.Created, "items", res.Batch.ItemCount)
				continue
			}
		}
		var ie *batch.InputError
		if errors.As(err, &ie) || errors.Is(err, batch.ErrBatchMismatch) {
			log.Error("upload refused", "error", err.Error())
			if rerr := s.reportRefusal(ctx, bucket, key, req.BatchID, err); rerr != nil {
				log.Error("write error report", "error", rerr.Error())
			}
			continue
		}
		log.Error("upload failed; retried", "error", err.Error())
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// UploadErrorKey is where the error report of a refused upload goes:
// incoming-errors/{key without incoming/}.error.json.
func UploadErrorKey(key string) string {
	return config.UploadErrorsPrefix + strings.TrimPrefix(key, config.IncomingPrefix) + ".error.json"
}

// UploadError is the error report of a refused upload.
type UploadError struct {
	Bucket  string    `json:"bucket"`
	Key     string    `json:"key"`
	BatchID string    `json:"batch_id,omitempty"`
	Error   ErrorBody `json:"error"`
	At      time.Time `json:"at"`
}

func (s *Submit) reportRefusal(ctx context.Context, bucket, key, batchID string, err error) error {
	if s.Blobs == nil || bucket != s.Blobs.Bucket() {
		return nil
	}
	_, body := ErrorOf(err)
	report, merr := json.MarshalIndent(UploadError{Bucket: bucket, Key: key, BatchID: batchID, Error: body, At: time.Now().UTC()}, "", "  ")
	if merr != nil {
		return merr
	}
	return s.Blobs.Put(ctx, UploadErrorKey(key), "application/json", report)
}

var unsafeID = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// UploadBatchID derives a batch id from an upload: the file's base name
// (without extension, characters outside [A-Za-z0-9_-] replaced by '-', at
// most 80 bytes), '-', and 16 hex digits of SHA-256("{bucket}/{key}#{etag}").
func UploadBatchID(bucket, key, etag string) string {
	base := strings.TrimSuffix(path.Base(key), path.Ext(key))
	base = strings.Trim(unsafeID.ReplaceAllString(base, "-"), "-")
	if len(base) > 80 {
		base = base[:80]
	}
	if base == "" {
		base = "upload"
	}
	sum := sha256.Sum256([]byte(bucket + "/" + key + "#" + strings.Trim(etag, `"`)))
	return base + "-" + hex.EncodeToString(sum[:8])
}

func (s *Submit) uploadRequest(ctx context.Context, bucket, key string) (batch.SubmitRequest, error) {
	info, meta, err := s.Heads.Head(ctx, bucket, key)
	if err != nil {
		return batch.SubmitRequest{}, err
	}
	get := func(name string) string {
		for k, v := range meta {
			if strings.EqualFold(k, name) {
				return v
			}
		}
		return ""
	}
	req := batch.SubmitRequest{
		BatchID:  get(MetaBatchID),
		Pipeline: get(MetaPipeline),
		KeyField: get(MetaKeyField),
		Source:   batch.SourceSpec{Object: "s3://" + bucket + "/" + key, Format: get(MetaFormat), CSVDelimiter: get(MetaCSVDelimiter)},
	}
	if req.BatchID == "" {
		req.BatchID = UploadBatchID(bucket, key, info.ETag)
	}
	if req.Pipeline == "" {
		req.Pipeline = s.DefaultPipeline
	}
	if v := get(MetaFailurePercent); v != "" {
		p, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return req, &batch.InputError{Field: "x-amz-meta-" + MetaFailurePercent, Reason: "not a number: " + v}
		}
		req.Threshold.FailurePercent = &p
	}
	if v := get(MetaFailureCount); v != "" {
		c, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return req, &batch.InputError{Field: "x-amz-meta-" + MetaFailureCount, Reason: "not a whole number: " + v}
		}
		req.Threshold.FailureCount = &c
	}
	if v := get(MetaMaxAttempts); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return req, &batch.InputError{Field: "x-amz-meta-" + MetaMaxAttempts, Reason: "not a whole number: " + v}
		}
		req.MaxAttempts = n
	}
	if v := get(MetaStopOnThreshold); v != "" {
		stop, err := strconv.ParseBool(v)
		if err != nil {
			return req, &batch.InputError{Field: "x-amz-meta-" + MetaStopOnThreshold, Reason: "want true or false: " + v}
		}
		req.StopOnThreshold = &stop
	}
	if v := get(MetaPipelineOptions); v != "" {
		req.Options = json.RawMessage(v)
	}
	if req.Pipeline == "" {
		return req, &batch.InputError{Field: "x-amz-meta-" + MetaPipeline, Reason: "required (the stack sets no default pipeline)"}
	}
	return req, nil
}

// ScheduleEvent is what a bulkrun schedule (an EventBridge rule declared by
// the stack) sends to submit: the schedule's name, the tick's scheduled
// time (EventBridge's "time" field, UTC) and the batch to start.
type ScheduleEvent struct {
	Schedule string              `json:"bulkrun_schedule"`
	Time     time.Time           `json:"time"`
	Request  batch.SubmitRequest `json:"request"`
}

// ScheduleBatchID is the batch id of a schedule's tick:
// "{schedule}-{time as 20060102T150405Z}". A duplicate delivery of one tick
// is the same batch.
func ScheduleBatchID(schedule string, t time.Time) string {
	return schedule + "-" + t.UTC().Format("20060102T150405Z")
}

// Scheduled starts the batch of one schedule tick. Bad input is logged and
// not retried; other errors are returned so that EventBridge retries.
func (s *Submit) Scheduled(ctx context.Context, ev ScheduleEvent) (any, error) {
	log := s.Log.With("schedule", ev.Schedule)
	if ev.Time.IsZero() {
		log.Error("schedule event without time; refused")
		return nil, nil
	}
	req := ev.Request
	req.BatchID = ScheduleBatchID(ev.Schedule, ev.Time)
	res, err := s.Submitter.Submit(ctx, req)
	var ie *batch.InputError
	switch {
	case err == nil:
		log.Info("scheduled batch submitted", "batch_id", res.Batch.ID, "created", res.Created, "items", res.Batch.ItemCount)
		return map[string]any{"batch_id": res.Batch.ID, "created": res.Created}, nil
	case errors.As(err, &ie) || errors.Is(err, batch.ErrBatchMismatch):
		log.Error("scheduled batch refused", "batch_id", req.BatchID, "error", err.Error())
		return nil, nil
	}
	return nil, err
}
