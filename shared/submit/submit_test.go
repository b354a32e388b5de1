package submit

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/source"
)

// TestSubmitValidate guards submit's refusals; its "unknown pipeline" case
// guards that the refusal says where a pipeline is registered.
func TestSubmitValidate(t *testing.T) {
	s := &Submitter{Pipelines: []string{"webhook"}}
	items := json.RawMessage(`[1]`)
	tests := []struct {
		name      string
		req       api.SubmitRequest
		wantField string
	}{
		{"ok", api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: items}, Headers: map[string]string{"X-Tenant": "acme"}}, ""},
		{"unknown pipeline", api.SubmitRequest{Pipeline: "nope", Source: api.SourceSpec{Items: items}}, "pipeline"},
		{"reserved header", api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: items}, Headers: map[string]string{"Bulkrun.Attempt": "1"}}, "headers.Bulkrun.Attempt"},
		{"header name with space", api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: items}, Headers: map[string]string{"X A": "1"}}, "headers.X A"},
		{"header value with CRLF", api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: items}, Headers: map[string]string{"X-A": "v\r\nInjected: 1"}}, "headers.X-A"},
		{"interrupt policy", api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: items}, OnInterrupt: "maybe"}, "on_interrupt"},
		{"options not an object", api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: items}, Options: json.RawMessage(`[1]`)}, "pipeline_options"},
		{"max attempts", api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: items}, MaxAttempts: 101}, "max_attempts"},
		{"items per message 100", api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: items}, ItemsPerMessage: 100}, ""},
		{"items per message 101", api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: items}, ItemsPerMessage: 101}, "items_per_message"},
		{"items per message negative", api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: items}, ItemsPerMessage: -1}, "items_per_message"},
		{"items per message with max concurrency", api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: items}, ItemsPerMessage: 10, MaxConcurrency: 5}, ""},
		{"one item per message with max concurrency", api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: items}, ItemsPerMessage: 1, MaxConcurrency: 5}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Validate(&tt.req)
			if tt.name == "unknown pipeline" && (err == nil || !strings.Contains(err.Error(), api.RegisterPipelineHint)) {
				t.Fatalf("unknown pipeline error %v does not say where to register", err)
			}
			var ie *api.InputError
			if tt.wantField == "" && err != nil || tt.wantField != "" && (!errors.As(err, &ie) || ie.Field != tt.wantField) {
				t.Fatalf("Validate = %v, want field %q", err, tt.wantField)
			}
		})
	}
}

// TestItemsPerMessageRefusalNamesTheDefault guards the refusal of an
// out-of-range items_per_message: it says what 0 means on this stack
// (its default), not "(0: 1)", which a user read as 0 giving one item
// per message while the batch ran at 10.
func TestItemsPerMessageRefusalNamesTheDefault(t *testing.T) {
	s := &Submitter{Pipelines: []string{"webhook"}, ItemsPerMessage: 10}
	err := s.Validate(&api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: json.RawMessage(`[1]`)}, ItemsPerMessage: 300})
	if err == nil || !strings.Contains(err.Error(), "300 is not within 1–100 (0: the stack's default, 10)") {
		t.Fatalf("Validate = %v, want the range and the stack's default", err)
	}
}

func TestSameSettings(t *testing.T) {
	base := ledger.Batch{Batch: api.Batch{Plan: api.Plan{Pipeline: "webhook", Options: json.RawMessage(`{"url": "http://a"}`), MaxAttempts: 3, OnInterrupt: api.InterruptRetry}}}
	same := base
	same.Options = json.RawMessage(`{"url":"http://a"}`)
	if f, _, _ := base.DiffPlan(same); f != "" {
		t.Fatalf("whitespace in options is not a difference: %s", f)
	}
	same.ItemsPerMessage = 1 // a row written before the option holds 0: the same plan
	if f, _, _ := base.DiffPlan(same); f != "" {
		t.Fatalf("items per message 0 and 1 differ: %s", f)
	}
	same = base
	same.Priority = 1
	if f, _, _ := base.DiffPlan(same); f != "" {
		t.Fatalf("priority 0 and 1 differ: %s", f)
	}
	for _, tt := range []struct {
		edit func(*ledger.Batch)
		want string
	}{
		{func(b *ledger.Batch) { b.Pipeline = "thumbnail" }, "pipeline"},
		{func(b *ledger.Batch) { b.Options = json.RawMessage(`{"url":"http://b"}`) }, "pipeline_options"},
		{func(b *ledger.Batch) { b.Headers = map[string]string{"X": "1"} }, "headers"},
		{func(b *ledger.Batch) { p := 5.0; b.Threshold.FailurePercent = &p }, "threshold"},
		{func(b *ledger.Batch) { b.MaxAttempts = 4 }, "max_attempts"},
		{func(b *ledger.Batch) { b.MaxConcurrency = 3 }, "max_concurrency"},
		{func(b *ledger.Batch) { b.Priority = 3 }, "priority"},
		{func(b *ledger.Batch) { b.ItemsPerMessage = 10 }, "items_per_message"},
		{func(b *ledger.Batch) { f := false; b.StopOnThreshold = &f }, "stop_on_threshold"},
		{func(b *ledger.Batch) { b.OnInterrupt = api.InterruptQuarantine }, "on_interrupt"},
	} {
		other := base
		tt.edit(&other)
		if f, _, _ := base.DiffPlan(other); f != tt.want {
			t.Errorf("DiffPlan = %q, want %q", f, tt.want)
		}
	}
}

