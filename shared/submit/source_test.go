package submit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/source"
)

// Product line: stop_on_threshold defaults to true (Distributed Map's early
// stop), also for batch rows written before the option existed.
func TestStopOnThresholdDefault(t *testing.T) {
	no, yes := false, true
	for _, tt := range []struct {
		stop *bool
		want bool
	}{{nil, true}, {&yes, true}, {&no, false}} {
		if got := (ledger.Batch{Batch: api.Batch{Plan: api.Plan{StopOnThreshold: tt.stop}}}).EarlyStop(); got != tt.want {
			t.Errorf("EarlyStop(%v) = %v, want %v", tt.stop, got, tt.want)
		}
	}
	if f, _, _ := (ledger.Batch{}).DiffPlan(ledger.Batch{Batch: api.Batch{Plan: api.Plan{StopOnThreshold: &yes}}}); f != "" {
		t.Errorf("unset and true are the same setting, got a difference in %s", f)
	}
}

// Product line: an empty source is refused with empty_source and nothing
// is created: the manifest upload is aborted and no batch row is written.
func TestEmptySourceCreatesNothing(t *testing.T) {
	tests := []struct {
		name      string
		file      string
		body      string
		spec      api.SourceSpec
		wantField string
	}{
		{"empty jsonl", "a.jsonl", "", api.SourceSpec{}, "source.object"},
		{"blank lines only", "a.jsonl", "\n  \n\r\n", api.SourceSpec{}, "source.object"},
		{"csv header only", "a.csv", "sep=;\nid;name\n\n", api.SourceSpec{}, "source.object"},
		{"empty json file", "a.json", "", api.SourceSpec{}, "source.object"},
		{"empty json array", "a.json", " [ ] ", api.SourceSpec{}, "source.object"},
		{"empty gzip", "a.jsonl.gz", string(memstore.Gzip(t, "")), api.SourceSpec{}, "source.object"},
		{"inline empty array", "", "", api.SourceSpec{Items: json.RawMessage(`[]`)}, "source.items"},
		{"empty prefix", "", "", api.SourceSpec{Prefix: "s3://src/nothing-here/"}, "source.prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			blobs := &memBlobs{objects: map[string][]byte{}}
			spec := tt.spec
			if tt.file != "" {
				blobs.objects[tt.file] = []byte(tt.body)
				spec.Object = "s3://src/" + tt.file
			}
			s := &Submitter{Store: noStore{}, Blobs: blobs, Clock: ledger.SystemClock{}, Log: slog.New(slog.DiscardHandler)}
			_, err := s.Submit(context.Background(), api.SubmitRequest{BatchID: "b1", Pipeline: "p", Source: spec})
			var ie *api.InputError
			if !errors.Is(err, api.ErrEmptySource) || !errors.As(err, &ie) || ie.Field != tt.wantField {
				t.Fatalf("err = %v, want empty_source on %s", err, tt.wantField)
			}
			if blobs.created != 1 || blobs.aborted != 1 || blobs.completed != 0 {
				t.Fatalf("manifest writes: created %d aborted %d completed %d, want the one upload aborted", blobs.created, blobs.aborted, blobs.completed)
			}
		})
	}
}

// memBlobs holds source objects of bucket "src" in memory and counts the
// manifest writes; every other Blobs method panics (nil interface).
type memBlobs struct {
	ledger.Blobs
	objects                     map[string][]byte
	created, aborted, completed int
}

func (m *memBlobs) Bucket() string { return "batches" }

