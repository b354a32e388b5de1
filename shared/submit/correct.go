package submit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/source"
	"github.com/bulkrun/bulkrun/shared/validate"
)

// CorrectResult is what Correct returns: the batch (at the correction's
// run), the revision, and whether this call made it (false: the same
// corrections were given before, and their revision answers).
type CorrectResult struct {
	Batch    ledger.Batch `json:"batch"`
	Revision api.Revision `json:"revision"`
	Created  bool         `json:"created"`
}

// Correct freezes corrected inputs for some items of a finished batch as
// a new manifest revision and starts a run over exactly those items with
// them: the correction run. Each corrected key must be an item of the
// batch that its last run left failed, quarantined or cancelled; a key the
// batch does not have, or whose item succeeded, refuses the whole
// correction with an *InputError naming it (nothing is written). The
// corrections are read as a source (a duplicate key or a malformed line is
// refused naming the line), written as read (their digest identifies them:
// the same corrections again answer the same revision, Created false, and
// start no run), and merged into the batch's manifest (Revision.ManifestKey:
// later runs, resume, read the corrected inputs); the run's manifest holds
// every pack of a corrected item (Revision.RunKey), so that items per
// message keep their packs.
//
// Steps: read and bound the corrections; read the batch's current
// manifest once (streaming), writing the merged and the run manifests and
// finding each corrected key's index; check each corrected item's state;
// start the run (Store.StartCorrection: one conditional write that also
// records the revision); mark the corrected items with the revision
// (Store.MarkRevision) and fan the run out (FanOut). A call that dies
// after the start leaves a run that is not fanned out: the finalize tick
// sends it again (FanOut marks first). Errors: ErrNotFound; ErrExpired
// (wrapped); ErrConflict (wrapped) while a run goes, or for a batch
// without a manifest; *InputError as above.
func (s *Submitter) Correct(ctx context.Context, id string, req api.CorrectRequest) (CorrectResult, error) {
	if req.Source.Prefix != "" {
		return CorrectResult{}, &api.InputError{Field: "source.prefix", Reason: "corrections are items with their keys: inline items or an object, not a prefix"}
	}
	b, err := s.Store.GetBatch(ctx, id)
	if err != nil {
		return CorrectResult{}, err
	}
	if b, err = ledger.Live(b, s.Clock.Now()); err != nil {
		return CorrectResult{}, fmt.Errorf("correct: %w", err)
	}
	switch {
	case b.Status == api.StatusSubmitting || b.Status == api.StatusRefused:
		return CorrectResult{}, fmt.Errorf("correct %s: the batch is %s, it has no items to correct: %w", id, b.Status, api.ErrConflict)
	case b.PendingDeletion:
		return CorrectResult{}, fmt.Errorf("correct %s: the batch is being forgotten: %w", id, api.ErrConflict)
	}
	keyField := req.KeyField
	if keyField == "" {
		keyField = b.KeyField
	}
	if keyField == "" {
		return CorrectResult{}, &api.InputError{Field: "key_field", Reason: fmt.Sprintf("batch %s has positional keys (item-0000000000, …): name the field or column that holds each corrected item's key", id)}
	}
	if err := req.Source.Validate(keyField); err != nil {
		return CorrectResult{}, err
	}
	if err := s.Sources.CheckSource(req.Source); err != nil {
		return CorrectResult{}, err
	}
	corr, err := s.readCorrections(ctx, b, req.Source, keyField)
	if err != nil {
		return CorrectResult{}, err
	}
	for _, r := range b.Revisions {
		if r.Digest == corr.sum.Digest {
			s.drop(ctx, corr.key)
			return CorrectResult{Batch: b, Revision: r}, nil
		}
	}
	if b.Status == api.StatusRunning {
		s.drop(ctx, corr.key)
		return CorrectResult{}, fmt.Errorf("correct %s: run %d is still going; correct it once it has finished: %w", id, b.Run, api.ErrConflict)
	}
	if len(b.Revisions) >= api.MaxRevisions {
		s.drop(ctx, corr.key)
		return CorrectResult{}, &api.InputError{Field: "source", Reason: fmt.Sprintf("batch %s has %s, the most one batch takes", id, api.Count(api.MaxRevisions, "correction"))}
	}
	n := len(b.Revisions) + 2
	plan, err := s.mergeCorrections(ctx, b, n, corr)
	if err != nil {
		s.drop(ctx, corr.key)
		return CorrectResult{}, err
	}
	rev := api.Revision{N: n, Digest: corr.sum.Digest, Items: corr.sum.Count, Run: b.Run + 1, Source: req.Source.Describe(),
		SubmittedBy: req.SubmittedBy, CreatedAt: s.Clock.Now(), CorrectionsKey: corr.key, ManifestKey: plan.merged,
		RunKey: plan.run, RunItems: plan.runItems, RunChunks: plan.chunks, Kept: plan.kept}
	nb, err := s.Store.StartCorrection(ctx, id, b.Run, rev, s.Clock.Now())
	if errors.Is(err, api.ErrConflict) {
		// Another run or correction started meanwhile; the same
		// corrections answer their revision.
		if cur, gerr := s.Store.GetBatch(ctx, id); gerr == nil {
			for _, r := range cur.Revisions {
				if r.Digest == rev.Digest {
					return CorrectResult{Batch: cur, Revision: r}, nil
				}
			}
		}
		return CorrectResult{}, fmt.Errorf("correct %s: another run started meanwhile: %w", id, err)
	}
	if err != nil {
		return CorrectResult{}, fmt.Errorf("correct %s: start run: %w", id, err)
	}
	s.announce(ctx, nb, api.ChangeRunning, nb.RunStartedAt)
	if err := s.FanOut(ctx, nb); err != nil {
		return CorrectResult{}, fmt.Errorf("correct %s: %w", id, err)
	}
	nb.FannedOut = true
	s.Log.InfoContext(ctx, "correction run started", "batch_id", id, "run", nb.Run, "revision", n, "items", rev.Items, "run_items", rev.RunItems)
	return CorrectResult{Batch: nb, Revision: rev, Created: true}, nil
}