// Submit past the gateway timeout, point 1: a repeated submit of a batch
// still submitting is the same batch only with the same request; otherwise
// the first field that differs is named (409). Rerun is a property of one
// call, not of the batch. Guards docs/api.md "Using it" (POST /batches answers).
func TestSameRequest(t *testing.T) {
	base := api.SubmitRequest{BatchID: "b", Pipeline: "webhook", KeyField: "k", Source: api.SourceSpec{Object: "s3://x/a.jsonl"},
		Options: json.RawMessage(`{"url": "http://a"}`), MaxAttempts: 3, OnInterrupt: api.InterruptRetry}
	for _, tt := range []struct {
		name string
		edit func(*api.SubmitRequest)
		want string
	}{
		{"identical", func(*api.SubmitRequest) {}, ""},
		{"options spaced differently", func(r *api.SubmitRequest) { r.Options = json.RawMessage(`{"url":"http://a"}`) }, ""},
		{"rerun asked", func(r *api.SubmitRequest) { r.Rerun = true }, ""},
		{"other object", func(r *api.SubmitRequest) { r.Source.Object = "s3://x/b.jsonl" }, "source"},
		{"format named", func(r *api.SubmitRequest) { r.Source.Format = api.FormatJSONL }, "source"},
		{"prefix instead", func(r *api.SubmitRequest) { r.Source = api.SourceSpec{Prefix: "s3://x/"} }, "source"},
		{"other key field", func(r *api.SubmitRequest) { r.KeyField = "id" }, "key_field"},
		{"other pipeline", func(r *api.SubmitRequest) { r.Pipeline = "thumbnail" }, "pipeline"},
		{"other options", func(r *api.SubmitRequest) { r.Options = json.RawMessage(`{"url":"http://b"}`) }, "pipeline_options"},
		{"other attempts", func(r *api.SubmitRequest) { r.MaxAttempts = 2 }, "max_attempts"},
		{"a concurrency limit", func(r *api.SubmitRequest) { r.MaxConcurrency = 3 }, "max_concurrency"},
		{"a priority", func(r *api.SubmitRequest) { r.Priority = 2 }, "priority"},
		{"a threshold", func(r *api.SubmitRequest) { c := int64(1); r.Threshold.FailureCount = &c }, "threshold"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			given := base
			tt.edit(&given)
			if f, _, _ := sameRequest(base, given); f != tt.want {
				t.Errorf("sameRequest = %q, want %q", f, tt.want)
			}
		})
	}
}

// The stack's default items per message (Submitter.ItemsPerMessage,
// BULKRUN_ITEMS_PER_MESSAGE) applies to a request that sets none; a
// request's own value wins; a request with max_concurrency gets it too
// (a pack holds one slot and runs its items one at a time).
func TestSubmitterDefaultItemsPerMessage(t *testing.T) {
	items := json.RawMessage(`[1]`)
	for _, tt := range []struct {
		name      string
		stack     int
		req       api.SubmitRequest
		wantItems int
	}{
		{"no default", 0, api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: items}}, 1},
		{"stack default", 10, api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: items}}, 10},
		{"request wins", 10, api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: items}, ItemsPerMessage: 3}, 3},
		{"max concurrency gets the default too", 10, api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: items}, MaxConcurrency: 5}, 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &Submitter{Pipelines: []string{"webhook"}, MaxAttempts: 3, ItemsPerMessage: tt.stack}
			req := tt.req
			if err := s.prepare(&req); err != nil {
				t.Fatal(err)
			}
			if req.ItemsPerMessage != tt.wantItems {
				t.Fatalf("items per message %d, want %d", req.ItemsPerMessage, tt.wantItems)
			}
		})
	}
}

