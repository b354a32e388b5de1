package source

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image"
	"image/png"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/internal/pipeline/thumbnail"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Confused deputy, point 2: a source may name only the stack bucket's
// upload prefixes and the declared sources; batches/ (another batch's
// manifest, outputs, results) and incoming-errors/ never. Guards docs/sources.md
// "Sources and who may read what" and docs/design/submit.md "Sources: no confused deputy".
func TestConfusedDeputySourcePolicy(t *testing.T) {
	p := SourcePolicy{Bucket: "stack", Allowed: []string{"s3://stack/exports/", "s3://partner/", "s3://shared/bulkrun/"}}
	tests := []struct {
		name      string
		spec      api.SourceSpec
		wantField string // "" when allowed
	}{
		{"upload under incoming/", api.SourceSpec{Object: "s3://stack/incoming/a.jsonl"}, ""},
		{"CLI upload under uploads/", api.SourceSpec{Prefix: "s3://stack/uploads/abc/"}, ""},
		{"declared prefix", api.SourceSpec{Object: "s3://stack/exports/2026/a.csv"}, ""},
		{"declared whole bucket", api.SourceSpec{Prefix: "s3://partner/"}, ""},
		{"declared prefix of another bucket", api.SourceSpec{Object: "s3://shared/bulkrun/x.jsonl"}, ""},
		{"inline items name no object", api.SourceSpec{Items: json.RawMessage(`[1]`)}, ""},
		{"another batch's manifest", api.SourceSpec{Object: "s3://stack/batches/other/manifests/01J.jsonl"}, "source.object"},
		{"another batch's outputs", api.SourceSpec{Prefix: "s3://stack/batches/other/outputs/"}, "source.prefix"},
		{"every batch", api.SourceSpec{Prefix: "s3://stack/batches/"}, "source.prefix"},
		{"a prefix that lists batches/", api.SourceSpec{Prefix: "s3://stack/batch"}, "source.prefix"},
		{"the whole stack bucket", api.SourceSpec{Prefix: "s3://stack/"}, "source.prefix"},
		{"refused uploads' reports", api.SourceSpec{Object: "s3://stack/incoming-errors/a.jsonl.error.json"}, "source.object"},
		{"refused ticks' reports", api.SourceSpec{Prefix: "s3://stack/schedule-errors/"}, "source.prefix"},
		{"a prefix that lists incoming-errors/", api.SourceSpec{Prefix: "s3://stack/incom"}, "source.prefix"},
		{"undeclared key of the stack bucket", api.SourceSpec{Object: "s3://stack/private/a.jsonl"}, "source.object"},
		{"undeclared bucket", api.SourceSpec{Object: "s3://other-account-bucket/a.jsonl"}, "source.object"},
		{"declared bucket, other prefix", api.SourceSpec{Object: "s3://shared/secret/a.jsonl"}, "source.object"},
		{"dot-dot segment", api.SourceSpec{Object: "s3://stack/uploads/../batches/x/manifests/m.jsonl"}, "source.object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := p.CheckSource(tt.spec)
			var ie *api.InputError
			switch {
			case tt.wantField == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantField != "" && (!errors.As(err, &ie) || ie.Field != tt.wantField):
				t.Fatalf("got %v, want an *InputError naming %s", err, tt.wantField)
			}
		})
	}
	// batches/ stays out even where a whole stack bucket was declared.
	wide := SourcePolicy{Bucket: "stack", Allowed: []string{"s3://stack/"}}
	if err := wide.CheckSource(api.SourceSpec{Object: "s3://stack/batches/other/results/runs/1/failed.jsonl"}); err == nil {
		t.Fatal("batches/ allowed under a declared whole stack bucket")
	}
	// The policy's prefixes are the ones the stack and the functions share.
	if !slices.Equal(uploadPrefixes, []string{config.IncomingPrefix, config.UploadsPrefix}) ||
		!slices.Equal(forbiddenPrefixes, []string{config.BatchesPrefix, config.UploadErrorsPrefix, config.ScheduleErrorsPrefix}) {
		t.Fatalf("policy prefixes %q %q differ from shared/config", uploadPrefixes, forbiddenPrefixes)
	}
}

// opener serves one PNG for any key and counts the opens.
type opener struct{ opened int }

func (o *opener) Open(context.Context, string, string) (io.ReadCloser, error) {
	o.opened++
	var b bytes.Buffer
	_ = png.Encode(&b, image.NewGray(image.Rect(0, 0, 4, 4)))
	return io.NopCloser(&b), nil
}

type discardOutputs struct{}

func (discardOutputs) Put(_ context.Context, name, _ string, _ []byte) (string, error) {
	return "s3://stack/out/" + name, nil
}

// Confused deputy, point 2, at run time: a thumbnail item whose input
// names a key under batches/ (or an undeclared bucket) fails permanently,
// naming the key, without reading it; an upload's key is read. Guards
// docs/sources.md "Sources and who may read what" (item inputs are checked as
// sources are).
func TestConfusedDeputyItemInput(t *testing.T) {
	src := &opener{}
	p := thumbnail.New(GuardedSource{Source: src, Policy: SourcePolicy{Bucket: "stack"}})
	for _, tt := range []struct {
		input     string
		permanent bool
	}{
		{`{"bucket":"stack","key":"batches/other/manifests/01J.jsonl"}`, true},
		{`{"bucket":"stack","key":"batches/other/outputs/x.png"}`, true},
		{`{"bucket":"elsewhere","key":"uploads/a.png"}`, true},
		{`{"bucket":"stack","key":"uploads/abc/a.png"}`, false},
	} {
		before := src.opened
		_, err := p.Run(context.Background(), pipeline.Request{Key: "k", Input: json.RawMessage(tt.input), Outputs: discardOutputs{}})
		var pe *pipeline.PermanentError
		if tt.permanent {
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), "input bucket/key") || src.opened != before {
				t.Errorf("%s: %v (opened %d), want a permanent error naming the input's bucket/key, nothing read", tt.input, err, src.opened-before)
			}
			continue
		}
		if err != nil || src.opened != before+1 {
			t.Errorf("%s: %v, want the object read", tt.input, err)
		}
	}
}
