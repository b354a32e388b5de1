package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strings"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// BatchOutputs is where the items of batch batchID put their named
// outputs (pipeline.Outputs): blobs under the batch's outputs prefix
// (api.OutputsPrefix).
func BatchOutputs(blobs Blobs, batchID string) pipeline.Outputs {
	return outputs{blobs: blobs, prefix: api.OutputsPrefix(batchID)}
}

type outputs struct {
	blobs  Blobs
	prefix string
}

// Put stores body at the outputs prefix + name. The name is cleaned
// (path.Clean); a name that would leave the prefix ("..", a leading "/") is
// a permanent error; a key longer than S3's 1,024 bytes (S3 user guide,
// "Naming Amazon S3 objects") is replaced by _long/{sha256(name)}{ext}.
func (o outputs) Put(ctx context.Context, name, contentType string, body []byte) (string, error) {
	clean := path.Clean("/" + name)[1:]
	if clean == "" || clean != name && (strings.HasPrefix(name, "/") || strings.Contains(name, "..")) {
		return "", pipeline.Permanent(fmt.Errorf("output name %q leaves the batch's outputs prefix", name))
	}
	key := o.prefix + clean
	if len(key) > 1024 {
		sum := sha256.Sum256([]byte(clean))
		key = o.prefix + "_long/" + hex.EncodeToString(sum[:]) + path.Ext(clean)
	}
	if err := o.blobs.Put(ctx, key, contentType, body); err != nil {
		return "", ThrottledFault(err)
	}
	return "s3://" + o.blobs.Bucket() + "/" + key, nil
}

// ThrottledFault returns err, an error of a write bulkrun makes for an
// attempt (an output to S3), as a throttled failure (Throttled: Conclude
// retries it without using an attempt) when it is an AWS fault of class
// retry or backoff that outlasted the SDK's tries: S3 asked its callers
// to slow down (503 SlowDown: Amazon S3 user guide, "Best practices
// design patterns: optimizing Amazon S3 performance",
// https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance.html)
// or did not answer, which is not the item's fault. A pause stays as it
// is (the attempt pauses the batch); any other error is returned as it
// is.
func ThrottledFault(err error) error {
	if f, ok := FaultOf(err); ok && (f.Class == FaultRetry || f.Class == FaultBackoff) {
		return Throttled(f.Service, f.Code, err)
	}
	return err
}
