package flow

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Guards docs/sources.md "Upload instead" (a renamed copy is not run
// again): the same items for the same pipeline and options under another
// name within the window are a *RepeatedUploadError naming the batch and
// object that started them, refused as repeated_upload; the same object
// again passes (its id answers its batch); rerun, the end of the window, a
// claim whose batch is gone and a window of 0 let it run.
func TestClaimUploadRepeat(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(context.Context, pipeline.Request) (pipeline.Result, error) { return pipeline.Result{}, nil })
	r.sub.UploadRepeatWindow = 7 * 24 * time.Hour
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "records-1", Pipeline: "counted", Source: api.SourceSpec{Items: items(3)}}); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	if _, err := r.fin.Finalize(ctx, "records-1", 1); err != nil {
		t.Fatal(err)
	}
	const a, b = "s3://bkt/incoming/records.csv", "s3://bkt/incoming/records (1).csv"
	content := ledger.UploadContent("d1", "counted", json.RawMessage(`{"max_words": 3}`))
	if err := r.sub.ClaimUpload(ctx, content, "records-1", a, false); err != nil {
		t.Fatalf("first upload: %v", err)
	}
	r.clock.T = r.clock.T.Add(time.Minute) // within the rig's retention of an hour
	err := r.sub.ClaimUpload(ctx, content, "records-2", b, false)
	var rue *api.RepeatedUploadError
	if !errors.As(err, &rue) || rue.Claim.BatchID != "records-1" || rue.Claim.Source != a {
		t.Fatalf("a renamed copy: %v, want a RepeatedUploadError naming records-1 and %s", err, a)
	}
	for _, want := range []string{b, a, "batch records-1", "7-day window", "x-amz-meta-rerun: true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not say %q", err, want)
		}
	}
	if ref, ok := api.RefusalOf(err); !ok || ref.Code != api.RefusalRepeatedUpload || ref.Field != "x-amz-meta-rerun" {
		t.Errorf("RefusalOf: %+v %v, want code repeated_upload naming x-amz-meta-rerun", ref, ok)
	}
	if err := r.sub.ClaimUpload(ctx, content, "records-1", a, false); err != nil {
		t.Errorf("the same object again: %v, want it to pass (its batch answers)", err)
	}
	if err := r.sub.ClaimUpload(ctx, ledger.UploadContent("d1", "counted", json.RawMessage(`{"max_words": 4}`)), "records-2", b, false); err != nil {
		t.Errorf("the same items with other options: %v, want another content", err)
	}
	// Asked to run again: the renamed copy claims the content...
	if err := r.sub.ClaimUpload(ctx, content, "records-2", b, true); err != nil {
		t.Fatalf("rerun: %v", err)
	}
	// ... and, as its batch was never created here, the claim does not
	// stand against the first object either.
	if err := r.sub.ClaimUpload(ctx, content, "records-1", a, false); err != nil {
		t.Errorf("a claim whose batch does not exist: %v, want it not to stand", err)
	}
	// A claim whose batch was forgotten does not stand.
	if err := r.ctl.Forget(ctx, "records-1"); err != nil {
		t.Fatal(err)
	}
	if err := r.sub.ClaimUpload(ctx, content, "records-3", "s3://bkt/incoming/again.csv", false); err != nil {
		t.Errorf("after the batch was forgotten: %v", err)
	}
	// Past the window, anyone may run the content again.
	r.clock.T = r.clock.T.Add(8 * 24 * time.Hour)
	if err := r.sub.ClaimUpload(ctx, content, "records-4", b, false); err != nil {
		t.Errorf("past the window: %v", err)
	}
	r.sub.UploadRepeatWindow = 0
	if err := r.sub.ClaimUpload(ctx, content, "records-5", "s3://bkt/incoming/x.csv", false); err != nil {
		t.Errorf("window 0: %v", err)
	}
}

// UploadContent is one value per items, pipeline and options, whatever
// the options' spacing.
func TestUploadContent(t *testing.T) {
	base := ledger.UploadContent("d1", "p", json.RawMessage(`{"a":1}`))
	for _, tt := range []struct {
		digest, pipeline, options string
		same                      bool
	}{
		{"d1", "p", `{ "a" : 1 }`, true},
		{"d2", "p", `{"a":1}`, false},
		{"d1", "q", `{"a":1}`, false},
		{"d1", "p", `{"a":2}`, false},
		{"d1", "p", ``, false},
	} {
		if got := ledger.UploadContent(tt.digest, tt.pipeline, json.RawMessage(tt.options)); (got == base) != tt.same {
			t.Errorf("UploadContent(%q, %q, %q) same as base: %v, want %v", tt.digest, tt.pipeline, tt.options, got == base, tt.same)
		}
	}
	if ledger.UploadContent("d1", "p", nil) != ledger.UploadContent("d1", "p", json.RawMessage("null")) {
		t.Error("no options and null options differ")
	}
}
