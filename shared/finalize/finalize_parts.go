package finalize

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/shardmerge"
	"github.com/bulkrun/bulkrun/shared/source"
)

// Parallel finalize. A large run's rows are read by several finalize
// calls at once, each a part: a disjoint range of the run's item shards
// (Batch.ListShards), the same rows a single pass reads, only split. Each
// part counts its rows (census, rows, the TTL of the rows that need it)
// and writes their result lines as one sorted run, in key order (with one
// item per message its shards' rows come in key order already; a pack
// batch's lines go through the key sort, keysort.go, its runs merged into
// one, MaxMergeFanIn at a time). The last part to finish merges: the
// parts' tallies added up and their runs become the checkpoint of a
// chain that is already counted (checkpoint.Counted), written with
// If-None-Match, so of the parts that finish last together one merges;
// the merge writes the results files and the report exactly as the
// chunked merge of a pack batch does (chunk.go), in chained calls when it
// takes longer than one. Same rows, same lines, same key order: the
// results files are byte for byte a single pass's and the census is its
// census (TestFinalizeInPartsIsTheSinglePass).
//
// Objects, under the run's finalize prefix (deleted with the checkpoints):
// plan-{seq}.json (the parts; written If-None-Match, the newest counts),
// parts/{seq}/{part}.json (a part's result: its tally and its run),
// parts/{seq}/{part}-{token}.run (its sorted lines, named by the result),
// parts/{seq}/{part}.active (until when a call works on the part).
//
// A part that is killed, or run twice, writes nothing another call
// relies on until its result, which is written If-None-Match (the run it
// names has a key of its own); a repeated part whose result exists does
// nothing. A part lost for good (its invocation failed three times, or
// never ran) is noticed by the next finalize call of the run — the tick's
// included — as a part without result whose mark has expired, and
// invoked again. A run whose parts together counted fewer rows than its
// items (an item still pending: its row may land in a part read already)
// starts over with a new plan, as a chain does.

// Bounds of the parallel finalize.
const (
	// DefaultFinalizePartRows is how many rows one part of a parallel
	// finalize is planned to read: 10^6, ≈ 15 CPU-seconds with one item
	// per message (14.6 per 10^6 rows, "Measured" in docs/design/measured.md), ≈ 25 s
	// at finalize's 1,024 MB (0.58 vCPU). A run of fewer than twice as
	// many rows is read by one call, as before: parts add a merge that
	// reads and writes every result line again (≈ 11 s per 10^6 rows of
	// 1 KB at an assumed 100 MB/s of S3 to one function), a plan, an
	// invocation and three objects per part, so below 2·10^6 rows they
	// save little or nothing (see docs/design/finalize.md, "Finalizing a run
	// in parts").
	DefaultFinalizePartRows = 1_000_000
	// MaxFinalizeParts bounds a run's parts, and so the runs the final
	// merge reads at once: 256, each read in ranges of ≥ 64 KiB, two at a
	// time, within the merge's budget (sortReadBytes).
	MaxFinalizeParts = 256
	// MaxPartRowsFactor bounds the rows of one part: a run whose parts
	// would each read more than 4 × the planned rows (a stack whose flow
	// gave the run few item shards, ListShards) is read by one chain of
	// calls, which a part is not: a part is one call, and 4·10^6 rows
	// take ≈ 100 CPU-seconds, ≈ 3 minutes at 1,024 MB, of a call's 15.
	MaxPartRowsFactor = 4
	// MaxMergeFanIn is how many sorted runs one merge reads at once
	// before it merges them into fewer, longer runs first: 256, each read
	// in two ranges of ≥ 64 KiB within the budget.
	MaxMergeFanIn = 256
)

// FinalizeParts starts the finalize call of one part of a run: the
// finalize function invoking itself asynchronously (trigger.Lambda). chain
// is the part's call's place in its chain of calls
// (ledger.FinalizeEvent.Chain): one more than the call that starts it,
// whether it plans the parts or starts a lost one again late in a chain,
// so that the chain is counted as Lambda's recursive loop detection
// counts it (MaxFinalizeChain). nil in Finalizer.Parts: the call that
// plans the parts reads them itself, one after another (tests, a
// finalizer outside Lambda).
type FinalizeParts interface {
	StartFinalizePart(ctx context.Context, batchID string, run, plan, part, chain int) error
}

