// Package tracing carries a batch's W3C trace context (Trace Context,
// https://www.w3.org/TR/trace-context/) from the submitting call to every
// item attempt and on to the pipeline's call, and makes bulkrun's spans
// with OpenTelemetry's Go SDK when an exporter is configured.
//
// The spans of one batch, all in the trace of the submit's context:
//
//	submit                     producer; the API call's traceparent header is its parent, else a new root
//	└─ process {pipeline}      consumer; one per item attempt, linked to the attempt before it
//	   └─ call {pipeline}      client; the pipeline's call (webhook: traceparent header; lambda: client context)
//
// The submit's span context is stored once on the batch row
// (ledger.Batch.Trace: traceparent, 55 bytes, and tracestate when the
// caller sent one) and every attempt's span is its child. An attempt's
// span id is derived from the batch's trace id, the item's run id and the
// attempt number (AttemptSpanID), so attempt n links to attempt n−1
// without storing anything more: docs/adr/0030-trace-context-on-the-batch-row.md.
//
// A nil *Provider, and the Provider of exporter "none" (the default), is
// OpenTelemetry's no-op tracer provider: no span is recorded and nothing
// is exported, but the context still travels, so a webhook receives the
// batch's traceparent whatever the exporter. Safe for concurrent use.
package tracing

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.39.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bulkrun/bulkrun/shared/config"
)

// The exporters config.EnvTracesExporter (OTEL_TRACES_EXPORTER) names.
const (
	// ExporterNone records no span (the default): OpenTelemetry's no-op
	// tracer provider.
	ExporterNone = config.TracesNone
	// ExporterOTLP exports spans over OTLP/HTTP (otlptracehttp) to the
	// endpoint OpenTelemetry's standard variables name
	// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
	// _HEADERS, _TIMEOUT, …; default http://localhost:4318, where the ADOT
	// Lambda layer's collector listens).
	ExporterOTLP = config.TracesOTLP
)

// InstrumentationName is the name of bulkrun's tracer (the spans'
// instrumentation scope).
const InstrumentationName = "github.com/bulkrun/bulkrun"

// The attributes bulkrun sets on its spans, besides OpenTelemetry's
// messaging conventions (messaging.system aws_sqs,
// messaging.operation.type, messaging.message.id).
const (
	AttrBatchID  = attribute.Key("bulkrun.batch.id")
	AttrItemKey  = attribute.Key("bulkrun.item.key")
	AttrRunID    = attribute.Key("bulkrun.item.run_id")
	AttrRun      = attribute.Key("bulkrun.run")
	AttrAttempt  = attribute.Key("bulkrun.attempt")
	AttrOutcome  = attribute.Key("bulkrun.outcome")
	AttrPipeline = attribute.Key("bulkrun.pipeline")
)

// ErrExporter is the error of an exporter name New does not know.
var ErrExporter = errors.New("unknown traces exporter")

// Provider makes bulkrun's spans. The zero value and nil are no-op.
type Provider struct {
	tracer trace.Tracer
	sdk    *sdktrace.TracerProvider
}

// New is the Provider of exporter ("" or ExporterNone: no-op;
// ExporterOTLP: OTLP/HTTP, configured by OpenTelemetry's standard
// OTEL_EXPORTER_OTLP_* variables, spans batched and sent at the latest
// when Flush is called). Another name is an error wrapping ErrExporter.
func New(ctx context.Context, exporter string) (*Provider, error) {
	switch exporter {
	case "", ExporterNone:
		return nil, nil
	case ExporterOTLP:
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("traces exporter otlp: %w", err)
		}
		return WithExporter(exp, false), nil
	}
	return nil, fmt.Errorf("%w %q: want %q or %q", ErrExporter, exporter, ExporterNone, ExporterOTLP)
}

