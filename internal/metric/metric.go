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
// A line carries no "level": with the JSON log format Lambda files it
// INFO and drops it when the function's application log level is above
// INFO ("Log-level filtering", AWS Lambda developer guide,
// https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-log-level.html),
// so the stack (infra/bulkrun) never sets that level above INFO, whatever
// its LogLevel.
//
// Dimensions are low-cardinality only (Stack, Pipeline, Outcome, Reason): every
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
//	FailedItemsPercent Percent   one run's failed and quarantined items among those ended so far (finalize's tick, every
//	                             running run with at least MinEndedForRate ended items; finalize, a finished run); dims [Stack]
//	RetryWaitingPercent Percent  one running run's items waiting for a retry, of its items (finalize's tick, when at least
//	                             MinWaitingForRate wait); dims [Stack]
//	RunStalledSeconds Seconds    how long one running run has counted no item ended (finalize's tick); dims [Stack]
//	MessagesResent Count         messages the item function sent again to its own queue, by Reason (unavailable,
//	                             throttled, paused, slot, track); dims [Stack], [Stack Reason]
//
// Buffered: an Emitter from Buffered collects ItemsRecorded and
// ItemDuration in memory until Flush (the item function flushes at the end
// of each invocation, worker.Worker.Handle): one Items line per pipeline,
// outcome, batch and run with the sum, and ItemDurationMs lines carrying
// up to MaxValuesPerLine values each as an array (EMF: "a metric value
// MUST be a number or an array of numbers ... arrays can contain up to
// 100 values", same specification). CloudWatch derives the same
// statistics from them; CloudWatch Logs ingests two lines per invocation
// instead of two per item (≈ 570 bytes an item: `make bench`,
// docs/design/cost.md). Values an invocation collected and never flushed
// (it was killed) are lost, as lines it never wrote would be.
//
// The last three are per run, with the batch id and run as properties: an
// alarm on their Maximum fires when any one batch passes its threshold,
// and Logs Insights on the finalize function's log group names the batch.
package metric

import (
	"encoding/json"
	"io"
	"math"
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
	// BatchesPausedOnBudget counts batches paused at their budget
	// (BudgetPaused); not in BatchesPaused, whose alarm is an outage's.
	BatchesPausedOnBudget = "BatchesPausedOnBudget"
	// FailedItemsPercent is one run's failures among its ended items.
	FailedItemsPercent = "FailedItemsPercent"
	// RetryWaitingPercent is one running run's share of items waiting for
	// a retry.
	RetryWaitingPercent = "RetryWaitingPercent"
	// RunStalledSeconds is how long one running run has ended no item.
	RunStalledSeconds = "RunStalledSeconds"
	// MessagesResent counts the messages the item function sent again to
	// its own queue: the loops the stack allows (RecursiveLoop Allow).
	MessagesResent = "MessagesResent"
)

// MinEndedForRate and MinWaitingForRate keep the per-run percentages of
// small samples out of the metrics: a run's FailedItemsPercent is written
// once it has ended at least MinEndedForRate items, its
// RetryWaitingPercent while at least MinWaitingForRate items wait (one
// failed item of three is not a rate worth paging for).
const (
	MinEndedForRate   = 10
	MinWaitingForRate = 10
)

// Dimension names.
const (
	DimStack    = "Stack"
	DimPipeline = "Pipeline"
	DimOutcome  = "Outcome"
	// DimReason is why a message was sent again (MessagesResent).
	DimReason = "Reason"
)

// Units, as EMF spells them.
const (
	UnitCount        = "Count"
	UnitMilliseconds = "Milliseconds"
	UnitSeconds      = "Seconds"
	UnitPercent      = "Percent"
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
	// buffered: ItemsRecorded and ItemDuration collect into pending until
	// Flush (Buffered).
	buffered bool
	pending  map[pendingKey]*pendingValues
	order    []pendingKey
}

// MaxValuesPerLine is the most values one EMF line carries for one
// metric: 100 ("Specification: Embedded metric format").
const MaxValuesPerLine = 100

// pendingKey is one line of a buffered emitter: a metric and the
// dimension values and properties its line carries.
type pendingKey struct {
	name, pipeline, outcome, batchID string
	run                              int
}

type pendingValues struct {
	sum    float64   // Items: the count
	values []float64 // ItemDurationMs: each attempt's
}

// New returns an Emitter for stack writing to standard output.
func New(stack string) *Emitter { return &Emitter{Stack: stack} }

// Buffered returns an Emitter writing where e does whose ItemsRecorded and
// ItemDuration collect until Flush (see the package comment); nil for
// nil.
func (e *Emitter) Buffered() *Emitter {
	if e == nil {
		return nil
	}
	return &Emitter{Stack: e.Stack, W: e.W, Now: e.Now, buffered: true}
}

// add collects v under k; a key whose values reach MaxValuesPerLine is
// written at once. It reports false when e does not buffer.
func (e *Emitter) add(k pendingKey, v float64) bool {
	if e == nil || !e.buffered {
		return false
	}
	e.mu.Lock()
	if e.pending == nil {
		e.pending = map[pendingKey]*pendingValues{}
	}
	p := e.pending[k]
	if p == nil {
		p = &pendingValues{}
		e.pending[k] = p
		e.order = append(e.order, k)
	}
	full := false
	if k.name == Items {
		p.sum += v
	} else {
		p.values = append(p.values, v)
		full = len(p.values) >= MaxValuesPerLine
	}
	var values []float64
	if full {
		values, p.values = p.values, nil
	}
	e.mu.Unlock()
	if full {
		e.write(k, values)
	}
	return true
}

