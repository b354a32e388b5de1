package submit

import (
	"context"
	"fmt"
	"io"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/source"
)

// Digest returns the manifest digest that Submit would give req's source
// (hex SHA-256 of the normalized manifest, or its PartsDigest when the
// source is read in parts) without writing anything: it
// reads the source once, normalizes and checks it as Submit does (a bad
// line or a duplicate key is the same *InputError Submit would return) and
// discards the manifest. The same items in the same order give the same
// digest however the source was written or uploaded (single or multipart
// PUT, gzip or not), except that a plain JSON Lines or CSV object larger than the
// part size is read in parts and so has a PartsDigest that its gzip copy
// (read whole) does not share. Reads the source in full: the cost of one
// more pass.
func (s *Submitter) Digest(ctx context.Context, req api.SubmitRequest) (string, error) {
	if err := req.Source.Validate(req.KeyField); err != nil {
		return "", err
	}
	mw := source.NewManifestWriter(io.Discard, s.ChunkItems, s.TempDir)
	defer mw.Close()
	if err := s.readSource(ctx, req, mw); err != nil {
		return "", fmt.Errorf("digest of %s: %w", req.Source.Describe(), err)
	}
	sum, err := mw.Finish()
	if err != nil {
		return "", fmt.Errorf("digest of %s: %w", req.Source.Describe(), err)
	}
	return sum.Digest, nil
}
