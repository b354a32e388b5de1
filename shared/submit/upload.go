package submit

import (
	"context"
	"errors"
	"fmt"

	"github.com/bulkrun/bulkrun/shared/api"
)

// ClaimUpload decides whether an upload may start its batch, by its
// content (UploadContent) and source ("s3://bucket/key"): it claims the
// content for batchID and source for the stack's UploadRepeatWindow, and
// returns nil, unless the content is claimed by another object within the
// window and that object's batch still exists (not forgotten, expired or
// refused): then it returns a *RepeatedUploadError naming that batch, and
// claims nothing. The same object uploaded again (its claim) passes: its
// batch id answers the batch it started. rerun claims whatever stands
// (the upload asked to run again). A window of 0 claims nothing and
// passes every upload. Idempotent for one upload; safe for concurrent
// use: of two uploads of the same content under different names at once,
// one claims it and the other is refused (the claim is one conditional
// write).
func (s *Submitter) ClaimUpload(ctx context.Context, content, batchID, source string, rerun bool) error {
	if s.UploadRepeatWindow <= 0 {
		return nil
	}
	now := s.Clock.Now()
	c := api.UploadClaim{Content: content, BatchID: batchID, Source: source, ClaimedAt: now, Until: now.Add(s.UploadRepeatWindow)}
	stood, err := s.Store.ClaimUpload(ctx, c, rerun)
	if !errors.Is(err, api.ErrConflict) {
		if err != nil {
			return fmt.Errorf("claim upload %s: %w", source, err)
		}
		return nil
	}
	// Another object's claim holds: it stands only while its batch does.
	b, gerr := s.Store.GetBatch(ctx, stood.BatchID)
	switch {
	case errors.Is(gerr, api.ErrNotFound):
	case gerr != nil:
		return fmt.Errorf("claim upload %s: read batch %s: %w", source, stood.BatchID, gerr)
	case !b.Expired(now) && !b.PendingDeletion && b.Status != api.StatusRefused:
		return &api.RepeatedUploadError{Source: source, Claim: stood, Window: s.UploadRepeatWindow}
	}
	if _, err := s.Store.ClaimUpload(ctx, c, true); err != nil {
		return fmt.Errorf("claim upload %s: %w", source, err)
	}
	return nil
}