// Flush writes what a buffered emitter collected, in the order first
// collected, and forgets it. Nothing for nil or an emitter that does not
// buffer.
func (e *Emitter) Flush() {
	if e == nil || !e.buffered {
		return
	}
	e.mu.Lock()
	pending, order := e.pending, e.order
	e.pending, e.order = nil, nil
	e.mu.Unlock()
	for _, k := range order {
		p := pending[k]
		switch {
		case k.name == Items && p.sum != 0:
			e.itemsLine(k, p.sum)
		case len(p.values) > 0:
			e.write(k, p.values)
		}
	}
}

func (e *Emitter) itemsLine(k pendingKey, n float64) {
	e.count(Items, n, [][]string{{DimStack, DimOutcome}, {DimStack, DimPipeline, DimOutcome}},
		map[string]any{DimPipeline: k.pipeline, DimOutcome: k.outcome, "batch_id": k.batchID, "run": k.run})
}

// write writes a duration line of values: one number, or an array.
func (e *Emitter) write(k pendingKey, values []float64) {
	var v any = values
	if len(values) == 1 {
		v = values[0]
	}
	e.emitValue(ItemDurationMs, UnitMilliseconds, v, [][]string{{DimStack}, {DimStack, DimPipeline}},
		map[string]any{DimPipeline: k.pipeline, "batch_id": k.batchID, "run": k.run})
}

// ItemsRecorded counts n items recorded with outcome in pipeline.
func (e *Emitter) ItemsRecorded(pipeline, outcome string, n int64, batchID string, run int) {
	k := pendingKey{name: Items, pipeline: pipeline, outcome: outcome, batchID: batchID, run: run}
	if e.add(k, float64(n)) {
		return
	}
	e.count(Items, float64(n), [][]string{{DimStack, DimOutcome}, {DimStack, DimPipeline, DimOutcome}},
		map[string]any{DimPipeline: pipeline, DimOutcome: outcome, "batch_id": batchID, "run": run})
}

// ItemDuration records how long one attempt's pipeline ran.
func (e *Emitter) ItemDuration(pipeline string, d time.Duration, batchID string, run int) {
	k := pendingKey{name: ItemDurationMs, pipeline: pipeline, batchID: batchID, run: run}
	if e.add(k, float64(d.Milliseconds())) {
		return
	}
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

// Resent counts one message the item function sent again to its own
// queue (a loop the stack allows, RecursiveLoop Allow, bounded by
// bulkrun: ledger.MaxResends), by why: "unavailable" (AWS throttled or
// failed), "throttled" (the pipeline's downstream throttled the call),
// "paused" (its batch's pause), "slot" (a max_concurrency slot of a
// message sent before tracks), "track" (a track sent on), "rate" (a
// unit waiting for its batch's rate lease).
func (e *Emitter) Resent(pipeline, why, batchID string, run int) {
	e.count(MessagesResent, 1, [][]string{{DimStack}, {DimStack, DimReason}},
		map[string]any{DimPipeline: pipeline, DimReason: why, "batch_id": batchID, "run": run})
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

// BudgetPaused counts one batch of pipeline paused at its budget
// (api.PauseByBudget): BatchesPausedOnBudget, by stack and by pipeline.
func (e *Emitter) BudgetPaused(pipeline, batchID string, run int) {
	e.count(BatchesPausedOnBudget, 1, [][]string{{DimStack}, {DimStack, DimPipeline}}, map[string]any{DimPipeline: pipeline, "batch_id": batchID, "run": run})
}

// RunHealth records one run's health as finalize sees it: the percent of
// its ended items that failed (written only when ended ≥
// MinEndedForRate), the percent of its items waiting for a retry (only
// when waiting ≥ MinWaitingForRate), and, for a running run (stalled ≥ 0),
// how long it has ended no item. items is the run's item count.
func (e *Emitter) RunHealth(batchID string, run int, items, ended, failures, waiting int64, stalled time.Duration) {
	props := map[string]any{"batch_id": batchID, "run": run}
	if ended >= MinEndedForRate {
		e.emit(FailedItemsPercent, UnitPercent, percent(failures, ended), [][]string{{DimStack}}, props)
	}
	if waiting >= MinWaitingForRate && items > 0 {
		e.emit(RetryWaitingPercent, UnitPercent, percent(waiting, items), [][]string{{DimStack}}, props)
	}
	if stalled >= 0 {
		e.emit(RunStalledSeconds, UnitSeconds, float64(stalled.Milliseconds()/1000), [][]string{{DimStack}}, props)
	}
}

// percent is 100 × n / of, to two decimals.
func percent(n, of int64) float64 {
	return math.Round(10000*float64(n)/float64(of)) / 100
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
	e.emitValue(name, unit, v, dims, props)
}

// emitValue is emit with a value that is a number or an array of numbers.
func (e *Emitter) emitValue(name, unit string, v any, dims [][]string, props map[string]any) {
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
