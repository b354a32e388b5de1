package control

import (
	"context"
	"errors"
	"fmt"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Approve approves a sampled batch (api.Plan.Sample): the items outside
// its sample run (each at its message's next check, by
// api.ApprovalReachesBy: within MaxCheckInterval + 2 × ApprovalGrace of
// the approval, 14 s in the 10 minutes after the estimate); the sample's items
// are not run again. A caller may approve before the sample has ended
// (no estimate is then written). The approval written puts the Batch
// State Change approved (ledger.ApprovalChangeOf, decided_by caller).
// Idempotent: a batch already approved is answered as it is, with no
// event. Errors: ErrNotFound (ErrExpired past the
// retention); ErrConflict for a batch with no sample, one rejected, one
// whose first run is over or stopping, or one still submitting.
func (c *Control) Approve(ctx context.Context, id string) (ledger.Batch, error) {
	b, err := c.decidable(ctx, id, "approve")
	if err != nil || b.Approval.State == api.ApprovalApproved {
		return b, err
	}
	m, wrote, err := c.decide(ctx, b, api.ApprovalApproved)
	if err != nil {
		return ledger.Batch{}, err
	}
	nb, err := c.Store.GetBatch(ctx, id)
	if !wrote {
		return nb, err
	}
	est := b.Approval.Estimate
	if err == nil && nb.Approval != nil && nb.Approval.Estimate != nil {
		// Written between the read and the decision: the row's, written
		// once, stands.
		est = nb.Approval.Estimate
	}
	c.Log.WarnContext(ctx, "batch approved by a caller", "batch_id", id, "estimate", est != nil)
	ledger.AnnounceChange(ctx, c.Bus, c.Log, ledger.ApprovalChangeOf(b, *api.ApprovalOf(b.Approval.Sample, m.Decision, m.By, m.Now, est), m.Now))
	return nb, err
}

// Reject rejects a sampled batch: the decision is written, then its run
// is cancelled (Cancel): the items outside the sample end cancelled when
// their messages come back (within MaxCheckInterval + 2 × CheckGrace),
// sample items still running finish, and the report counts both.
// Idempotent: a batch already rejected is cancelled again (Cancel is
// idempotent). Errors: as Approve's, and ErrConflict for a batch
// already approved.
func (c *Control) Reject(ctx context.Context, id string) (ledger.Batch, error) {
	b, err := c.decidable(ctx, id, "reject")
	if err != nil {
		return b, err
	}
	switch {
	case b.Approval.State == api.ApprovalApproved && (b.Run != 1 || b.Status.Finished()):
		return b, fmt.Errorf("reject %s: approved already (by %s), and its first run is over (status %s): %w", id, b.Approval.DecidedBy, b.Status, api.ErrConflict)
	case b.Approval.State == api.ApprovalApproved:
		return b, fmt.Errorf("reject %s: approved already (by %s); cancel it instead: %w", id, b.Approval.DecidedBy, api.ErrConflict)
	}
	if b.Approval.State != api.ApprovalRejected {
		if _, _, err := c.decide(ctx, b, api.ApprovalRejected); err != nil {
			return ledger.Batch{}, err
		}
		c.Log.WarnContext(ctx, "batch rejected by a caller", "batch_id", id)
	}
	return c.cancelAs(ctx, id, "rejected by a caller after its sample")
}

// decidable is batch id for a decision on its sample (verb: approve or
// reject), or why there can be none.
func (c *Control) decidable(ctx context.Context, id, verb string) (ledger.Batch, error) {
	b, err := c.Get(ctx, id)
	if err != nil {
		return ledger.Batch{}, err
	}
	switch a := b.Approval; {
	case a == nil:
		return b, fmt.Errorf("%s %s: the batch has no sample to %s (submit with sample): %w", verb, id, verb, api.ErrConflict)
	case a.State == api.ApprovalRejected && verb == "approve":
		return b, fmt.Errorf("approve %s: rejected already: %w", id, api.ErrConflict)
	case a.Decision != "":
		return b, nil
	case b.Status == api.StatusSubmitting:
		return b, fmt.Errorf("%s %s: its source is still being read (status submitting): %w", verb, id, api.ErrConflict)
	case b.Run != 1 || b.Status.Finished() || b.Stop != "":
		return b, fmt.Errorf("%s %s: its first run is over or stopping (status %s): %w", verb, id, b.Status, api.ErrConflict)
	}
	return b, nil
}

// decide writes decision on b's sample (Store.MarkApproval) and returns
// the mark, wrote true when this write stored it; a decision written
// meanwhile is a conflict unless it is the same (wrote false).
func (c *Control) decide(ctx context.Context, b ledger.Batch, decision api.ApprovalState) (m ledger.ApprovalMark, wrote bool, err error) {
	m = ledger.ApprovalMark{BatchID: b.ID, Run: b.Run, Decision: decision, By: api.DecidedByCaller, Now: c.now()}
	err = c.Store.MarkApproval(ctx, m)
	if !errors.Is(err, api.ErrConflict) {
		return m, err == nil, err
	}
	nb, gerr := c.Store.GetBatch(ctx, b.ID)
	if gerr != nil {
		return m, false, gerr
	}
	if nb.Approval != nil && nb.Approval.Decision == decision {
		return m, false, nil
	}
	return m, false, fmt.Errorf("%s: decided meanwhile or no longer running: %w", b.ID, err)
}
