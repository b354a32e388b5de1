//go:build integration

package integration

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bulkrun/bulkrun/internal/pyfunc"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// exampleFunction is the Python example's function name: the emulator
// stack allow-lists it by default (bulkrun.DefaultEmulatorLambdaFunctions).
const exampleFunction = "bulkrun-example-python"

// exampleCallsPrefix is where the example records its calls (calls.py).
const exampleCallsPrefix = "it-lambda-calls/"

var deployExample struct {
	once sync.Once
	err  error
}

// deployExampleFunction deploys examples/lambda-python onto the emulator
// as exampleFunction (created, or its code and settings replaced), with
// its calls recorded under exampleCallsPrefix of the stack's bucket, and
// waits until it is active.
func deployExampleFunction(t *testing.T) {
	t.Helper()
	deployExample.once.Do(func() { deployExample.err = deployPython(context.Background()) })
	if deployExample.err != nil {
		t.Fatalf("deploy %s: %v", exampleFunction, deployExample.err)
	}
}

func deployPython(ctx context.Context) error {
	return pyfunc.Deploy(ctx, env.lambda, pyfunc.Function{Name: exampleFunction, Dir: filepath.Join("..", "examples", "lambda-python"),
		Env: map[string]string{"BULKRUN_EXAMPLE_CALLS_BUCKET": env.bucket, "BULKRUN_EXAMPLE_CALLS_PREFIX": exampleCallsPrefix}})
}

// exampleCallObjects lists the objects recording the example's calls of
// a batch: object key → "{attempt}-{outcome}-{uuid}".
func exampleCallObjects(t *testing.T, batchID string) map[string]string {
	t.Helper()
	out := map[string]string{}
	p := s3.NewListObjectsV2Paginator(env.s3, &s3.ListObjectsV2Input{Bucket: &env.bucket, Prefix: aws.String(exampleCallsPrefix + batchID + "/")})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Error(err)
			return out
		}
		for _, o := range page.Contents {
			out[aws.ToString(o.Key)] = strings.TrimPrefix(aws.ToString(o.Key), exampleCallsPrefix+batchID+"/")
		}
	}
	return out
}

// exampleCalls lists the example's recorded calls of a batch: item key →
// "{attempt}-{outcome}" per call.
func exampleCalls(t *testing.T, batchID string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for object, rest := range exampleCallObjects(t, batchID) {
		parts := strings.Split(rest, "/")
		key, err := hex.DecodeString(parts[0])
		if err != nil || len(parts) != 2 {
			t.Fatalf("call object %s", object)
		}
		call := parts[1][:strings.LastIndex(parts[1], "-")]
		out[string(key)] = append(out[string(key)], call)
	}
	return out
}

