package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestRunSafelyReturnsAPanicAsAnError(t *testing.T) {
	p := Func(func(context.Context, Request) (Result, error) { panic(strings.Repeat("boom ", 1000)) })
	_, err := RunSafely(context.Background(), p, Request{})
	if err == nil || !strings.HasPrefix(err.Error(), "pipeline panicked: boom") {
		t.Fatalf("err %v, want the panic as an error", err)
	}
	if len(err.Error()) > MaxErrorTextBytes {
		t.Errorf("error text %d bytes, want ≤ %d", len(err.Error()), MaxErrorTextBytes)
	}
}

type putBlobs map[string][]byte

func (b putBlobs) Put(_ context.Context, key, _ string, body []byte) error {
	b[key] = body
	return nil
}
func (putBlobs) Bucket() string { return "bk" }

func TestStoreOutput(t *testing.T) {
	ctx, b := context.Background(), putBlobs{}
	if in, ref, err := StoreOutput(ctx, b, "B", "R", nil); err != nil || string(in) != "null" || ref != "" {
		t.Errorf("no output: %q %q %v, want null inline", in, ref, err)
	}
	if in, ref, err := StoreOutput(ctx, b, "B", "R", json.RawMessage(`{ "a" : 1 }`)); err != nil || string(in) != `{"a":1}` || ref != "" {
		t.Errorf("small output: %q %q %v, want it compact inline", in, ref, err)
	}
	big := json.RawMessage(`"` + strings.Repeat("x", MaxInlineOutputBytes) + `"`)
	in, ref, err := StoreOutput(ctx, b, "B", "R", big)
	if err != nil || in != nil || ref != "s3://bk/batches/B/item-outputs/R.json" || len(b["batches/B/item-outputs/R.json"]) != len(big) {
		t.Errorf("large output: inline %d bytes, ref %q, %v; want it written and referenced", len(in), ref, err)
	}
	_, _, err = StoreOutput(ctx, b, "B", "R", json.RawMessage(`{nope`))
	var pe *PermanentError
	if !errors.As(err, &pe) {
		t.Errorf("output not JSON: %v, want a permanent error", err)
	}
}