func (m *memBlobs) Open(_ context.Context, bucket, key string) (io.ReadCloser, error) {
	b, ok := m.objects[key]
	if bucket != "src" || !ok {
		return nil, api.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (m *memBlobs) HeadSource(_ context.Context, bucket, key string) (source.ObjectInfo, error) {
	b, ok := m.objects[key]
	if bucket != "src" || !ok {
		return source.ObjectInfo{}, api.ErrNotFound
	}
	return source.ObjectInfo{Bucket: bucket, Key: key, Size: int64(len(b))}, nil
}

// OpenMatch reads as Open: these sources name no ETag.
func (m *memBlobs) OpenMatch(ctx context.Context, bucket, key, _ string) (io.ReadCloser, error) {
	return m.Open(ctx, bucket, key)
}

func (m *memBlobs) List(_ context.Context, bucket, prefix string, fn func(source.ObjectInfo) error) error {
	for k, b := range m.objects {
		if strings.HasPrefix(k, prefix) {
			if err := fn(source.ObjectInfo{Bucket: bucket, Key: k, Size: int64(len(b))}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *memBlobs) Create(context.Context, string, string) (ledger.BlobWriter, error) {
	m.created++
	return &memWriter{m: m}, nil
}

type memWriter struct {
	bytes.Buffer
	m *memBlobs
}

func (w *memWriter) Close() error { w.m.completed++; return nil }

func (w *memWriter) Abort() error { w.m.aborted++; return nil }

// noStore is a Store on which any call panics: the test proves none is made.
type noStore struct{ ledger.Store }

// noHandoff is a Handoff on which a call fails the test.
type noHandoff struct{ t *testing.T }

func (h noHandoff) StartSubmit(context.Context, string) error {
	h.t.Fatal("a batch was handed off")
	return nil
}

// Product line: a source that is empty before any read (an object of 0
// bytes, a prefix without objects) is refused at accept, before a batch row
// exists; one whose lines turn out blank is refused by the background read
// with code empty_source.
func TestEmptySourceRefusedAtAccept(t *testing.T) {
	for _, tt := range []struct {
		name  string
		spec  api.SourceSpec
		field string
	}{
		{"empty object", api.SourceSpec{Object: "s3://src/empty.jsonl"}, "source.object"},
		{"prefix with folder markers only", api.SourceSpec{Prefix: "s3://src/folder/"}, "source.prefix"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			blobs := &memBlobs{objects: map[string][]byte{"empty.jsonl": nil, "folder/": nil, "folder/sub/": nil}}
			s := &Submitter{Store: noStore{}, Blobs: blobs, Clock: ledger.SystemClock{}, Log: slog.New(slog.DiscardHandler), Handoff: noHandoff{t}}
			_, err := s.Accept(context.Background(), api.SubmitRequest{BatchID: "b1", Pipeline: "p", Source: tt.spec})
			var ie *api.InputError
			if !errors.Is(err, api.ErrEmptySource) || !errors.As(err, &ie) || ie.Field != tt.field || blobs.created != 0 {
				t.Fatalf("err = %v (manifests created %d), want empty_source on %s before anything", err, blobs.created, tt.field)
			}
		})
	}

	// A missing object is refused at accept too, naming it; nothing is
	// created.
	blobs := &memBlobs{objects: map[string][]byte{}}
	s := &Submitter{Store: noStore{}, Blobs: blobs, Clock: ledger.SystemClock{}, Log: slog.New(slog.DiscardHandler), Handoff: noHandoff{t}}
	_, err := s.Accept(context.Background(), api.SubmitRequest{BatchID: "b1", Pipeline: "p", Source: api.SourceSpec{Object: "s3://src/gone.jsonl"}})
	var ie *api.InputError
	if !errors.As(err, &ie) || ie.Field != "source.object" || !strings.Contains(err.Error(), "s3://src/gone.jsonl does not exist") ||
		errors.Is(err, api.ErrEmptySource) || blobs.created != 0 {
		t.Fatalf("missing object: err = %v (manifests created %d), want invalid source.object: does not exist", err, blobs.created)
	}

	r, ok := api.RefusalOf(fmt.Errorf("submit b1: %w", &api.InputError{Field: "source.object", Reason: "holds no items", Err: api.ErrEmptySource}))
	if !ok || r.Code != api.RefusalEmptySource || r.Field != "source.object" {
		t.Fatalf("refusal %+v, want code empty_source", r)
	}
	refused := &api.BatchRefusedError{BatchID: "b1", Refusal: r}
	if !errors.Is(refused, api.ErrEmptySource) || !errors.Is(refused, api.ErrInvalid) {
		t.Fatalf("a repeated submit of a batch refused as empty must match ErrEmptySource and ErrInvalid")
	}
}