// WithExporter is a Provider that records every span and hands it to exp:
// at once when sync (tests: tracetest.InMemoryExporter), else in batches
// flushed by Flush. Its resource is the SDK's default (service.name from
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES, the SDK's attributes).
func WithExporter(exp sdktrace.SpanExporter, sync bool) *Provider {
	proc := sdktrace.WithBatcher(exp)
	if sync {
		proc = sdktrace.WithSyncer(exp)
	}
	res, err := sdkresource.Merge(sdkresource.Default(), sdkresource.Environment())
	if err != nil {
		res = sdkresource.Default()
	}
	tp := sdktrace.NewTracerProvider(proc, sdktrace.WithIDGenerator(idGenerator{}), sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	return &Provider{tracer: tp.Tracer(InstrumentationName), sdk: tp}
}

func (p *Provider) tracerOf() trace.Tracer {
	if p == nil || p.tracer == nil {
		return noop.Tracer{}
	}
	return p.tracer
}

// Flush exports the spans ended so far (a Lambda invocation calls it
// before it returns: the process may be frozen after). No-op without an
// exporter.
func (p *Provider) Flush(ctx context.Context) error {
	if p == nil || p.sdk == nil {
		return nil
	}
	return p.sdk.ForceFlush(ctx)
}

// Shutdown flushes and stops the exporter.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.sdk == nil {
		return nil
	}
	return p.sdk.Shutdown(ctx)
}

// propagator is W3C Trace Context: traceparent and tracestate.
var propagator = propagation.TraceContext{}

// Extract is ctx with the remote span context of h's traceparent and
// tracestate headers (an absent or malformed traceparent: ctx as is).
func Extract(ctx context.Context, h http.Header) context.Context {
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// Context is a batch's W3C trace context as stored on its row:
// traceparent ("00-{32 hex trace id}-{16 hex span id}-{2 hex flags}", 55
// bytes) and tracestate (vendor entries, at most 512 bytes; usually
// empty).
type Context struct {
	Parent string
	State  string
}

// submitKey marks a context whose submit span is started.
type submitKey struct{}

// StartSubmit starts the submit's span, a child of ctx's span context
// (Extract's remote one, the API call's) or a new root; a ctx under a
// submit span already (Accept handing on to Submit) gets no second one.
// end ends the span with the batch's id ("" when the submit failed before
// it had one) and the submit's error (nil: status unset).
func (p *Provider) StartSubmit(ctx context.Context) (_ context.Context, end func(batchID string, err error)) {
	if ctx.Value(submitKey{}) != nil {
		return ctx, func(string, error) {}
	}
	ctx = context.WithValue(ctx, submitKey{}, true)
	ctx, span := p.tracerOf().Start(ctx, "submit", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(semconv.MessagingSystemAWSSQS, semconv.MessagingOperationTypeSend))
	return ctx, func(batchID string, err error) {
		if batchID != "" {
			span.SetAttributes(AttrBatchID.String(batchID))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// Carry is the trace context a batch created under ctx stores: ctx's span
// context (the submit's span; with the no-op provider the caller's), or,
// when ctx has none, a new root (random trace and span ids, not sampled)
// so that every batch has one trace id.
func Carry(ctx context.Context) Context {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		var tid trace.TraceID
		var sid trace.SpanID
		for !tid.IsValid() || !sid.IsValid() {
			_, _ = rand.Read(tid[:])
			_, _ = rand.Read(sid[:])
		}
		sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})
	}
	carrier := propagation.MapCarrier{}
	propagator.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	return Context{Parent: carrier["traceparent"], State: carrier["tracestate"]}
}

// Resume is ctx under the remote span context c names (nothing when c's
// traceparent is empty or malformed: a batch stored before traces).
func Resume(ctx context.Context, c Context) context.Context {
	if c.Parent == "" {
		return ctx
	}
	carrier := propagation.MapCarrier{"traceparent": c.Parent}
	if c.State != "" {
		carrier["tracestate"] = c.State
	}
	return propagator.Extract(ctx, carrier)
}

// Attempt names one item attempt's span.
type Attempt struct {
	BatchID, Key, RunID string
	Run, Attempt        int
	Pipeline            string
	MessageID           string // the SQS message id of the delivery
}

// spanIDKey asks idGenerator for a given span id.
type spanIDKey struct{}

// AttemptSpanID is the span id of attempt n of run id runID in trace tid:
// the first 8 bytes of SHA-256("{trace id}/{run id}/{n}") (all zero
// replaced by 1). Deterministic, so attempt n+1 links to it without
// reading it anywhere.
func AttemptSpanID(tid trace.TraceID, runID string, n int) trace.SpanID {
	sum := sha256.Sum256([]byte(tid.String() + "/" + runID + "/" + strconv.Itoa(n)))
	var sid trace.SpanID
	copy(sid[:], sum[:8])
	if !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], 1)
	}
	return sid
}

