package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
)

// RunSafely runs p once for req; a panic in p is returned as an error
// ("pipeline panicked: …" with the stack, cut to MaxErrorTextBytes), so
// that one item's panic fails that item, not its invocation.
func RunSafely(ctx context.Context, p Pipeline, req Request) (res Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			// Bounded: the panic value and the stack are the pipeline's
			// text, recorded on the item row.
			err = errors.New(CutText(fmt.Sprintf("pipeline panicked: %v\n%s", r, debug.Stack()), MaxErrorTextBytes))
		}
	}()
	return p.Run(ctx, req)
}

// MaxInlineOutputBytes is the largest output (compact JSON, in bytes)
// stored on the item row; a larger one is written to S3
// (batches/{id}/item-outputs/{run id}.json) and referenced. DynamoDB
// items are at most 400 KB ("Service, account, and table quotas in
// Amazon DynamoDB").
const MaxInlineOutputBytes = 64 << 10

// OutputBlobs is where StoreOutput writes an output over
// MaxInlineOutputBytes (ledger.Blobs has this shape).
type OutputBlobs interface {
	Put(ctx context.Context, key, contentType string, body []byte) error
	Bucket() string
}

// StoreOutput is how an item's output is kept: none (empty) as JSON
// null; compact JSON of at most MaxInlineOutputBytes inline (inline);
// a larger one written to blobs at batches/{batchID}/item-outputs/{runID}.json
// and referenced by its s3:// URI (ref). An output that is not JSON is
// a permanent error (Permanent): the item's work was done, but its
// result cannot be recorded. Idempotent: the same output is written to
// the same key.
func StoreOutput(ctx context.Context, blobs OutputBlobs, batchID, runID string, out json.RawMessage) (inline json.RawMessage, ref string, err error) {
	if len(out) == 0 {
		return json.RawMessage("null"), "", nil
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, out); err != nil {
		return nil, "", Permanent(fmt.Errorf("pipeline returned an output that is not JSON: %w", err))
	}
	if compact.Len() <= MaxInlineOutputBytes {
		return compact.Bytes(), "", nil
	}
	key := fmt.Sprintf("batches/%s/item-outputs/%s.json", batchID, runID)
	if err := blobs.Put(ctx, key, "application/json", compact.Bytes()); err != nil {
		return nil, "", fmt.Errorf("store large output: %w", err)
	}
	return nil, "s3://" + blobs.Bucket() + "/" + key, nil
}
