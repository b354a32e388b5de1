// Package metric writes bulkrun's CloudWatch metrics as embedded metric
// format (EMF) log lines: one JSON object per line on the function's
// standard output, which Lambda sends to CloudWatch Logs, where CloudWatch
// extracts the metrics asynchronously (no PutMetricData call, no latency on
// the item path). Stdlib only.
//
// Document shape, from "Specification: Embedded metric format"
// (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html):
//
//	{"_aws":{"Timestamp":<epoch ms>,"CloudWatchMetrics":[{"Namespace":"bulkrun",
//	  "Dimensions":[["Stack","Pipeline"],...],"Metrics":[{"Name":"ItemDurationMs","Unit":"Milliseconds"}]}]},
//	 "Stack":"bulkrun","Pipeline":"webhook","ItemDurationMs":1234,"batch_id":"b-1"}
//
// Dimensions are low-cardinality only (Stack, Pipeline, Outcome): every
// distinct dimension combination is a custom metric billed on its own. The
// batch id and run are properties — searchable in CloudWatch Logs Insights,
// never dimensions.
//
// Metrics (namespace Namespace):
//
//	Items          Count         recorded outcomes (cancelled and dead-lettered included); dims [Stack Outcome], [Stack Pipeline Outcome]
//	DeadLettered   Count         items recorded failed from the dead-letter queue; dims [Stack], [Stack Pipeline]
//	Retries        Count         transient failures sent back for another attempt; dims [Stack], [Stack Pipeline]
//	ItemDurationMs Milliseconds  pipeline run time of one attempt; dims [Stack], [Stack Pipeline]
//	FannedOut      Count         item messages sent by a fan-out chunk (Sum per minute = fan-out rate); dims [Stack]
//	FinalizeLagMs  Milliseconds  from a run's last recorded outcome to its report; dims [Stack]
//	TickFailures   Count         finalize ticks that returned an error; dims [Stack]
//	RunsFinalizeFailed Count     runs ended finalize_failed (they could not be finished); dims [Stack]
//	BatchesPaused  Count         batches that paused themselves on an outage of their downstream; dims [Stack], [Stack Pipeline]
//	BatchesUnpaused Count        outage pauses ended by a probe that was answered; dims [Stack], [Stack Pipeline]
package metric

import (
	"encoding/json"
	"io"
	"os"
	"sync"
	"time"
)

// Namespace is the CloudWatch namespace of every bulkrun metric.
const Namespace = "bulkrun"

// Metric names (the EMF "Name" and the JSON member holding the value).
const (
	Items          = "Items"
	DeadLettered   = "DeadLettered"
	Retries        = "Retries"
	ItemDurationMs = "ItemDurationMs"
	FannedOut      = "FannedOut"
	FinalizeLagMs  = "FinalizeLagMs"
	TickFailures   = "TickFailures"
	// RunsFinalizeFailed counts runs ended finalize_failed.
	RunsFinalizeFailed = "RunsFinalizeFailed"
	// BatchesPaused counts batches paused on an outage; BatchesUnpaused
	// the outage pauses a probe ended.
	BatchesPaused   = "BatchesPaused"
	BatchesUnpaused = "BatchesUnpaused"
)

// Dimension names.
const (
	DimStack    = "Stack"
	DimPipeline = "Pipeline"
	DimOutcome  = "Outcome"
)

// Units, as EMF spells them.
const (
	UnitCount        = "Count"
	UnitMilliseconds = "Milliseconds"
)

// Emitter writes EMF lines. A nil *Emitter discards everything, so code
// that emits need not check whether metrics are configured. Safe for
// concurrent use: each line is written with one Write call under a lock.
type Emitter struct {
	// Stack is the Stack dimension's value (the CloudFormation stack name),
	// which keeps two stacks in one account and region apart.
	Stack string
	// W receives the lines. Default os.Stdout.
	W io.Writer
	// Now gives the Timestamp. Default time.Now.
	Now func() time.Time

	mu sync.Mutex
}

// New returns an Emitter for stack writing to standard output.
func New(stack string) *Emitter { return &Emitter{Stack: stack} }

// ItemsRecorded counts n items recorded with outcome in pipeline.
func (e *Emitter) ItemsRecorded(pipeline, outcome string, n int64, batchID string, run int) {
	e.count(Items, float64(n), [][]string{{DimStack, DimOutcome}, {DimStack, DimPipeline, DimOutcome}},
		map[string]any{DimPipeline: pipeline, DimOutcome: outcome, "batch_id": batchID, "run": run})
}

