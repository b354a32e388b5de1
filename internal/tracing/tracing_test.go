package tracing

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// New knows none (no-op: nil) and otlp; another exporter name is an
// error wrapping ErrExporter.
func TestNewExporters(t *testing.T) {
	for _, tc := range []struct {
		name    string
		wantNil bool
		wantErr error
	}{{"", true, nil}, {"none", true, nil}, {"otlp", false, nil}, {"jaeger", true, ErrExporter}} {
		p, err := New(context.Background(), tc.name)
		if !errors.Is(err, tc.wantErr) || (p == nil) != tc.wantNil {
			t.Errorf("New(%q) = %v, %v; want nil %v, error %v", tc.name, p, err, tc.wantNil, tc.wantErr)
		}
		_ = p.Shutdown(context.Background())
	}
}

// Carry keeps the caller's context (extracted from its headers) as it is,
// and gives a context without one a new root: a valid traceparent of 55
// bytes, another on each call.
func TestCarry(t *testing.T) {
	h := http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, "Tracestate": {"a=1"}}
	if c := Carry(Extract(context.Background(), h)); c.Parent != h.Get("traceparent") || c.State != "a=1" {
		t.Errorf("Carry of the caller's context: %+v; want its headers", c)
	}
	a, b := Carry(context.Background()), Carry(context.Background())
	sc := trace.SpanContextFromContext(Resume(context.Background(), a))
	if len(a.Parent) != 55 || !sc.IsValid() || a.Parent == b.Parent {
		t.Errorf("new roots %q and %q: want two valid, different traceparents of 55 bytes", a.Parent, b.Parent)
	}
	if sc := trace.SpanContextFromContext(Resume(context.Background(), Context{Parent: "junk"})); sc.IsValid() {
		t.Errorf("Resume of a malformed traceparent: %v; want none", sc)
	}
}

// AttemptSpanID is the same for the same trace, run id and attempt, and
// differs between attempts.
func TestAttemptSpanID(t *testing.T) {
	tid := trace.TraceID{1}
	first, again, second := AttemptSpanID(tid, "r", 1), AttemptSpanID(tid, "r", 1), AttemptSpanID(tid, "r", 2)
	if first != again || first == second || !first.IsValid() {
		t.Error("AttemptSpanID: want deterministic, valid ids that differ per attempt")
	}
}
