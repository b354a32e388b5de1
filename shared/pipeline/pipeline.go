// Package pipeline is the contract between bulkrun and the code it runs per
// item: a Pipeline takes one item's input JSON and returns its output JSON
// and cost records, or an error whose type decides the item's outcome.
//
// Errors a pipeline can return, and what bulkrun does with them:
//
//   - Permanent(err): the item ends `failed` with err's text; never retried.
//   - Quarantine(err): the item ends `quarantined` (set aside; a rerun does
//     not touch it until it is released).
//   - RetryAfter(err, d), a *RetryAfterError: transient, and the retry is
//     scheduled no sooner than d after the attempt (d capped at
//     MaxRetryAfter); the exponential backoff applies when it is longer.
//   - TimedOut(err, d), a *TimeoutError: transient; a call that reached
//     the downstream and was given up after d, which the downstream may
//     still be working on: the retry waits at least twice d after the
//     first (ledger.TimeoutWait), so that the next call does not come
//     while it may still run.
//   - Suspend(reason, wakeAt), a *SuspendError: the item ends
//     `suspended` and waits for a signal, its wake time or a cancel; the
//     attempt counts neither as a failure nor toward max attempts.
//   - any other error: transient; the item is retried with exponential
//     backoff and jitter until the batch's max attempts, then ends `failed`.
//   - any error after the pipeline's context was cut off at the
//     invocation's deadline margin (or the lease's end): an interruption —
//     the call's outcome is unknown — so the batch's on_interrupt policy
//     decides: `retry` runs the item again, `quarantine` sets it aside with
//     reason `interrupted`.
//
// Error texts are recorded on the item row, in logs, listings and results
// cut to at most MaxErrorTextBytes at a UTF-8 boundary (see CutText): a
// pipeline may return an error of any size without breaking the record.
//
// A Pipeline must be safe for concurrent use: one item binary runs one
// message batch at a time, but several processes run the same code. It
// should be idempotent per Request.RunID: bulkrun runs it at most once per
// reservation, but a crash after the side effect and before the outcome is
// recorded makes a later attempt (same RunID, Attempt + 1) run it again.
//
// This package is part of bulkrun's Go API: docs/packages.md says what
// that promises.
package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Request is one item's run of a pipeline.
type Request struct {
	BatchID string            // the batch id
	Key     string            // the item key (UTF-8, 1–1024 bytes)
	RunID   string            // hex SHA-256 of "{batch id}/{key}"; stable across attempts and reruns
	Attempt int               // 1 on the first attempt, +1 per takeover or retry
	Input   json.RawMessage   // the item's input as in the manifest
	Headers map[string]string // headers given at submit (the "bulkrun." prefix is reserved)
	Options json.RawMessage   // the batch's pipeline options ("{}" when none)
	Outputs Outputs           // where the pipeline stores output objects
	// Signal is the payload of the signal that woke this attempt's
	// suspended item (JSON, at most 4 KiB; see SuspendError); nil for
	// any other attempt, and for a signal sent without one.
	Signal json.RawMessage
}

// Result is what a successful run returns.
type Result struct {
	// Output is the item's output JSON (nil means null). Outputs larger than
	// bulkrun's inline limit are stored in S3 and referenced from the row.
	Output json.RawMessage
	// Cost is the item's cost records: name → amount (e.g. "calls": 1,
	// "tokens": 812, "usd": 0.0021). Names are free-form; the batch sums
	// each name over its items.
	Cost Cost
}

// Cost maps a cost name to an item's amount. Units are the name's own
// (tokens, calls, USD…). An amount is read as the shortest decimal that
// gives back the same float64 (0.1 is 0.1), the way Go and JSON print it;
// sums over items are exact decimals ([CostSum]). NaN and infinite amounts
// are not counted in sums.
type Cost map[string]float64

