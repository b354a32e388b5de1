package lambdafn

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"go.opentelemetry.io/otel/propagation"
)

// The client context of an invocation carries the call's traceparent and
// tracestate, base64 JSON that aws-lambda-go's lambdacontext.ClientContext
// decodes (Custom) and that holds "Custom" for OpenTelemetry's Node.js
// instrumentation; none without a trace context.
func TestClientContextCarriesTraceparent(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp, "tracestate": "a=1"})
	raw, err := base64.StdEncoding.DecodeString(clientContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	var cc lambdacontext.ClientContext
	var node struct{ Custom map[string]string }
	if err := json.Unmarshal(raw, &cc); err != nil || cc.Custom["traceparent"] != tp || cc.Custom["tracestate"] != "a=1" {
		t.Errorf("client context %s: %+v, %v; want custom traceparent %s, tracestate a=1", raw, cc, err, tp)
	}
	if err := json.Unmarshal(raw, &node); err != nil || node.Custom["traceparent"] != tp {
		t.Errorf("client context %s: Custom %v; want traceparent %s", raw, node.Custom, tp)
	}
	if got := clientContext(context.Background()); got != "" {
		t.Errorf("client context without a trace: %q; want none", got)
	}
}
