package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Sources of a start that is not an API call (Refusal.Source).
const (
	SourceUpload   = "upload"   // an object under incoming/ (S3 notification)
	SourceSchedule = "schedule" // a schedule's tick (EventBridge rule)
)

// CodeStartFailed is the ErrorBody code of a start that failed for a reason
// other than its input (an AWS call that failed, a timeout); Lambda retries
// it.
const CodeStartFailed = "start_failed"

// Refusal is the error report of a start that did not happen — an upload or
// a schedule tick whose submit was refused or failed — and the detail of
// its Batch Refused event (the same JSON). The report is at Report:
// incoming-errors/{name}.error.json (config.UploadErrorKey) or
// schedule-errors/{schedule}/{batch id}.error.json (ScheduleErrorKey).
//
//	{"source": "upload", "bucket": "…", "key": "incoming/my orders.csv", "etag": "…",
//	 "batch_id": "…", "error": {"code": "invalid_request", "message": "…", "line": 4},
//	 "retrying": false, "report": "s3://…/incoming-errors/my orders.csv.error.json", "at": "…"}
//
// Retrying is true when the start failed for a reason other than its input
// and Lambda retries it: a later success removes the report; after the last
// retry the invocation goes to the submit failure queue.
type Refusal struct {
	Source   string     `json:"source"`             // SourceUpload or SourceSchedule
	Bucket   string     `json:"bucket,omitempty"`   // upload: the bucket
	Key      string     `json:"key,omitempty"`      // upload: the object key, decoded
	ETag     string     `json:"etag,omitempty"`     // upload: the ETag the notification named
	Schedule string     `json:"schedule,omitempty"` // schedule: its name
	Tick     *time.Time `json:"tick,omitempty"`     // schedule: the tick's time, UTC
	BatchID  string     `json:"batch_id,omitempty"` // the batch the start would have made, when known
	Error    ErrorBody  `json:"error"`
	Retrying bool       `json:"retrying"`
	Report   string     `json:"report,omitempty"` // s3:// URI of the error report
	At       time.Time  `json:"at"`
}

// UploadError is the error report of a refused upload (a Refusal).
type UploadError = Refusal

// ScheduleErrorKey is where the error report of a refused or failed tick
// goes: schedule-errors/{schedule}/{batch id}.error.json.
func ScheduleErrorKey(schedule, batchID string) string {
	return config.ScheduleErrorsPrefix + schedule + "/" + batchID + ".error.json"
}

// IsRefusal tells a start refused for good — its input (*api.InputError,
// such as a malformed line, an empty source, an object gone or changed), a
// source too large for the temporary disk (api.ErrInsufficientStorage),
// or another batch under the same id (api.ErrBatchMismatch) — which no
// retry can change, from a failure that a retry may cure.
func IsRefusal(err error) bool {
	_, permanent := api.RefusalOf(err)
	return permanent || errors.Is(err, api.ErrBatchMismatch)
}

func (s *Submit) reportKey(r Refusal) string {
	if r.Source == SourceSchedule {
		id := r.BatchID
		if id == "" {
			id = "no-tick"
		}
		return ScheduleErrorKey(r.Schedule, id)
	}
	return config.UploadErrorKey(r.Key)
}