// drop deletes an object this call wrote and no longer needs (best
// effort: forget removes what is left under batches/{id}/).
func (s *Submitter) drop(ctx context.Context, key string) {
	if err := s.Blobs.Delete(ctx, key); err != nil {
		s.Log.WarnContext(ctx, "delete unused corrections object", "key", key, "error", err.Error())
	}
}

// corrections are the corrected items of a Correct call, as read.
type corrections struct {
	key    string                     // the corrections object (as read, normalized)
	sum    source.ManifestSummary     // its digest and count
	inputs map[string]json.RawMessage // key → corrected input
	order  []string                   // keys in the corrections' order
}

// batchSchema is the schema b's source was checked with (api.SchemaKey
// beside its manifest), compiled; nil when it had none (or was accepted
// before schemas were kept).
func (s *Submitter) batchSchema(ctx context.Context, b ledger.Batch) (*validate.Schema, error) {
	raw, err := s.Blobs.Get(ctx, api.SchemaKey(b.ManifestKey))
	switch {
	case errors.Is(err, api.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("correct %s: read its schema: %w", b.ID, err)
	}
	sch, err := validate.Compile(raw)
	if err != nil {
		return nil, fmt.Errorf("correct %s: its schema: %w", b.ID, err)
	}
	return sch, nil
}

// readCorrections reads the corrections source into a normalized object
// under the batch's revisions (its digest identifies the corrections) and
// into memory, within MaxCorrectionItems and MaxCorrectionBytes, each item
// checked (and a CSV row's cells typed) by the batch's schema as its
// source's rows were: the first item it refuses refuses the corrections,
// naming its line, path and reason.
func (s *Submitter) readCorrections(ctx context.Context, b ledger.Batch, src api.SourceSpec, keyField string) (corrections, error) {
	c := corrections{key: fmt.Sprintf("batches/%s/revisions/%s.corrections.jsonl", b.ID, ledger.NewBatchID()), inputs: map[string]json.RawMessage{}}
	w, err := s.Blobs.Create(ctx, c.key, "application/x-ndjson")
	if err != nil {
		return c, fmt.Errorf("correct %s: %w", b.ID, err)
	}
	mw := source.NewManifestWriterOptions(w, source.ManifestOptions{ChunkItems: s.ChunkItems, Keys: s.Keys, TempLimitBytes: s.TempLimitBytes})
	defer mw.Close()
	sch, err := s.batchSchema(ctx, b)
	if err != nil {
		return c, err
	}
	var bytes int64
	err = source.ReadSourceChecked(ctx, s.Blobs, src, keyField, &source.Check{Schema: sch}, func(it source.SourceItem) error {
		if len(c.inputs) >= api.MaxCorrectionItems {
			return &api.InputError{Field: sourceField(src), Line: it.Line, Element: it.Element, Reason: fmt.Sprintf("more than %s: correct in several goes", api.Count(api.MaxCorrectionItems, "corrected item"))}
		}
		if bytes += int64(len(it.Input)); bytes > api.MaxCorrectionBytes {
			return &api.InputError{Field: sourceField(src), Line: it.Line, Element: it.Element, Reason: fmt.Sprintf("corrected inputs over %d MiB: correct in several goes", api.MaxCorrectionBytes>>20)}
		}
		if err := mw.Add(it); err != nil {
			return err
		}
		if _, dup := c.inputs[it.Key]; !dup {
			c.order = append(c.order, it.Key)
		}
		c.inputs[it.Key] = json.RawMessage(slices.Clone(it.Input))
		return nil
	})
	if err == nil {
		c.sum, err = mw.Finish()
	}
	if err == nil && c.sum.Count == 0 {
		err = &api.InputError{Field: sourceField(src), Reason: "holds no corrected items", Err: api.ErrEmptySource}
	}
	if err != nil {
		_ = w.Abort()
		var ie *api.InputError
		if errors.As(err, &ie) && ie.Field == "" {
			ie.Field = sourceField(src)
		}
		return c, fmt.Errorf("correct %s: %w", b.ID, err)
	}
	if err := w.Close(); err != nil {
		return c, fmt.Errorf("correct %s: %w", b.ID, err)
	}
	return c, nil
}

// correctionPlan is what mergeCorrections wrote: the merged manifest, the
// run manifest, its lines and chunks.
type correctionPlan struct {
	merged, run string
	runItems    int64
	chunks      int
	kept        *api.Kept
}

// mergeCorrections reads the batch's current manifest once and writes the
// revision's merged manifest (the corrected lines in place) and run
// manifest (every pack holding a corrected item), after checking that
// every corrected key is an item of the batch, failed, quarantined or
// cancelled. On error nothing it wrote is left.
func (s *Submitter) mergeCorrections(ctx context.Context, b ledger.Batch, n int, c corrections) (correctionPlan, error) {
	plan := correctionPlan{merged: ledger.RevisionsKey(b.ID, n, ledger.NewBatchID()+".manifest.jsonl"), run: ledger.RevisionsKey(b.ID, n, ledger.NewBatchID()+".run.jsonl")}
	src, err := s.Blobs.Open(ctx, s.Blobs.Bucket(), b.CurrentManifestKey())
	if err != nil {
		return plan, fmt.Errorf("correct %s: open manifest: %w", b.ID, err)
	}
	defer src.Close()
	merged, err := s.Blobs.Create(ctx, plan.merged, "application/x-ndjson")
	if err != nil {
		return plan, fmt.Errorf("correct %s: %w", b.ID, err)
	}
	run, err := s.Blobs.Create(ctx, plan.run, "application/x-ndjson")
	if err != nil {
		_ = merged.Abort()
		return plan, fmt.Errorf("correct %s: %w", b.ID, err)
	}
	abort := func(err error) (correctionPlan, error) {
		_ = merged.Abort()
		_ = run.Abort()
		return plan, err
	}
	per := int64(s.ChunkItems)
	if per <= 0 {
		per = source.DefaultChunkItems
	}
	k := int64(b.Pack())
	var pack []source.ManifestLine // the lines of the pack being read
	corrected := false
	where := map[string]int64{} // corrected key → manifest index
	cut := chunker{per: per}
	var runOffset int64
	flushPack := func() error {
		if corrected {
			for _, l := range pack {
				line, err := encodeLine(l)
				if err != nil {
					return err
				}
				if err := cut.add(l, runOffset, int64(len(line))); err != nil {
					return err
				}
				if _, err := run.Write(line); err != nil {
					return err
				}
				runOffset += int64(len(line))
			}
		}
		pack, corrected = pack[:0], false
		return nil
	}
	var i int64
	err = source.ReadManifestLines(src, 0, func(l source.ManifestLine, _, _ int64) error {
		if chunkFirst := i - i%per; (i-chunkFirst)%k == 0 {
			if err := flushPack(); err != nil {
				return err
			}
		}
		out := source.ManifestLine{Key: l.Key, Input: l.Input}
		if in, ok := c.inputs[l.Key]; ok {
			out.Input = in
			where[l.Key] = i
		}
		line, err := encodeLine(out)
		if err != nil {
			return err
		}
		if _, err := merged.Write(line); err != nil {
			return err
		}
		idx := i
		out.Index = &idx
		if _, ok := c.inputs[l.Key]; ok {
			out.Corrected, corrected = true, true
		}
		pack = append(pack, out)
		i++
		return nil
	})
	if err == nil {
		err = flushPack()
	}
	if err != nil {
		return abort(fmt.Errorf("correct %s: read manifest: %w", b.ID, err))
	}
	if i != b.ItemCount {
		return abort(fmt.Errorf("correct %s: manifest %s holds %s, the batch %d", b.ID, b.CurrentManifestKey(), api.Count(i, "item"), b.ItemCount))
	}
	if len(where) < len(c.inputs) {
		var missing []string
		for key := range c.inputs {
			if _, ok := where[key]; !ok {
				missing = append(missing, key)
			}
		}
		sort.Strings(missing)
		return abort(&api.InputError{Field: "source", Key: api.Truncate(missing[0], 80),
			Reason: fmt.Sprintf("batch %s has no item with this key (%d of the corrected keys are not the batch's: %s)", b.ID, len(missing), keyList(missing))})
	}
	before, err := s.checkCorrectable(ctx, b, correctionMarks(b, c.order, where, per))
	if err != nil {
		return abort(err)
	}
	plan.kept = keptOutside(b.FinalCensus, before)
	if err := merged.Close(); err != nil {
		_ = run.Abort()
		return plan, fmt.Errorf("correct %s: %w", b.ID, err)
	}
	if err := run.Close(); err != nil {
		return plan, fmt.Errorf("correct %s: %w", b.ID, err)
	}
	plan.runItems, plan.chunks = cut.n, len(cut.chunks)
	return plan, nil
}

// encodeLine is a manifest line as the manifest writer encodes it: JSON
// without HTML escaping, then '\n'.
func encodeLine(l source.ManifestLine) ([]byte, error) {
	b, err := ledger.EncodeSafe(l)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// keyList is up to five keys, quoted, and how many more.
func keyList(keys []string) string {
	var q []string
	for _, k := range keys[:min(5, len(keys))] {
		q = append(q, fmt.Sprintf("%q", api.Truncate(k, 80)))
	}
	if len(keys) > 5 {
		q = append(q, fmt.Sprintf("and %d more", len(keys)-5))
	}
	return strings.Join(q, ", ")
}

// correctionMarks is where each corrected item of b lives, from its
// manifest index: its item row, or its entry in the pack that holds it
// (packs are K consecutive items from each chunk's first, per items a
// chunk).
func correctionMarks(b ledger.Batch, keys []string, index map[string]int64, per int64) []ledger.RevisionMark {
	k := int64(b.Pack())
	marks := make([]ledger.RevisionMark, 0, len(keys))
	for _, key := range keys {
		m := ledger.RevisionMark{Key: key}
		if k > 1 {
			i := index[key]
			chunkFirst := i - i%per
			m.Pack, m.PackFirst = true, chunkFirst+(i-chunkFirst)/k*k
			m.Index = int(i - m.PackFirst)
		}
		marks = append(marks, m)
	}
	return marks
}

// checkCorrectable refuses, naming the first in the corrections' order,
// an item whose last run left it succeeded (its outcome is final) or with
// no outcome at all; else it returns the outcomes the run's items have
// before it (the corrected items, and the other items of their packs).
func (s *Submitter) checkCorrectable(ctx context.Context, b ledger.Batch, marks []ledger.RevisionMark) (map[api.Outcome]int64, error) {
	before := map[api.Outcome]int64{}
	state := map[string]ledger.ItemState{}
	if b.Packed() {
		packs := map[int64]ledger.Pack{}
		for _, m := range marks {
			p, ok := packs[m.PackFirst]
			if !ok {
				var err error
				p, err = s.Store.GetPack(ctx, ledger.PackRef{BatchID: b.ID, ListShards: b.ListShards, First: m.PackFirst})
				if err != nil && !errors.Is(err, api.ErrNotFound) {
					return nil, fmt.Errorf("correct %s: read pack %d: %w", b.ID, m.PackFirst, err)
				}
				packs[m.PackFirst] = p
				for _, it := range p.Items {
					before[it.Outcome]++
				}
			}
			if m.Index < len(p.Items) && p.Items[m.Index].Key == m.Key {
				state[m.Key] = p.Items[m.Index]
			}
		}
	} else {
		keys := make([]string, len(marks))
		for i, m := range marks {
			keys[i] = m.Key
		}
		items, err := s.Store.ReadItems(ctx, b.ID, b.ListShards, keys)
		if err != nil {
			return nil, fmt.Errorf("correct %s: read items: %w", b.ID, err)
		}
		for _, it := range items {
			state[it.Key] = ledger.ItemState{Key: it.Key, Run: it.Run, Outcome: it.Outcome}
			before[it.Outcome]++
		}
	}
	for _, m := range marks {
		st, ok := state[m.Key]
		switch {
		case !ok || st.Outcome == "":
			return nil, &api.InputError{Field: "source", Key: api.Truncate(m.Key, 80), Reason: "this item has no outcome yet: only failed, quarantined or cancelled items take corrections"}
		case st.Outcome == api.OutcomeSucceeded:
			return nil, &api.InputError{Field: "source", Key: api.Truncate(m.Key, 80), Reason: fmt.Sprintf("this item succeeded in run %d: only failed, quarantined or cancelled items take corrections", st.Run)}
		case !st.Outcome.Terminal():
			return nil, &api.InputError{Field: "source", Key: api.Truncate(m.Key, 80), Reason: "this item is in flight: correct it once its run has finished"}
		}
	}
	return before, nil
}

// keptOutside is what the batch's items outside a correction run keep:
// the last finished run's census (nil: none, then nil) less the outcomes
// the run's items had before it.
func keptOutside(last *api.Census, before map[api.Outcome]int64) *api.Kept {
	if last == nil {
		return nil
	}
	return &api.Kept{
		Succeeded:   max(0, last.Succeeded-before[api.OutcomeSucceeded]),
		Failed:      max(0, last.Failed-before[api.OutcomeFailed]),
		Quarantined: max(0, last.Quarantined-before[api.OutcomeQuarantined]),
		Cancelled:   max(0, last.Cancelled-before[api.OutcomeCancelled]),
	}
}