// TestMaxConcurrencyValidate guards the per-batch max_concurrency option's
// bounds: 0 (unlimited) to api.MaxBatchConcurrency; anything else is refused
// naming the field.
func TestMaxConcurrencyValidate(t *testing.T) {
	s := &Submitter{Pipelines: []string{"webhook"}}
	for _, tt := range []struct {
		n  int
		ok bool
	}{
		{0, true}, {1, true}, {3, true}, {api.MaxBatchConcurrency, true},
		{-1, false}, {api.MaxBatchConcurrency + 1, false},
	} {
		req := api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: json.RawMessage(`[1]`)}, MaxConcurrency: tt.n}
		err := s.Validate(&req)
		var ie *api.InputError
		switch {
		case tt.ok && err != nil:
			t.Errorf("max_concurrency %d: %v, want accepted", tt.n, err)
		case !tt.ok && (!errors.As(err, &ie) || ie.Field != "max_concurrency"):
			t.Errorf("max_concurrency %d: %v, want an error naming max_concurrency", tt.n, err)
		}
	}
}

// TestPriorityValidate guards the priority option's bounds: 0 (1) to
// api.MaxPriority; anything else is refused naming the field.
func TestPriorityValidate(t *testing.T) {
	s := &Submitter{Pipelines: []string{"webhook"}}
	for _, tt := range []struct {
		n  int
		ok bool
	}{
		{0, true}, {1, true}, {3, true}, {api.MaxPriority, true},
		{-1, false}, {api.MaxPriority + 1, false},
	} {
		req := api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: json.RawMessage(`[1]`)}, Priority: tt.n}
		err := s.Validate(&req)
		var ie *api.InputError
		switch {
		case tt.ok && err != nil:
			t.Errorf("priority %d: %v, want accepted", tt.n, err)
		case !tt.ok && (!errors.As(err, &ie) || ie.Field != "priority"):
			t.Errorf("priority %d: %v, want an error naming priority", tt.n, err)
		}
	}
}

// TestSourcePolicyInValidate guards the source policy (source.SourcePolicy,
// TestConfusedDeputySourcePolicy) through the submit's validation, as POST
// /batches meets it: another batch's manifest is never a source.
func TestSourcePolicyInValidate(t *testing.T) {
	p := source.SourcePolicy{Bucket: "stack", Allowed: []string{"s3://stack/exports/"}}
	s := &Submitter{Sources: p}
	req := api.SubmitRequest{Pipeline: "thumbnail", Source: api.SourceSpec{Object: "s3://stack/batches/other/manifests/01J.jsonl"}}
	var ie *api.InputError
	if err := s.Validate(&req); !errors.As(err, &ie) || ie.Field != "source.object" || !strings.Contains(ie.Error(), "never a source") {
		t.Fatalf("Validate: %v, want source.object: never a source", err)
	}
}

// TestSubmitRefusesAnEmptyRateKey guards a request whose rate names the
// key "" (as JSON, the API's body): refused naming rate.key, as the CLI
// refuses --rate 50@; without a key the rate paces the batch alone.
func TestSubmitRefusesAnEmptyRateKey(t *testing.T) {
	s := &Submitter{Pipelines: []string{"webhook"}}
	for body, field := range map[string]string{
		`{"pipeline":"webhook","source":{"items":[1]},"rate":{"key":"","requests_per_second":5}}`: "rate.key",
		`{"pipeline":"webhook","source":{"items":[1]},"rate":{"requests_per_second":5}}`:          "",
	} {
		var req api.SubmitRequest
		if err := json.Unmarshal([]byte(body), &req); err != nil {
			t.Fatal(err)
		}
		err := s.Validate(&req)
		var ie *api.InputError
		if field == "" && err != nil || field != "" && (!errors.As(err, &ie) || ie.Field != field || !strings.Contains(ie.Error(), "leave key out")) {
			t.Errorf("%s: Validate = %v, want field %q", body, err, field)
		}
	}
}