// partPlan is a run's split into parts.
type partPlan struct {
	Seq       int       `json:"seq"`
	Parts     int       `json:"parts"`
	Shards    int       `json:"shards"` // Batch.ListShards
	Items     int64     `json:"items"`
	StartedAt time.Time `json:"started_at"`
}

// shards are the item shards part i reads: [from, to).
func (p *partPlan) shards(i int) (int, int) {
	return i * p.Shards / p.Parts, (i + 1) * p.Shards / p.Parts
}

// finalPartResult is what one part of a finalize counted, and its sorted lines.
type finalPartResult struct {
	Part int `json:"part"`
	tally
	// Stream is the part's result lines in key order (a sorted run;
	// Bytes 0 and no key when the part had none).
	Stream sortRun `json:"stream"`
	// Index marks Stream's records every Finalizer.RunMarkBytes (the
	// merge's key ranges are planned from it; finalize_ranges.go).
	Index []runMark `json:"index,omitempty"`
}

func planKey(id string, run, seq int) string {
	return FinalizePrefix(id, run) + fmt.Sprintf("plan-%06d.json", seq)
}

func finalPartsPrefix(id string, run, seq int) string {
	return FinalizePrefix(id, run) + fmt.Sprintf("parts/%06d/", seq)
}

func partResultKey(id string, run, seq, part int) string {
	return finalPartsPrefix(id, run, seq) + fmt.Sprintf("%04d.json", part)
}

func partMarkKey(id string, run, seq, part int) string {
	return finalPartsPrefix(id, run, seq) + fmt.Sprintf("%04d.active", part)
}

func partRunKey(id string, run, seq, part int, token string, n int) string {
	if n < 0 {
		return finalPartsPrefix(id, run, seq) + fmt.Sprintf("%04d-%s.run", part, token)
	}
	return finalPartsPrefix(id, run, seq) + fmt.Sprintf("%04d-%s/%04d.run", part, token, n)
}

func (f *Finalizer) partRows() int64 {
	if f.PartRows > 0 {
		return f.PartRows
	}
	return DefaultFinalizePartRows
}

// partsOf is how many parts a run of b is read in: 0 for one chain of
// calls (fewer than 2 × PartRows rows, a single item shard, or parts that
// would pass MaxPartRowsFactor × PartRows rows each), else
// min(ListShards, MaxFinalizeParts, ⌈items / PartRows⌉).
func (f *Finalizer) partsOf(b ledger.Batch) int {
	rows := f.partRows()
	if b.ItemCount < 2*rows || b.ListShards < 2 {
		return 0
	}
	p := int(min(int64(b.ListShards), MaxFinalizeParts, (b.ItemCount+rows-1)/rows))
	if p < 2 || (b.ItemCount+int64(p)-1)/int64(p) > MaxPartRowsFactor*rows {
		return 0
	}
	return p
}

// loadPlan returns the run's newest plan, or nil.
func (f *Finalizer) loadPlan(ctx context.Context, id string, run int) (*partPlan, error) {
	prefix := FinalizePrefix(id, run) + "plan-"
	best := ""
	err := f.Blobs.List(ctx, f.Blobs.Bucket(), prefix, func(o source.ObjectInfo) error {
		if strings.HasSuffix(o.Key, ".json") && o.Key > best {
			best = o.Key
		}
		return nil
	})
	if err != nil || best == "" {
		return nil, err
	}
	body, err := f.Blobs.Get(ctx, best)
	if err != nil {
		return nil, err
	}
	p := &partPlan{}
	if err := json.Unmarshal(body, p); err != nil || p.Parts < 1 || p.Shards < p.Parts {
		return nil, fmt.Errorf("finalize plan %s: malformed (%v)", best, err)
	}
	return p, nil
}

// newPlan writes plan seq of b's run in parts parts, If-None-Match; the
// plan of that number that was written first is returned.
func (f *Finalizer) newPlan(ctx context.Context, b ledger.Batch, seq, parts int) (*partPlan, bool, error) {
	p := &partPlan{Seq: seq, Parts: parts, Shards: b.ListShards, Items: b.ItemCount, StartedAt: f.Clock.Now()}
	body, err := json.Marshal(p)
	if err != nil {
		return nil, false, err
	}
	switch err := f.Blobs.PutIfAbsent(ctx, planKey(b.ID, b.Run, seq), "application/json", body); {
	case err == nil:
		return p, true, nil
	case errors.Is(err, api.ErrConflict):
		p, err := f.loadPlan(ctx, b.ID, b.Run)
		return p, false, err
	default:
		return nil, false, err
	}
}

