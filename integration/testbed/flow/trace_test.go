package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkrun/bulkrun/internal/egress"
	"github.com/bulkrun/bulkrun/internal/pipeline/webhook"
	"github.com/bulkrun/bulkrun/internal/tracing"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// traceReceiver is a webhook receiver that keeps the traceparent and
// tracestate of every call and answers the first call 500 (a transient
// failure: the item is retried), every later one 200.
type traceReceiver struct {
	mu      sync.Mutex
	parents []string
	states  []string
}

func (c *traceReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.parents = append(c.parents, r.Header.Get("traceparent"))
	c.states = append(c.states, r.Header.Get("tracestate"))
	first := len(c.parents) == 1
	c.mu.Unlock()
	if first {
		http.Error(w, "try again", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"ok":true}`))
}

// callerTrace is the submitting call's own trace context: its trace id and
// span id, sampled, and a tracestate.
var callerTrace = http.Header{
	"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	"Tracestate":  {"vendor=opaque"},
}

// traceRig is a rig whose item pipeline is the webhook to rcv, at K = 1,
// with traces (nil: no exporter) on the submitter and the worker.
func traceRig(t *testing.T, traces *tracing.Provider) (*rig, *traceReceiver, string) {
	t.Helper()
	rcv := &traceReceiver{}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	r := newRig(t, webhook.New(nil, egress.MustParse("127.0.0.1")).Run)
	r.worker.Clock = ledger.SystemClock{} // real leases: the calls run under them
	r.sub.Traces, r.worker.Traces = traces, traces
	return r, rcv, fmt.Sprintf(`{"url":%q,"timeout_ms":5000}`, srv.URL)
}

// One batch's trace, from the in-memory exporter: the submitting call's
// traceparent is the parent of the submit's span; the item's two attempts
// (the first answered 500, the second 200) are children of the submit's
// span, the second linked to the first; each attempt's pipeline call is
// its child; and the receiver got, on each call, a traceparent naming that
// call's span in the caller's trace, with the caller's tracestate.
func TestMemTraceSubmitAttemptsCall(t *testing.T) {
	ctx := context.Background()
	exp := tracetest.NewInMemoryExporter()
	r, rcv, opts := traceRig(t, tracing.WithExporter(exp, true))
	callCtx := tracing.Extract(ctx, callerTrace)
	caller := trace.SpanContextFromContext(callCtx)
	res, err := r.sub.Submit(callCtx, api.SubmitRequest{BatchID: "traced", Pipeline: "counted", Source: api.SourceSpec{Items: items(1)},
		ItemsPerMessage: 1, Options: json.RawMessage(opts)})
	if err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	if n := r.callsOf("item-0000000000"); n != 2 {
		t.Fatalf("the pipeline ran %d times; want 2 (a retry)", n)
	}

	spans := exp.GetSpans()
	for _, s := range spans {
		t.Logf("%-28s trace %s span %s parent %s links %d %v", s.Name, s.SpanContext.TraceID(), s.SpanContext.SpanID(), s.Parent.SpanID(), len(s.Links), s.Attributes)
	}
	submits, attempts, calls := named(spans, "submit"), named(spans, "process counted"), named(spans, "call counted")
	if len(submits) != 1 || len(attempts) != 2 || len(calls) != 2 {
		t.Fatalf("spans: %d submit, %d attempts, %d calls; want 1, 2, 2", len(submits), len(attempts), len(calls))
	}
	sub := submits[0]
	if sub.SpanContext.TraceID() != caller.TraceID() || sub.Parent.SpanID() != caller.SpanID() || attr(sub, tracing.AttrBatchID) != "traced" {
		t.Errorf("submit span: trace %s parent %s batch %q; want the caller's trace %s, parent %s, batch traced",
			sub.SpanContext.TraceID(), sub.Parent.SpanID(), attr(sub, tracing.AttrBatchID), caller.TraceID(), caller.SpanID())
	}
	if want := "00-" + caller.TraceID().String() + "-" + sub.SpanContext.SpanID().String() + "-01"; res.Batch.TraceParent != want || res.Batch.TraceState != "vendor=opaque" {
		t.Errorf("batch trace context %q %q; want %q vendor=opaque", res.Batch.TraceParent, res.Batch.TraceState, want)
	}
	runID := ledger.RunID("traced", "item-0000000000")
	for n, a := range attempts {
		attempt := n + 1
		if attr(a, tracing.AttrAttempt) != strconv.Itoa(attempt) || attr(a, tracing.AttrItemKey) != "item-0000000000" || attr(a, tracing.AttrBatchID) != "traced" ||
			attr(a, "messaging.system") != "aws_sqs" {
			t.Errorf("attempt span %d attributes %v", attempt, a.Attributes)
		}
		if a.Parent.SpanID() != sub.SpanContext.SpanID() || a.SpanContext.TraceID() != caller.TraceID() {
			t.Errorf("attempt %d: parent %s trace %s; want the submit span %s in trace %s", attempt, a.Parent.SpanID(), a.SpanContext.TraceID(), sub.SpanContext.SpanID(), caller.TraceID())
		}
		if a.SpanContext.SpanID() != tracing.AttemptSpanID(caller.TraceID(), runID, attempt) {
			t.Errorf("attempt %d: span id %s; want AttemptSpanID %s", attempt, a.SpanContext.SpanID(), tracing.AttemptSpanID(caller.TraceID(), runID, attempt))
		}
		if c := calls[n]; c.Parent.SpanID() != a.SpanContext.SpanID() {
			t.Errorf("call %d: parent %s; want attempt %d's span %s", attempt, c.Parent.SpanID(), attempt, a.SpanContext.SpanID())
		}
	}
	if got := []string{attr(attempts[0], tracing.AttrOutcome), attr(attempts[1], tracing.AttrOutcome)}; got[0] != "retry" || got[1] != "succeeded" {
		t.Errorf("attempt outcomes %v; want [retry succeeded]", got)
	}
	if len(attempts[0].Links) != 0 || len(attempts[1].Links) != 1 || attempts[1].Links[0].SpanContext.SpanID() != attempts[0].SpanContext.SpanID() ||
		attempts[1].Links[0].SpanContext.TraceID() != caller.TraceID() {
		t.Errorf("links: attempt 1 %v, attempt 2 %v; want attempt 2 linked to attempt 1's span %s", attempts[0].Links, attempts[1].Links, attempts[0].SpanContext.SpanID())
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.parents) != 2 {
		t.Fatalf("the receiver got %d calls; want 2", len(rcv.parents))
	}
	for n, tp := range rcv.parents {
		sc := parseParent(tp, rcv.states[n])
		if !sc.IsValid() || sc.TraceID() != caller.TraceID() || sc.SpanID() != calls[n].SpanContext.SpanID() || rcv.states[n] != "vendor=opaque" {
			t.Errorf("call %d: the receiver saw traceparent %q tracestate %q; want call span %s in trace %s, tracestate vendor=opaque",
				n+1, tp, rcv.states[n], calls[n].SpanContext.SpanID(), caller.TraceID())
		}
	}
}

// Without an exporter no span is recorded, but the context still travels:
// the receiver sees the caller's traceparent (its trace id and span id)
// on every call; and a batch submitted without one gets a new root, the
// same trace id on every call and on the batch row.
func TestMemTraceContextWithoutExporter(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"caller", "root"} {
		t.Run(name, func(t *testing.T) {
			r, rcv, opts := traceRig(t, nil)
			sctx := ctx
			if name == "caller" {
				sctx = tracing.Extract(ctx, callerTrace)
			}
			res, err := r.sub.Submit(sctx, api.SubmitRequest{BatchID: "untraced", Pipeline: "counted", Source: api.SourceSpec{Items: items(1)},
				ItemsPerMessage: 1, Options: json.RawMessage(opts)})
			if err != nil {
				t.Fatal(err)
			}
			r.drain(t, ctx, 1)
			want := parseParent(res.Batch.TraceParent, "")
			if !want.IsValid() || name == "caller" && res.Batch.TraceParent != callerTrace.Get("traceparent") {
				t.Fatalf("batch traceparent %q; want the caller's or a new root", res.Batch.TraceParent)
			}
			rcv.mu.Lock()
			defer rcv.mu.Unlock()
			if len(rcv.parents) != 2 {
				t.Fatalf("the receiver got %d calls; want 2", len(rcv.parents))
			}
			for n, tp := range rcv.parents {
				if sc := parseParent(tp, ""); sc.TraceID() != want.TraceID() || sc.SpanID() != want.SpanID() {
					t.Errorf("call %d: traceparent %q; want the batch's %q", n+1, tp, res.Batch.TraceParent)
				}
			}
		})
	}
}

// named is spans of name, in the order they ended.
func named(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// attr is s's attribute k as text ("" when absent).
func attr(s tracetest.SpanStub, k attribute.Key) string {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return ""
}

// parseParent is the span context of a traceparent (and tracestate).
func parseParent(tp, ts string) trace.SpanContext {
	c := propagation.MapCarrier{"traceparent": tp, "tracestate": ts}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), c))
}