// Outputs stores a pipeline's output objects under the batch's outputs
// prefix (batches/{id}/outputs/). Implementations are safe for concurrent use.
type Outputs interface {
	// Put stores body at name (a relative path such as "cats/tom.png") and
	// returns the object's location as an s3:// URI. Overwrites are allowed
	// (a retried attempt writes the same name).
	Put(ctx context.Context, name, contentType string, body []byte) (uri string, err error)
}

// Pipeline runs one item. See the package comment for the error contract.
// With an error, Result.Cost may still carry what the attempt spent (a call
// that was answered 4xx is still a call); the item's cost is that of the
// attempt that ended it.
type Pipeline interface {
	Run(ctx context.Context, req Request) (Result, error)
}

// OptionsValidator is implemented by pipelines that can check a batch's
// options before any item runs: submit refuses bad options with a 400
// naming pipeline_options instead of failing every item.
type OptionsValidator interface {
	ValidateOptions(options json.RawMessage) error
}

// OptionError is an error about one option of a batch's pipeline options:
// submit refuses it with a 400 naming the field "pipeline_options.{Option}"
// (e.g. "pipeline_options.url"). Its message is Err's.
type OptionError struct {
	Option string // the option's JSON name, e.g. "url"
	Err    error
}

func (e *OptionError) Error() string { return e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// Func adapts a function to the Pipeline interface.
type Func func(ctx context.Context, req Request) (Result, error)

// Run calls f(ctx, req).
func (f Func) Run(ctx context.Context, req Request) (Result, error) { return f(ctx, req) }

// PermanentError marks an error that no retry can fix (bad input, a 4xx
// answer). The item ends `failed`.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// QuarantineError sets the item aside: it ends `quarantined` and is not rerun
// until released.
type QuarantineError struct{ Err error }

func (e *QuarantineError) Error() string { return e.Err.Error() }
func (e *QuarantineError) Unwrap() error { return e.Err }

// MaxRetryAfter caps the delay a *RetryAfterError can ask for: 1 hour. A
// receiver asking for more is retried after an hour (the attempt still
// counts). The item's message waits in the queue meanwhile; SQS allows a
// visibility timeout of at most 12 hours (Amazon SQS developer guide,
// "Amazon SQS visibility timeout").
const MaxRetryAfter = time.Hour

// RetryAfterError is a transient error that says when a retry may succeed:
// a receiver's 429 or 503 answer with a Retry-After header, a rate limit's
// reset time. The item's retry is scheduled no sooner than Delay after the
// attempt ended (the batch's backoff applies when it is longer). It counts
// as an attempt like any transient error.
type RetryAfterError struct {
	Err   error
	Delay time.Duration // ≥ 0, at most MaxRetryAfter
}

func (e *RetryAfterError) Error() string { return e.Err.Error() }
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter wraps err as a *RetryAfterError asking for a retry no sooner
// than d (clamped to 0–MaxRetryAfter). nil stays nil.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryAfterError{Err: err, Delay: min(max(d, 0), MaxRetryAfter)}
}

// RetryDelay returns the delay asked for by the first *RetryAfterError in
// err's chain, clamped to 0–MaxRetryAfter, and whether there is one.
func RetryDelay(err error) (time.Duration, bool) {
	var ra *RetryAfterError
	if !errors.As(err, &ra) {
		return 0, false
	}
	return min(max(ra.Delay, 0), MaxRetryAfter), true
}

// TimeoutError is a transient error of a call that reached the
// downstream and was given up after Timeout without an answer: the
// webhook's timeout_ms, or the worker's deadline margin cutting a call
// off. The downstream may still be working on it, and may finish it. So
// that an item's next call does not come while its previous one may
// still run there, the retry of a timed-out attempt waits at least
// ledger.TimeoutWait(Timeout, n) (n: the run's attempts of the item so
// far; twice the timeout after the first), longer than the batch's retry
// policy would when that is shorter. Its failure class is "timeout".
type TimeoutError struct {
	Err     error
	Timeout time.Duration // how long the call ran before it was given up, ≥ 0
}