// refuse records a start that did not happen and returns what the handler
// returns to Lambda. A refusal (IsRefusal) gets its error report and
// Batch Refused event and returns nil — unless recording failed, then the
// recording's error, so that Lambda retries and finally hands the event to
// the failure queue. A failure is recorded as retrying (best effort) and
// returned.
func (s *Submit) refuse(ctx context.Context, log *slog.Logger, r Refusal, err error) error {
	refused := IsRefusal(err)
	r.Retrying = !refused
	if refused {
		_, r.Error = ErrorOf(err)
	} else {
		r.Error = ErrorBody{Code: CodeStartFailed, Message: "failed; Lambda retries this start: " + err.Error()}
	}
	// An EventBridge entry is at most 256 KB: quote the error as every
	// error text is quoted.
	r.Error.Message = pipeline.CutText(r.Error.Message, pipeline.MaxErrorTextBytes)
	r.At = time.Now().UTC()
	log = log.With("batch_id", r.BatchID, "retrying", r.Retrying)

	var recErrs []error
	if s.Blobs != nil && (r.Source == SourceSchedule || r.Bucket == s.Blobs.Bucket()) {
		key := s.reportKey(r)
		r.Report = "s3://" + s.Blobs.Bucket() + "/" + key
		body, merr := json.MarshalIndent(r, "", "  ")
		if merr == nil {
			merr = s.Blobs.Put(ctx, key, "application/json", body)
		}
		if merr != nil {
			recErrs = append(recErrs, fmt.Errorf("write error report %s: %w", key, merr))
		}
	}
	if s.Events != nil {
		if perr := s.Events.Put(ctx, api.DetailRefused, r); perr != nil {
			recErrs = append(recErrs, perr)
		}
		if refused {
			if perr := s.Events.Put(ctx, api.DetailStateChange, refusedChange(r)); perr != nil {
				recErrs = append(recErrs, perr)
			}
		}
	}
	recErr := errors.Join(recErrs...)
	if recErr != nil {
		log.ErrorContext(ctx, "record refused start", "error", recErr.Error())
	}
	if refused {
		log.ErrorContext(ctx, r.Source+" refused", "error", err.Error(), "report", r.Report)
		return recErr // nil when recorded; else Lambda retries the recording
	}
	log.ErrorContext(ctx, r.Source+" failed; Lambda retries it", "error", err.Error(), "report", r.Report)
	return err
}

// refusedChange is the Batch State Change event (change refused) of r, a
// start refused for good: the batch id when known (run 0, status
// refused), the refusal (code, message, line, field) and the upload or
// tick with its error report. Its event id's time is r.At; without a
// batch id the upload's key or the schedule's name stands for it.
func refusedChange(r Refusal) api.StateChangeEvent {
	e := api.StateChangeEvent{
		SchemaVersion: api.StateChangeSchemaVersion, EventID: api.StateChangeEventID(r.BatchID, 0, api.ChangeRefused, r.At),
		Change: api.ChangeRefused, BatchID: r.BatchID, Status: api.StatusRefused, At: r.At,
		Refusal: &api.SubmitRefusal{Code: r.Error.Code, Message: r.Error.Message, Field: r.Error.Field, Line: r.Error.Line, Element: r.Error.Element, Key: r.Error.Key},
		Start:   &api.StartOrigin{Source: r.Source, Bucket: r.Bucket, Key: r.Key, Schedule: r.Schedule, Report: r.Report},
	}
	if r.BatchID == "" {
		// No batch id: the upload's key or the schedule names the start.
		e.EventID = api.StateChangeEventID(r.Key+r.Schedule, 0, api.ChangeRefused, r.At)
	}
	return e
}

// clearRetrying removes the error report at key if it says that an earlier
// attempt of this start failed and was being retried (for an upload, of
// the object with etag; "" matches any): the start has now succeeded. A
// report of a refusal stays. Errors are logged only.
func (s *Submit) clearRetrying(ctx context.Context, log *slog.Logger, key, etag string) {
	if s.Blobs == nil {
		return
	}
	body, err := s.Blobs.Get(ctx, key)
	if err != nil {
		if !errors.Is(err, api.ErrNotFound) {
			log.WarnContext(ctx, "read error report", "report", key, "error", err.Error())
		}
		return
	}
	var r Refusal
	if json.Unmarshal(body, &r) != nil || !r.Retrying || etag != "" && strings.Trim(r.ETag, `"`) != strings.Trim(etag, `"`) {
		return
	}
	if err := s.Blobs.Delete(ctx, key); err != nil {
		log.WarnContext(ctx, "delete error report of a retried start", "report", key, "error", err.Error())
		return
	}
	log.InfoContext(ctx, "start succeeded on a retry; its error report is removed", "report", key)
}
