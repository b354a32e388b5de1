package api

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors a caller branches on with errors.Is.
var (
	// ErrNotFound: no batch (or item, or object) with that id or key.
	ErrNotFound = errors.New("not found")
	// ErrBatchMismatch: a batch with this id exists with another manifest
	// digest or pipeline (HTTP 409 batch_mismatch). Permanent.
	ErrBatchMismatch = errors.New("batch_mismatch")
	// ErrBatchExists: the conditional create found the batch row already
	// there (Store.CreateBatch). Submit turns it into idempotency or
	// ErrBatchMismatch.
	ErrBatchExists = errors.New("batch exists")
	// ErrConflict: a conditional write lost (a lease is live, an attempt was
	// fenced, a run already finished). Storage adapters return it wrapped.
	ErrConflict = errors.New("conflict")
	// ErrInvalid: the request or the source is malformed. Permanent; the
	// error is an *InputError naming the field or line.
	ErrInvalid = errors.New("invalid input")
	// ErrEmptySource: the source holds no items (API code empty_source,
	// HTTP 400). Permanent; nothing was created. It comes wrapped in an
	// *InputError naming the source field, so errors.Is(err, ErrInvalid)
	// holds as well.
	ErrEmptySource = errors.New("empty_source")
	// ErrNotFinished: finalize found items still pending or in flight.
	ErrNotFinished = errors.New("run not finished")
	// ErrExpired: the batch's retention has ended (HTTP 404 expired); it
	// is gone for reads and commands, and a submit may reuse its id.
	ErrExpired = errors.New("expired")
	// ErrPendingDeletion: a forget started deleting the batch and did not
	// finish (the batch row stays flagged pending_deletion); retrying the
	// forget, or the next sweep, finishes it.
	ErrPendingDeletion = errors.New("pending deletion")
)

// InputError is a malformed submit request or source line. It names where
// the fault is: a request Field (JSON path such as "source.object"), or a
// source Line (1-based; for a JSON array the element number), and the item
// Key when one was read. errors.Is(err, ErrInvalid) is true.
type InputError struct {
	Field   string // request field at fault, "" when the fault is in the source
	Line    int64  // 1-based line (JSONL, CSV) or object number (prefix listing); 0 when not known
	Element int64  // 1-based element of a JSON array source; 0 otherwise
	Key     string // the item key, when known
	Reason  string // what is wrong
	Err     error  // the underlying error, if any
}

func (e *InputError) Error() string {
	var parts []string
	if e.Field != "" {
		parts = append(parts, e.Field)
	}
	if e.Line > 0 {
		parts = append(parts, fmt.Sprintf("line %d", e.Line))
	}
	if e.Element > 0 {
		parts = append(parts, fmt.Sprintf("element %d", e.Element))
	}
	msg := strings.Join(parts, ", ")
	if msg == "" {
		msg = "invalid input"
	}
	if e.Key != "" {
		msg += fmt.Sprintf(" (key %q)", e.Key)
	}
	msg += ": " + e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InputError) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns the underlying error.
func (e *InputError) Unwrap() error { return e.Err }

// MismatchError carries what differs between a submit and the stored batch.
// errors.Is(err, ErrBatchMismatch) is true.
type MismatchError struct {
	BatchID string
	// Field is the first that differs: "source" or "key_field" (a
	// batch still submitting), else a field of the plan (Plan) as
	// ledger.Batch.DiffPlan names it: "manifest_digest", "pipeline",
	// "pipeline_options", "headers", "threshold", "stop_on_threshold",
	// "max_attempts", "retry", "max_concurrency", "items_per_message",
	// "on_interrupt", "task_token", "task_heartbeat_seconds" or "schema".
	Field  string
	Stored string
	Given  string
}

// Error says what differs; for another manifest it also says what to do:
// to run some items again with fixed inputs, send only those items as
// corrections (POST /batches/{id}/corrections, bulkrun correct); for
// other items, a new batch id.
func (e *MismatchError) Error() string {
	msg := fmt.Sprintf("batch %s exists already with another value of %s (stored %s, given %s)", e.BatchID, e.Field, e.Stored, e.Given)
	if e.Field == "manifest_digest" {
		msg += fmt.Sprintf("; to run failed items again with fixed inputs, send just those items as corrections (bulkrun correct %s FILE, POST /batches/%s/corrections); other items are a new batch with another id", e.BatchID, e.BatchID)
	}
	return msg
}

// Is makes errors.Is(err, ErrBatchMismatch) true.
func (e *MismatchError) Is(target error) bool { return target == ErrBatchMismatch }

// ErrInsufficientStorage: the submit function's temporary disk (where
// duplicate-key detection spills) filled up while reading the source. Not
// retryable: the same source fills the same disk again. Submit returns a
// *StorageFullError (HTTP 507 insufficient_storage).
var ErrInsufficientStorage = errors.New("insufficient_storage")

