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
// more pass (two under bad_rows fail with duplicate keys). A source with
// problems the request's bad_rows does not let run is the error Submit
// would return.
func (s *Submitter) Digest(ctx context.Context, req api.SubmitRequest) (string, error) {
	if err := req.Source.Validate(req.KeyField); err != nil {
		return "", err
	}
	c, err := newChecking(req, nil)
	if err != nil {
		return "", err
	}
	digest := func(record bool) (string, error) {
		mw := source.NewManifestWriter(io.Discard, s.ChunkItems, s.TempDir)
		defer mw.Close()
		if err := s.readSource(ctx, req, c, mw); err != nil {
			return "", fmt.Errorf("digest of %s: %w", req.Source.Describe(), err)
		}
		sum, drop, err := c.finish(mw, record)
		if err != nil {
			return "", fmt.Errorf("digest of %s: %w", req.Source.Describe(), err)
		}
		if record {
			c.drop = drop
		}
		return sum.Digest, nil
	}
	d, err := digest(true)
	if err == nil && c.drop != nil {
		d, err = digest(false)
	}
	if err == nil {
		err = c.refusal("")
	}
	if err != nil {
		return "", err
	}
	return d, nil
}