// StartAttempt starts the span of one item attempt, a child of the batch
// context ctx carries (Resume): its span id is AttemptSpanID, and an
// attempt after the first links to the one before it (the same item's
// attempt n−1: a retry, or a redelivery that took over an interrupted
// attempt; an attempt given back before its call has no span, so such a
// link may name a span never exported). end ends the span with the
// attempt's outcome ("" while the item waits for a retry).
func (p *Provider) StartAttempt(ctx context.Context, a Attempt) (_ context.Context, end func(outcome string, err error)) {
	tr := p.tracerOf()
	if _, isNoop := tr.(noop.Tracer); isNoop {
		return ctx, func(string, error) {}
	}
	tid := trace.SpanContextFromContext(ctx).TraceID()
	attrs := []attribute.KeyValue{AttrBatchID.String(a.BatchID), AttrItemKey.String(a.Key), AttrRunID.String(a.RunID),
		AttrRun.Int(a.Run), AttrAttempt.Int(a.Attempt), AttrPipeline.String(a.Pipeline),
		semconv.MessagingSystemAWSSQS, semconv.MessagingOperationTypeProcess}
	if a.MessageID != "" {
		attrs = append(attrs, semconv.MessagingMessageID(a.MessageID))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
	if a.Attempt > 1 && tid.IsValid() {
		prev := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: AttemptSpanID(tid, a.RunID, a.Attempt-1),
			TraceFlags: trace.SpanContextFromContext(ctx).TraceFlags(), Remote: true})
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: prev, Attributes: []attribute.KeyValue{AttrAttempt.Int(a.Attempt - 1)}}))
	}
	if tid.IsValid() {
		ctx = context.WithValue(ctx, spanIDKey{}, AttemptSpanID(tid, a.RunID, a.Attempt))
	}
	ctx, span := tr.Start(ctx, "process "+a.Pipeline, opts...)
	ctx = context.WithValue(ctx, spanIDKey{}, nil)
	return ctx, func(outcome string, err error) {
		if outcome != "" {
			span.SetAttributes(AttrOutcome.String(outcome))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// StartCall starts the span of a pipeline's call, a child of the attempt's
// span in ctx; the pipeline propagates ctx's span context (the webhook's
// traceparent header, the lambda pipeline's client context).
func (p *Provider) StartCall(ctx context.Context, pipeline string) (_ context.Context, end func(err error)) {
	tr := p.tracerOf()
	if _, isNoop := tr.(noop.Tracer); isNoop {
		return ctx, func(error) {}
	}
	ctx, span := tr.Start(ctx, "call "+pipeline, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(AttrPipeline.String(pipeline)))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// idGenerator is the SDK's random ids, but the span id a context asks
// for (spanIDKey: an attempt's AttemptSpanID).
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	for !tid.IsValid() {
		_, _ = rand.Read(tid[:])
	}
	return tid, idGenerator{}.NewSpanID(ctx, tid)
}

func (idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if sid, ok := ctx.Value(spanIDKey{}).(trace.SpanID); ok && sid.IsValid() {
		return sid
	}
	var sid trace.SpanID
	for !sid.IsValid() {
		_, _ = rand.Read(sid[:])
	}
	return sid
}