// StorageFullError is a source too large for the submit function's
// temporary disk: duplicate-key detection spilled SpilledBytes of sorted
// keys to Dir after Items items and the disk was full. LimitBytes is the
// function's ephemeral storage (0: not known). errors.Is(err,
// ErrInsufficientStorage) is true.
type StorageFullError struct {
	Dir          string
	LimitBytes   int64
	Items        int64
	SpilledBytes int64
	Err          error
}

func (e *StorageFullError) Error() string {
	limit := "the temporary disk"
	if e.LimitBytes > 0 {
		limit = fmt.Sprintf("the submit function's ephemeral storage (%d MiB)", e.LimitBytes>>20)
	}
	return fmt.Sprintf("source too large for %s: duplicate-key detection had spilled %d MiB of keys to %s after %s when the disk was full; "+
		"deploy the stack with a larger MaxManifestBytes (ephemeral storage up to 10,240 MiB) or split the source: %v",
		limit, e.SpilledBytes>>20, e.Dir, Count(e.Items, "item"), e.Err)
}

// Is makes errors.Is(err, ErrInsufficientStorage) true.
func (e *StorageFullError) Is(target error) bool { return target == ErrInsufficientStorage }

// Unwrap returns the underlying error.
func (e *StorageFullError) Unwrap() error { return e.Err }

// SubmitRefusal is why a batch read in the background was refused: Code is
// "invalid_request" (the source or request is malformed: Field, Line,
// Element and Key say where), "empty_source" (the source holds no items,
// ErrEmptySource), "insufficient_storage" (a *StorageFullError),
// "repeated_upload" (an upload of items another upload started within
// the stack's window, *RepeatedUploadError; Field x-amz-meta-rerun)
// or "internal" (every attempt to read the source died); Message is the
// full text. JSON names as tagged (the API's error body).
type SubmitRefusal struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	Line    int64  `json:"line,omitempty"`
	Element int64  `json:"element,omitempty"`
	Key     string `json:"key,omitempty"`
	// Problems counts the rows that could not run, when the refusal is
	// for them (a *ProblemsError), and InvalidObject is the S3 key of the
	// file listing every one (InvalidKey), kept with the refused batch.
	Problems      int64  `json:"problems,omitempty"`
	InvalidObject string `json:"invalid_object,omitempty"`
}

// SubmitRefusal codes.
const (
	RefusalInvalid             = "invalid_request"
	RefusalEmptySource         = "empty_source"
	RefusalInsufficientStorage = "insufficient_storage"
	RefusalInternal            = "internal"
)

// RefusalOf returns the refusal of a permanent submit error (an
// *InputError, ErrInsufficientStorage, or a *BatchRefusedError's), and false for any other error,
// which is worth retrying.
func RefusalOf(err error) (SubmitRefusal, bool) {
	var ie *InputError
	var re *BatchRefusedError
	var rue *RepeatedUploadError
	var pe *ProblemsError
	switch {
	case errors.As(err, &re):
		return re.Refusal, true
	case errors.As(err, &rue):
		return SubmitRefusal{Code: RefusalRepeatedUpload, Message: err.Error(), Field: "x-amz-meta-rerun"}, true
	case errors.As(err, &pe):
		r := SubmitRefusal{Code: RefusalInvalid, Message: err.Error(), Problems: pe.Count, InvalidObject: pe.Object}
		if len(pe.First) > 0 {
			r.Line, r.Element, r.Key = pe.First[0].Line, pe.First[0].Element, Truncate(pe.First[0].Key, 80)
		}
		return r, true
	case errors.As(err, &ie):
		code := RefusalInvalid
		if errors.Is(err, ErrEmptySource) {
			code = RefusalEmptySource
		}
		return SubmitRefusal{Code: code, Message: err.Error(), Field: ie.Field, Line: ie.Line, Element: ie.Element, Key: ie.Key}, true
	case errors.Is(err, ErrInsufficientStorage):
		return SubmitRefusal{Code: RefusalInsufficientStorage, Message: err.Error()}, true
	}
	return SubmitRefusal{}, false
}

// BatchRefusedError is the answer to a repeated submit of a refused batch: the
// stored SubmitRefusal. errors.Is(err, ErrInvalid) is true for an
// invalid_request refusal, errors.Is(err, ErrInsufficientStorage) for an
// insufficient_storage one.
type BatchRefusedError struct {
	BatchID string
	Refusal SubmitRefusal
}

func (e *BatchRefusedError) Error() string {
	return fmt.Sprintf("batch %s was refused: %s", e.BatchID, e.Refusal.Message)
}

// Is matches ErrInvalid or ErrInsufficientStorage by the refusal's code.
func (e *BatchRefusedError) Is(target error) bool {
	return target == ErrInvalid && (e.Refusal.Code == RefusalInvalid || e.Refusal.Code == RefusalEmptySource) ||
		target == ErrEmptySource && e.Refusal.Code == RefusalEmptySource ||
		target == ErrInsufficientStorage && e.Refusal.Code == RefusalInsufficientStorage
}
