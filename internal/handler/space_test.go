package handler

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/bulkrun/bulkrun/internal/keyset"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/submit"
)

// discardBlobs takes manifest writes and drops them; it counts aborts.
type discardBlobs struct {
	ledger.Blobs // other methods are not reached
	aborted      int
}

type discardWriter struct{ b *discardBlobs }

func (w discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w discardWriter) Close() error                { return nil }
func (w discardWriter) Abort() error                { w.b.aborted++; return nil }

func (b *discardBlobs) Create(context.Context, string, string) (ledger.BlobWriter, error) {
	return discardWriter{b}, nil
}

// noSpace is a run file on a full disk: every write fails with ENOSPC.
type noSpace struct{ f *os.File }

func (w noSpace) Write([]byte) (int, error) {
	return 0, &os.PathError{Op: "write", Path: w.f.Name(), Err: syscall.ENOSPC}
}
func (w noSpace) Close() error { return w.f.Close() }

// Temporary disk, point 5: when duplicate-key detection finds /tmp full
// (ENOSPC injected into the spill path), POST /batches answers 507
// insufficient_storage naming the ephemeral storage limit and the stack
// prop that raises it — not 500 "can be retried" — and the manifest upload
// is aborted. A refused background read answers the same way on repeat.
// Guards docs/api.md "Using it" (the answers) and docs/design/submit.md "Memory, disk
// and time of submit".
func TestOutOfSpaceIs507(t *testing.T) {
	blobs := &discardBlobs{}
	s := &submit.Submitter{
		Blobs: blobs, Clock: ledger.SystemClock{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		MaxAttempts: 3, TempDir: t.TempDir(), TempLimitBytes: 512 << 20,
		Keys: keyset.Options{MemoryBytes: 256, CreateRun: func(path string) (io.WriteCloser, error) {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			return noSpace{f}, err
		}},
	}
	var items []string
	for i := range 100 {
		items = append(items, fmt.Sprintf(`{"k":"key-%04d"}`, i))
	}
	body := `{"batch_id":"space-1","pipeline":"webhook","key_field":"k","source":{"items":[` + strings.Join(items, ",") + `]}}`
	rec := httptest.NewRecorder()
	NewAPI(s, nil, nil, s.Log).ServeHTTP(rec, httptest.NewRequest("POST", "/batches", strings.NewReader(body)))
	var eb ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil {
		t.Fatalf("answer %q: %v", rec.Body.String(), err)
	}
	if rec.Code != 507 || eb.Code != "insufficient_storage" {
		t.Fatalf("%d %+v, want 507 insufficient_storage", rec.Code, eb)
	}
	for _, want := range []string{"ephemeral storage (512 MiB)", "MaxManifestBytes", "no space left on device"} {
		if !strings.Contains(eb.Message, want) {
			t.Errorf("message %q does not say %q", eb.Message, want)
		}
	}
	if strings.Contains(eb.Message, "retried") {
		t.Errorf("message %q calls it retryable", eb.Message)
	}
	if blobs.aborted != 1 {
		t.Errorf("manifest uploads aborted: %d, want 1", blobs.aborted)
	}

	// The same class through the error mapping: a refusal stored by a
	// background read, and a plain I/O error that stays retryable.
	for _, tt := range []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"storage full", &api.StorageFullError{Dir: "/tmp", LimitBytes: 1 << 30, Err: syscall.ENOSPC}, 507, "insufficient_storage"},
		{"refused batch", &api.BatchRefusedError{BatchID: "b", Refusal: api.SubmitRefusal{Code: api.RefusalInsufficientStorage, Message: "full"}}, 507, "insufficient_storage"},
		{"refused line", &api.BatchRefusedError{BatchID: "b", Refusal: api.SubmitRefusal{Code: api.RefusalInvalid, Message: "bad", Line: 4}}, 400, "invalid_request"},
		{"other I/O error", fmt.Errorf("manifest: duplicate detection: %w", syscall.EIO), 500, "internal"},
	} {
		status, body := ErrorOf(tt.err)
		if status != tt.status || body.Code != tt.code {
			t.Errorf("%s: %d %+v, want %d %s", tt.name, status, body, tt.status, tt.code)
		}
		if _, ok := api.RefusalOf(tt.err); ok != (tt.status != 500) {
			t.Errorf("%s: RefusalOf ok = %v", tt.name, ok)
		}
	}
}