// TestLambdaPipelinePython guards the product line "pipelines in any
// language": a Python function (examples/lambda-python, deployed onto the
// emulator here) runs as the built-in lambda pipeline. Its answers become
// the outcomes — output and cost on success, a permanent error fails the
// item, a quarantine sets it aside, a raised exception is retried and the
// next attempt succeeds — and under duplicate delivery (every item's
// message sent twice more) each item is answered successfully exactly
// once, counted by the function itself. A function outside the stack's
// allow-list is a 400 naming pipeline_options.function.
func TestLambdaPipelinePython(t *testing.T) {
	deployExampleFunction(t)
	ctx := context.Background()

	_, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: newID(t), Pipeline: "lambda",
		Source: api.SourceSpec{Items: json.RawMessage(`[{"text":"x"}]`)}, Options: json.RawMessage(`{"function":"not-allowed"}`)})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Body.Field != "pipeline_options.function" || !strings.Contains(ae.Body.Message, exampleFunction) {
		t.Fatalf("function outside the allow-list: %v, want a 400 naming pipeline_options.function and the list", err)
	}

	const ok = 12
	var lines []string
	for i := range ok {
		lines = append(lines, fmt.Sprintf(`{"text":"word %d of item"}`, i))
	}
	lines = append(lines, `{"fail":"permanent"}`, `{"fail":"quarantine"}`, `{"fail":"transient","until_attempt":2}`)
	perm, quar, flaky := api.PositionalKey(ok), api.PositionalKey(ok+1), api.PositionalKey(ok+2)
	items := json.RawMessage("[" + strings.Join(lines, ",") + "]")
	id := newID(t)
	t.Cleanup(func() {
		_ = env.api.Forget(context.Background(), id)
		for key := range exampleCallObjects(t, id) {
			_, _ = env.s3.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &env.bucket, Key: aws.String(key)})
		}
	})
	b, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "lambda", Source: api.SourceSpec{Items: items},
		Options: json.RawMessage(`{"function":"` + exampleFunction + `","params":{"model":"v1"}}`)})
	if err != nil {
		t.Fatal(err)
	}
	// Every item's message twice more, straight to the items queue.
	var raw []json.RawMessage
	for _, in := range lines {
		raw = append(raw, json.RawMessage(in))
	}
	bodies := fanOutBodies(t, ledger.Batch{Batch: b.Batch}, raw)
	sendRaw(t, append(bodies, bodies...))

	v := wait(t, id)
	if v.Census.Succeeded != ok+1 || v.Census.Failed != 1 || v.Census.Quarantined != 1 {
		t.Fatalf("batch: %s %+v, want %d succeeded, 1 failed, 1 quarantined", v.Status, v.Census, ok+1)
	}
	// Each item's cost is its ending attempt's answer: one call each.
	if got := v.Census.Cost.Text("calls"); got != fmt.Sprint(ok+3) {
		t.Errorf("cost calls %s, want %d", got, ok+3)
	}
	rep, err := env.api.Report(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range readResults(t, rep.Results.Files[api.OutcomeSucceeded].URI) {
		var out struct {
			Words int    `json:"words"`
			Upper string `json:"upper"`
		}
		if err := json.Unmarshal(l.Output, &out); err != nil || l.Key != flaky && (out.Words != 4 || !strings.HasPrefix(out.Upper, "WORD ")) {
			t.Errorf("succeeded line %+v: want the function's output", l)
		}
		if l.Key == flaky && l.Attempts != 2 {
			t.Errorf("flaky item: %d attempts, want 2", l.Attempts)
		}
	}
	failed := readResults(t, rep.Results.Files[api.OutcomeFailed].URI)
	if len(failed) != 1 || failed[0].Key != perm || failed[0].Reason != api.ReasonPermanent || !strings.Contains(failed[0].Error, "asked to fail: permanent") {
		t.Errorf("failed lines %+v, want %s permanent with the function's message", failed, perm)
	}
	quarantined := readResults(t, rep.Results.Files[api.OutcomeQuarantined].URI)
	if len(quarantined) != 1 || quarantined[0].Key != quar || quarantined[0].Reason != api.ReasonQuarantine {
		t.Errorf("quarantined lines %+v, want %s", quarantined, quar)
	}

	// The function's own count: one call per item answered, except the
	// flaky item's raised first attempt.
	calls := exampleCalls(t, id)
	if len(calls) != len(lines) {
		t.Errorf("the function was called for %d items, want %d: %v", len(calls), len(lines), calls)
	}
	successes := 0
	for key, cs := range calls {
		want := []string{"1-ok"}
		switch key {
		case perm:
			want = []string{"1-permanent"}
		case quar:
			want = []string{"1-quarantine"}
		case flaky:
			want = []string{"1-TransientError", "2-ok"}
		}
		if strings.Join(slices.Sorted(slices.Values(cs)), ",") != strings.Join(want, ",") {
			t.Errorf("item %s: calls %v, want %v", key, cs, want)
		}
		for _, c := range cs {
			if strings.HasSuffix(c, "-ok") {
				successes++
			}
		}
	}
	t.Logf("python function calls: %d items, %d successful calls, %d calls in all (3 deliveries of each item's message)", len(calls), successes, countCalls(calls))
}

func countCalls(calls map[string][]string) int {
	n := 0
	for _, cs := range calls {
		n += len(cs)
	}
	return n
}