// finalizeInParts is a finalize call of a run read in parts, before its
// merge began: it plans the parts (the first call), starts every part
// without result that no call works on (Parts; without it, reads them
// itself), and merges once every part has its result. chain is the
// call's place in its chain of calls; the parts it starts are the next.
func (f *Finalizer) finalizeInParts(ctx context.Context, b ledger.Batch, parts, chain int) (FinalizeResult, error) {
	p, err := f.loadPlan(ctx, b.ID, b.Run)
	if err == nil && p == nil {
		// No plan: the first call, or one slower than the run's finish,
		// which deleted the plan with the rest (then it plans nothing).
		var gone bool
		if gone, err = f.runGone(ctx, b.ID, b.Run); gone {
			return FinalizeResult{Parted: true}, nil
		}
		if err == nil {
			p, _, err = f.newPlan(ctx, b, 1, parts)
		}
	}
	if err != nil {
		return FinalizeResult{}, fmt.Errorf("finalize %s run %d: plan: %w", b.ID, b.Run, err)
	}
	done, n, err := f.listed(ctx, finalPartsPrefix(b.ID, b.Run, p.Seq), p.Parts)
	if err != nil {
		return FinalizeResult{}, fmt.Errorf("finalize %s run %d: parts: %w", b.ID, b.Run, err)
	}
	if n == p.Parts {
		return f.mergeParts(ctx, b, p, chain)
	}
	if f.Parts == nil {
		for i := range p.Parts {
			if !done[i] {
				if err := f.runPart(ctx, b, p, i); err != nil {
					return FinalizeResult{}, err
				}
			}
		}
		return f.mergeParts(ctx, b, p, chain)
	}
	if gone, err := f.runGone(ctx, b.ID, b.Run); gone || err != nil {
		// Finished since this call read its row: the listing may have
		// missed results the finish deleted; start nothing.
		return FinalizeResult{Parted: true}, err
	}
	started, err := f.startParts(ctx, b, p, done, chain+1)
	if err != nil {
		return FinalizeResult{}, fmt.Errorf("finalize %s run %d: start parts: %w", b.ID, b.Run, err)
	}
	if started > 0 {
		f.Log.InfoContext(ctx, "finalize in parts: parts started", "batch_id", b.ID, "run", b.Run, "plan", p.Seq, "parts", p.Parts, "started", started, "done", n)
	}
	return FinalizeResult{Continued: true, Parted: true}, nil
}

// partLease is how long a part started, or at work, is left to finish
// before a call of the run starts it again: a call's chunk and margin.
func (f *Finalizer) partLease() time.Duration { return f.chunkTime() + f.chunkMargin() }

// startParts starts each part without result whose mark is absent or
// past (a part lost, or never started), marking it first, as call chain
// of its chain.
func (f *Finalizer) startParts(ctx context.Context, b ledger.Batch, p *partPlan, done []bool, chain int) (int, error) {
	return f.startCalls(ctx, b.ID, b.Run, done, func(i int) string { return partMarkKey(b.ID, b.Run, p.Seq, i) },
		func(i int) error { return f.Parts.StartFinalizePart(ctx, b.ID, b.Run, p.Seq, i, chain) })
}

// FinalizePart reads part `part` of plan `plan` of run of batch id (the
// call Parts started) and, when it is the last part to finish, merges
// the parts into the results and the report (see Finalize: the result
// and its errors are Finalize's; Continued when the merge goes on in the
// next call). A part of a plan replaced since, of a run finished or
// superseded, or of a batch gone does nothing. Idempotent: a part whose
// result exists is not read again.
func (f *Finalizer) FinalizePart(ctx context.Context, id string, run, plan, part int) (FinalizeResult, error) {
	res, err := f.finalizePart(ctx, id, run, plan, part, 0)
	return f.answer(ctx, id, run, res, err)
}

