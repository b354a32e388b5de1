package submit

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
)

// MaxRateKeyReads bounds the running batches a submit reads to find the
// others naming its rate key (rateKeyWarnings): 100 strongly consistent
// reads of one batch row each (0.5 read units apiece under 4 KB), at most
// one listing of the running markers besides, and one write of a note
// on each batch found at another rate. A stack running more batches at
// once is checked against the first 100 the listing returns.
const MaxRateKeyReads = 100

// RateKeyCheckTime bounds the check of a submit's rate key against the
// running batches (rateKeyWarnings): 2 s, so that a slow or throttled
// table keeps a submit's answer well within API Gateway's 29 s
// integration timeout ("Amazon API Gateway quotas").
const RateKeyCheckTime = 2 * time.Second

// rateKeyWarnings warns when req names a shared rate key (api.Rate.Key)
// that another batch still running or being read names at another
// request rate or token budget: batches on one key share one schedule,
// but each lease is spaced at its own batch's rate (docs/pipelines.md,
// "Rates"), so the downstream gets each batch's calls at that batch's
// rate — the higher one whenever its units lease — which is rarely what
// the lower one meant. One warning per other rate, naming up to
// three batches at it. So that the earlier batches' status says it too,
// the submit notes itself on each of their rows, and on its own the
// first batch it found at each other rate (Store.NoteRateConflict: one
// conditional write each, a repeated submit notes nothing more); the
// view shows the latest note while its batch runs
// (api.LiveView.RateConflict). The check and its notes take at most
// RateKeyCheckTime (they run on the submit's answer); a read or a note
// that fails, or the time running out, is logged and checks or notes no
// further (a warning is advice; it never refuses the batch). req.BatchID
// is the batch's id (the accepted batch's, when the request left it to
// the submit), which is not checked against itself.
func (s *Submitter) rateKeyWarnings(ctx context.Context, req api.SubmitRequest) []string {
	if req.Rate == nil || req.Rate.Key == "" {
		return nil
	}
	key := req.Rate.Key
	ctx, cancel := context.WithTimeout(ctx, RateKeyCheckTime)
	defer cancel()
	unchecked := func(err error) {
		s.Log.WarnContext(ctx, "running batches unread; the rate key is not checked against them", "batch_id", req.BatchID, "rate_key", key, "error", err.Error())
	}
	ids, err := s.Store.RunningBatches(ctx)
	if err != nil {
		unchecked(err)
		return nil
	}
	type other struct {
		rate api.Rate
		ids  []string
	}
	var others []*other
	reads := 0
	for _, id := range ids {
		if id == req.BatchID {
			continue
		}
		if reads++; reads > MaxRateKeyReads {
			break
		}
		b, err := s.Store.GetBatch(ctx, id)
		if errors.Is(err, api.ErrNotFound) {
			continue // deleted since the listing
		}
		if err != nil {
			unchecked(err)
			break
		}
		if b.Status.Finished() || b.Stop != "" || b.Rate == nil || b.Rate.Key != key || sameRate(*b.Rate, *req.Rate) {
			continue
		}
		i := slices.IndexFunc(others, func(o *other) bool { return sameRate(o.rate, *b.Rate) })
		if i < 0 {
			others = append(others, &other{rate: *b.Rate})
			i = len(others) - 1
		}
		others[i].ids = append(others[i].ids, id)
	}
	s.noteRateConflicts(ctx, req, func(yield func(id string, on api.RateConflict) bool) {
		for _, o := range others {
			for _, id := range o.ids { // the submit, on each batch at another rate
				if !yield(id, api.RateConflict{Key: key, BatchID: req.BatchID, Rate: *req.Rate}) {
					return
				}
			}
			if !yield(req.BatchID, api.RateConflict{Key: key, BatchID: o.ids[0], Rate: o.rate}) { // that rate, on the submit
				return
			}
		}
	})
	var warnings []string
	for _, o := range others {
		named := strings.Join(o.ids[:min(3, len(o.ids))], ", ")
		switch {
		case len(o.ids) > 3:
			named = fmt.Sprintf("running batches %s and %d more name", named, len(o.ids)-3)
		case len(o.ids) > 1:
			named = "running batches " + named + " name"
		default:
			named = "running batch " + named + " names"
		}
		warnings = append(warnings, fmt.Sprintf(
			"rate key %s: %s it at %s, this batch at %s. Batches on one key share one schedule, but each lease is spaced at the rate and budget of the batch that takes it, so the downstream gets their calls at %s and this batch's at %s; give every batch on the key the same rate",
			key, named, rateText(o.rate), rateText(*req.Rate), rateText(o.rate), rateText(*req.Rate)))
	}
	return warnings
}

// noteRateConflicts writes the notes notes yields (Store.NoteRateConflict
// on the row of the batch id yielded), each stamped now, until one fails
// or ctx ends; a failure is logged.
func (s *Submitter) noteRateConflicts(ctx context.Context, req api.SubmitRequest, notes iter.Seq2[string, api.RateConflict]) {
	now := s.Clock.Now().UTC()
	for id, c := range notes {
		c.NotedAt = now
		if err := s.Store.NoteRateConflict(ctx, id, c); err != nil {
			s.Log.WarnContext(ctx, "rate conflict not noted; that batch's status does not say it", "batch_id", req.BatchID, "on_batch", id, "rate_key", c.Key, "error", err.Error())
			return
		}
	}
}

// sameRate reports whether a and b pace their key alike: the same
// request rate and the same token budget a second.
func sameRate(a, b api.Rate) bool {
	return a.RequestsPerSecond == b.RequestsPerSecond && a.TokenBudget() == b.TokenBudget()
}

// rateText is a rate's limits as the CLI shows them, without its key
// (api.Rate.String): "20/s", "20/s, 90000 tokens/min".
func rateText(r api.Rate) string {
	r.Key = ""
	return r.String()
}