func (e *TimeoutError) Error() string { return e.Err.Error() }
func (e *TimeoutError) Unwrap() error { return e.Err }

// FailureClass is "timeout" (streak.Class).
func (e *TimeoutError) FailureClass() string { return "timeout" }

// TimedOut wraps err as a *TimeoutError of a call given up after d
// (negative taken as 0). nil stays nil.
func TimedOut(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &TimeoutError{Err: err, Timeout: max(d, 0)}
}

// TimeoutOf returns the Timeout of the first *TimeoutError in err's chain,
// and whether there is one.
func TimeoutOf(err error) (time.Duration, bool) {
	var te *TimeoutError
	if !errors.As(err, &te) {
		return 0, false
	}
	return max(te.Timeout, 0), true
}

// MaxErrorTextBytes is the most of an error text bulkrun keeps wherever it
// quotes one (item rows, logs, listings, results): 4 KiB. DynamoDB items
// are at most 400 KB, and a stack trace or an echoed request must not make
// the outcome write fail.
const MaxErrorTextBytes = 4 << 10

// CutText returns s cut to at most max bytes without splitting a UTF-8
// sequence, ending with "… [N bytes cut]" when anything was cut (the
// marker counts toward max). Invalid UTF-8 is replaced by U+FFFD first, so
// the result is always valid UTF-8. max below 64 is taken as 64.
func CutText(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if max < 64 {
		max = 64
	}
	if len(s) <= max {
		return s
	}
	marker := fmt.Sprintf("… [%d bytes cut]", len(s))
	n := max - len(marker)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + fmt.Sprintf("… [%d bytes cut]", len(s)-n)
}

// ErrorText is err's text cut by CutText to MaxErrorTextBytes.
func ErrorText(err error) string {
	if err == nil {
		return ""
	}
	return CutText(err.Error(), MaxErrorTextBytes)
}

// Permanent wraps err as a *PermanentError (nil stays nil).
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// Quarantine wraps err as a *QuarantineError (nil stays nil).
func Quarantine(err error) error {
	if err == nil {
		return nil
	}
	return &QuarantineError{Err: err}
}

// Class is how an error classifies an item's attempt.
type Class string

// The classes of Classify.
const (
	ClassTransient  Class = "transient"
	ClassPermanent  Class = "permanent"
	ClassQuarantine Class = "quarantine"
)

// Classify returns the class of a pipeline error (nil is not an error and
// must not be passed). A quarantine wins over permanent when both wrap.
func Classify(err error) Class {
	var q *QuarantineError
	if errors.As(err, &q) {
		return ClassQuarantine
	}
	var p *PermanentError
	if errors.As(err, &p) {
		return ClassPermanent
	}
	return ClassTransient
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)

// Registry maps pipeline names to pipelines. The zero value is empty and
// ready; it is safe for concurrent use.
type Registry struct {
	mu sync.RWMutex
	m  map[string]Pipeline
}

// Register adds p under name (lower-case letters, digits, '-' and '_', 1–64
// bytes, starting with a letter). Registering a name twice is an error.
func (r *Registry) Register(name string, p Pipeline) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("pipeline: register %q: name must match %s", name, nameRE)
	}
	if p == nil {
		return fmt.Errorf("pipeline: register %q: nil pipeline", name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]Pipeline{}
	}
	if _, ok := r.m[name]; ok {
		return fmt.Errorf("pipeline: register %q: already registered", name)
	}
	r.m[name] = p
	return nil
}

// Lookup returns the pipeline registered under name.
func (r *Registry) Lookup(name string) (Pipeline, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.m[name]
	return p, ok
}

// Names returns the registered names in byte order.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.m))
	for n := range r.m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ValidName reports whether name is a valid pipeline name.
func ValidName(name string) bool { return nameRE.MatchString(name) }