// finalizePart is FinalizePart as call chain of its chain, without
// counting its failure.
func (f *Finalizer) finalizePart(ctx context.Context, id string, run, plan, part, chain int) (FinalizeResult, error) {
	b, running, err := f.running(ctx, id, run)
	if err != nil || !running {
		return FinalizeResult{Parted: true}, err
	}
	p, err := f.loadPlan(ctx, id, run)
	if err != nil {
		return FinalizeResult{}, fmt.Errorf("finalize %s run %d part %d: plan: %w", id, run, part, err)
	}
	if p == nil || p.Seq != plan || part < 0 || part >= p.Parts {
		return FinalizeResult{Parted: true}, nil // replaced, or merged and deleted
	}
	if cp, err := f.loadCheckpoint(ctx, id, run); err != nil || cp != nil {
		return FinalizeResult{Parted: true}, err // the merge began
	}
	if err := f.runPart(ctx, b, p, part); err != nil {
		return FinalizeResult{}, fmt.Errorf("finalize %s run %d part %d: %w", id, run, part, err)
	}
	_, n, err := f.listed(ctx, finalPartsPrefix(id, run, p.Seq), p.Parts)
	if err != nil || n < p.Parts {
		return FinalizeResult{Continued: true, Parted: true}, err
	}
	return f.mergeParts(ctx, b, p, chain)
}

// runPart reads part i of plan p and writes its result, unless it has
// one.
func (f *Finalizer) runPart(ctx context.Context, b ledger.Batch, p *partPlan, i int) (err error) {
	resultKey := partResultKey(b.ID, b.Run, p.Seq, i)
	if _, err := f.Blobs.Get(ctx, resultKey); err == nil {
		return nil
	} else if !errors.Is(err, api.ErrNotFound) {
		return err
	}
	until := f.Clock.Now().Add(f.partLease())
	if dl, ok := ctx.Deadline(); ok {
		until = dl // the call ends there whatever it did
	}
	if err := f.mark(ctx, partMarkKey(b.ID, b.Run, p.Seq, i), until); err != nil {
		return err
	}
	defer func() {
		if errors.Is(err, api.ErrNotFinished) {
			// Not done yet: the next call of the run starts it again.
			_ = f.Blobs.Delete(ctx, partMarkKey(b.ID, b.Run, p.Seq, i))
		} else if err != nil {
			f.dropIfGone(ctx, b, partMarkKey(b.ID, b.Run, p.Seq, i))
		}
	}()
	res := finalPartResult{Part: i, tally: newTally()}
	rc := f.newRowCounter(ctx, b, &res.tally)
	token := ledger.NewToken()
	opts := f.Merge
	opts.ShardFrom, opts.ShardTo = p.shards(i)
	opts.Packed = b.Packed()
	streamKey := partRunKey(b.ID, b.Run, p.Seq, i, token, -1)
	var w *runWriter
	writer := func() (*runWriter, error) {
		if w == nil {
			var err error
			w, err = newRunWriter(ctx, f.Blobs, streamKey, nil)
			if w != nil {
				w.markEvery = f.runMarkBytes()
			}
			return w, err
		}
		return w, nil
	}
	if !opts.Packed {
		// The shards' rows come in key order: straight into the run.
		err = shardmerge.Merge(ctx, f.Store, b.ID, b.ListShards, "", opts, func(it ledger.Item) error {
			o, line, ok, err := rc.count(it)
			if err != nil || !ok {
				return err
			}
			if _, err := writer(); err != nil {
				return err
			}
			return w.add([]byte(it.Key), o, line)
		})
	} else {
		err = f.sortPart(ctx, b, p, i, token, opts, rc, writer)
	}
	if err == nil {
		err = rc.flush()
	}
	if err == nil && w != nil {
		res.Stream, res.Index = sortRun{Key: streamKey}, w.marks
		res.Stream.Bytes, err = w.close()
	}
	if err != nil {
		return err
	}
	own := []string{partMarkKey(b.ID, b.Run, p.Seq, i)}
	if res.Stream.Key != "" {
		own = append(own, res.Stream.Key)
	}
	return f.putResult(ctx, b, resultKey, res, own)
}

// putResult writes a part's or a range's result at key unless one is
// there (If-None-Match), then drops what no result needs: its own objects
// (own: its run or pieces, and its mark, which only a call without
// result needs) when another call's result was there first, and its result too
// when the run was finished meanwhile — a call slower than the run's
// finish, which deleted the finalize prefix before this call wrote
// under it. The batch row is read strongly consistent after the write,
// and finish moves the row before it deletes the prefix: a row still
// running means the deletion, if any, comes later and takes these
// objects with the rest.
func (f *Finalizer) putResult(ctx context.Context, b ledger.Batch, key string, res any, own []string) error {
	body, err := json.Marshal(res)
	if err != nil {
		return err
	}
	drop := own
	switch err := f.Blobs.PutIfAbsent(ctx, key, "application/json", body); {
	case errors.Is(err, api.ErrConflict):
	case err != nil:
		return err
	default:
		gone, err := f.runGone(ctx, b.ID, b.Run)
		if err != nil || !gone {
			return err
		}
		drop = append(drop, key)
	}
	for _, k := range drop {
		if err := f.Blobs.Delete(ctx, k); err != nil {
			f.Log.WarnContext(ctx, "finalize: delete an object no result names", "key", k, "error", err.Error())
		}
	}
	return nil
}