// ItemDuration records how long one attempt's pipeline ran.
func (e *Emitter) ItemDuration(pipeline string, d time.Duration, batchID string, run int) {
	e.emit(ItemDurationMs, UnitMilliseconds, float64(d.Milliseconds()), [][]string{{DimStack}, {DimStack, DimPipeline}},
		map[string]any{DimPipeline: pipeline, "batch_id": batchID, "run": run})
}

// DeadLetters counts n items recorded failed from the dead-letter queue
// (one item message, or the items of a fan-out message).
func (e *Emitter) DeadLetters(pipeline string, n int64, batchID string, run int) {
	e.count(DeadLettered, float64(n), [][]string{{DimStack}, {DimStack, DimPipeline}},
		map[string]any{DimPipeline: pipeline, "batch_id": batchID, "run": run})
}

// Retry counts one transient failure sent back to the queue.
func (e *Emitter) Retry(pipeline, batchID string, run int) {
	e.count(Retries, 1, [][]string{{DimStack}, {DimStack, DimPipeline}},
		map[string]any{DimPipeline: pipeline, "batch_id": batchID, "run": run})
}

// FanOut counts n item messages sent by one fan-out chunk.
func (e *Emitter) FanOut(n int64, batchID string, run int) {
	e.count(FannedOut, float64(n), [][]string{{DimStack}}, map[string]any{"batch_id": batchID, "run": run})
}

// FinalizeLag records the time from a run's last recorded outcome to the
// writing of its report.
func (e *Emitter) FinalizeLag(d time.Duration, batchID string, run int) {
	e.emit(FinalizeLagMs, UnitMilliseconds, float64(max(d, 0).Milliseconds()), [][]string{{DimStack}},
		map[string]any{"batch_id": batchID, "run": run})
}

// TickFailed counts one finalize tick that returned an error.
func (e *Emitter) TickFailed() {
	e.count(TickFailures, 1, [][]string{{DimStack}}, nil)
}

// RunFinalizeFailed counts one run ended finalize_failed: its items ended
// but it could not be finished.
func (e *Emitter) RunFinalizeFailed(batchID string, run int) {
	e.count(RunsFinalizeFailed, 1, [][]string{{DimStack}}, map[string]any{"batch_id": batchID, "run": run})
}

// Paused counts one batch of pipeline paused on an outage (paused) or
// unpaused by its probe (not paused).
func (e *Emitter) Paused(pipeline string, paused bool, batchID string, run int) {
	name := BatchesUnpaused
	if paused {
		name = BatchesPaused
	}
	e.count(name, 1, [][]string{{DimStack}, {DimStack, DimPipeline}}, map[string]any{DimPipeline: pipeline, "batch_id": batchID, "run": run})
}

func (e *Emitter) count(name string, v float64, dims [][]string, props map[string]any) {
	e.emit(name, UnitCount, v, dims, props)
}

type directive struct {
	Namespace  string       `json:"Namespace"`
	Dimensions [][]string   `json:"Dimensions"`
	Metrics    []definition `json:"Metrics"`
}

type definition struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

type metadata struct {
	Timestamp         int64       `json:"Timestamp"`
	CloudWatchMetrics []directive `json:"CloudWatchMetrics"`
}

// emit writes one EMF document: props and the Stack dimension as root
// members, the value under name. Errors of the writer are dropped: a
// metric is never worth failing an item for.
func (e *Emitter) emit(name, unit string, v float64, dims [][]string, props map[string]any) {
	if e == nil {
		return
	}
	now := time.Now
	if e.Now != nil {
		now = e.Now
	}
	doc := make(map[string]any, len(props)+3)
	for k, p := range props {
		doc[k] = p
	}
	doc[DimStack] = e.Stack
	doc[name] = v
	doc["_aws"] = metadata{
		Timestamp: now().UnixMilli(),
		CloudWatchMetrics: []directive{{
			Namespace: Namespace, Dimensions: dims,
			Metrics: []definition{{Name: name, Unit: unit}},
		}},
	}
	line, err := json.Marshal(doc) // map keys sorted: stable lines
	if err != nil {
		return
	}
	w := e.W
	if w == nil {
		w = os.Stdout
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = w.Write(append(line, '\n'))
}