// readResults reads the n results (JSON) at key(i), 16 at once; every
// one must be there.
func readResults[T any](ctx context.Context, blobs ledger.Blobs, n int, key func(i int) string) ([]T, error) {
	results := make([]T, n)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, 16)
	)
	for i := range results {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			body, err := blobs.Get(ctx, key(i))
			if err == nil {
				err = json.Unmarshal(body, &results[i])
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%d: %w", i, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return results, errors.Join(errs...)
}

// dropIfGone deletes keys, what a failed call of a part or a range
// wrote, when the run has finished meanwhile (its finish deleted the
// finalize prefix, and with it what this call read, maybe before these
// were written); a run still going keeps them for the call that starts
// it again.
func (f *Finalizer) dropIfGone(ctx context.Context, b ledger.Batch, keys ...string) {
	if gone, err := f.runGone(ctx, b.ID, b.Run); err != nil || !gone {
		return
	}
	for _, k := range keys {
		_ = f.Blobs.Delete(ctx, k)
	}
}

// runGone reports whether run of batch id has finished, been superseded
// or been forgotten (a strongly consistent read of the batch row).
func (f *Finalizer) runGone(ctx context.Context, id string, run int) (bool, error) {
	_, running, err := f.running(ctx, id, run)
	return err == nil && !running, err
}

// running reads batch id (strongly consistent) and reports whether run
// is its current run, still running; a batch gone is not.
func (f *Finalizer) running(ctx context.Context, id string, run int) (ledger.Batch, bool, error) {
	b, err := f.Store.GetBatch(ctx, id)
	if errors.Is(err, api.ErrNotFound) {
		return b, false, nil
	}
	if err != nil {
		return b, false, fmt.Errorf("finalize %s run %d: %w", id, run, err)
	}
	return b, b.Run == run && b.Status == api.StatusRunning, nil
}

// sortPart counts a pack batch's part, whose rows come in manifest
// order, and writes its lines in key order: sorted runs of SortRunBytes,
// merged MaxMergeFanIn at a time until one merge gives the part's run.
func (f *Finalizer) sortPart(ctx context.Context, b ledger.Batch, p *partPlan, i int, token string, opts shardmerge.Options, rc *rowCounter,
	writer func() (*runWriter, error)) error {
	opts.BudgetBytes = f.sortBudget() // the sort holds the rest
	sorter := &keySorter{limit: f.sortRunBytes()}
	var runs []sortRun
	n := 0
	nextKey := func() string {
		n++
		return partRunKey(b.ID, b.Run, p.Seq, i, token, n-1)
	}
	flush := func() error {
		if sorter.size() == 0 {
			return nil
		}
		key := nextKey()
		size, err := sorter.writeRun(ctx, f.Blobs, key)
		if err == nil {
			runs = append(runs, sortRun{Key: key, Bytes: size})
		}
		return err
	}
	err := shardmerge.Merge(ctx, f.Store, b.ID, b.ListShards, "", opts, func(it ledger.Item) error {
		o, line, ok, err := rc.count(it)
		if err != nil || !ok {
			return err
		}
		if sorter.full(len(it.Key) + len(line)) {
			if err := flush(); err != nil {
				return err
			}
		}
		return sorter.add(it.Key, o, line)
	})
	if err != nil {
		return err
	}
	if len(runs) == 0 {
		if sorter.size() == 0 {
			return nil
		}
		w, err := writer()
		if err != nil {
			return err
		}
		return sorter.sorted(w.add)
	}
	if err := flush(); err != nil {
		return err
	}
	if runs, err = f.mergeLevels(ctx, runs, nextKey); err != nil {
		return err
	}
	w, err := writer()
	if err != nil {
		return err
	}
	if _, err = mergeRuns(ctx, f.Blobs, runs, sortReadBytes(f.sortBudget(), len(runs)), w.add, func() bool { return false }); err != nil {
		return err
	}
	f.dropRuns(ctx, runs)
	return nil
}

// dropRuns deletes sorted runs merged into a longer one (what is left
// goes with the finalize prefix once the run is finished).
func (f *Finalizer) dropRuns(ctx context.Context, runs []sortRun) {
	for _, r := range runs {
		if err := f.Blobs.Delete(ctx, r.Key); err != nil {
			f.Log.WarnContext(ctx, "delete a merged sort run", "key", r.Key, "error", err.Error())
			return
		}
	}
}

// mergeLevels merges runs MaxMergeFanIn at a time into longer runs
// (named by nextKey) until at most MaxMergeFanIn are left, so that no
// merge reads more runs at once than its budget allows.
func (f *Finalizer) mergeLevels(ctx context.Context, runs []sortRun, nextKey func() string) ([]sortRun, error) {
	mergeFanIn := cmp.Or(f.MergeFanIn, MaxMergeFanIn)
	for len(runs) > mergeFanIn {
		var next []sortRun
		for len(runs) > 0 {
			group := runs[:min(mergeFanIn, len(runs))]
			runs = runs[len(group):]
			key := nextKey()
			w, err := newRunWriter(ctx, f.Blobs, key, nil)
			if err != nil {
				return nil, err
			}
			if _, err := mergeRuns(ctx, f.Blobs, group, sortReadBytes(f.sortBudget(), len(group)), w.add, func() bool { return false }); err != nil {
				return nil, err
			}
			size, err := w.close()
			if err != nil {
				return nil, err
			}
			f.dropRuns(ctx, group)
			next = append(next, sortRun{Key: key, Bytes: size})
		}
		runs = next
	}
	return runs, nil
}

// mergeParts adds up the results of plan p's parts into the checkpoint of
// a counted chain whose runs are the parts' runs, written
// If-None-Match: the call that writes it merges (the chunked merge,
// chained), another call has nothing to do. Fewer rows than items start
// over with a new plan: ErrNotFinished.
func (f *Finalizer) mergeParts(ctx context.Context, b ledger.Batch, p *partPlan, chain int) (FinalizeResult, error) {
	results, err := readResults[finalPartResult](ctx, f.Blobs, p.Parts, func(i int) string { return partResultKey(b.ID, b.Run, p.Seq, i) })
	if err != nil {
		return FinalizeResult{}, fmt.Errorf("finalize %s run %d: parts: %w", b.ID, b.Run, err)
	}
	// The merge's chain starts now: its uploads are started by its
	// chunks, and a chain older than ledger.TTLGrace/2 starts over
	// (countRows) for the uploads the bucket aborts after a day. Dated
	// from the plan, a plan whose last part waited 12 hours (an item held
	// or suspended) threw every part's work away for one chain over every
	// row: past ≈ 78 GiB of one outcome's results (MaxResultParts parts)
	// that chain could not finish at all.
	cp := newCheckpoint(1, f.Clock.Now())
	var marks [][]runMark
	for _, r := range results {
		cp.add(r.tally)
		if r.Stream.Bytes > 0 {
			cp.Runs = append(cp.Runs, sortRun{Key: r.Stream.Key, Bytes: r.Stream.Bytes})
			marks = append(marks, r.Index)
		}
	}
	if cp.Rows < b.ItemCount {
		// An item pending: its row may come in a part read already.
		if _, _, err := f.newPlan(ctx, b, p.Seq+1, p.Parts); err != nil {
			return FinalizeResult{}, err
		}
		return FinalizeResult{}, fmt.Errorf("finalize %s run %d: %d items pending: %w", b.ID, b.Run, b.ItemCount-cp.Rows, api.ErrNotFinished)
	}
	cp.Counted = true
	// A merge of more than twice MergeRangeBytes is split by key ranges,
	// each merged by its own call (finalize_ranges.go).
	cp.Ranges = f.planRanges(cp.Runs, marks)
	switch err := f.saveCheckpoint(ctx, b.ID, b.Run, cp); {
	case errors.Is(err, api.ErrConflict):
		return FinalizeResult{Continued: true, Parted: true}, nil // another call merges
	case err != nil:
		return FinalizeResult{}, fmt.Errorf("finalize %s run %d: %w", b.ID, b.Run, err)
	}
	f.Log.InfoContext(ctx, "finalize in parts: merging", "batch_id", b.ID, "run", b.Run, "parts", p.Parts, "runs", len(cp.Runs), "rows", cp.Rows, "ranges", len(cp.Ranges))
	return f.finalize(ctx, b.ID, b.Run, finalizeCall{chain: chain})
}
