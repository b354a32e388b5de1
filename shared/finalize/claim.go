package finalize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/source"
)

// A chunk's claim. Every chunk of a run's chain goes on from the newest
// checkpoint and writes the results' parts into the uploads that
// checkpoint names, under the same part numbers whichever call writes
// them. Two calls going on from one checkpoint write the same bytes only
// if they read the same rows, and the rows are read eventually
// consistently (ledger.Store.ScanShard): one call may read an item's row
// as of before its outcome while the other reads the outcome. The call
// that loses the checkpoint's write has then already replaced some of
// the winner's parts with its own, and the results file would disagree
// with the census (an item's line missing, another's twice). So a call
// claims the chunk — the checkpoint it will write — before it writes a
// part, and only one call works from a checkpoint at a time.
//
// A claim is an object written with If-None-Match
// (ledger.Blobs.PutIfAbsent) beside the checkpoints: {seq}.claim.{gen},
// holding until when its call may still write (its deadline and
// ClaimGrace: Lambda ends an invocation at its timeout). A call that
// finds the newest claim held answers ErrNotFinished (the holder goes
// on; the tick tries again later); one that finds it expired (its holder
// died) claims the next generation, so that of two calls taking over one
// wins.
// Once claimed, a checkpoint already written under that number means the
// chunk was done by a call that held the claim before: ErrConflict, and
// the caller goes on from that checkpoint. The claim is deleted when the
// call ends (after its parts in flight ended); the run's finish deletes
// whatever is left with its checkpoints (FinalizePrefix).

// ErrChunkClaimed is what a call answers when another call holds the
// claim of the checkpoint it would write: it is wrapped together with
// api.ErrNotFinished (the run is not finished; call again later, as a
// trigger does after its wait and the tick a minute on), so that
// errors.Is tells it from other unfinished runs.
var ErrChunkClaimed = errors.New("another call is writing the checkpoint")

// ClaimGrace is how long past its call's deadline a claim holds: 1
// minute, for a request the call sent just before its end.
const ClaimGrace = time.Minute

// claimTries bounds the claims one call tries from the newest it listed:
// generations taken meanwhile by calls that then died, and a claim
// released while it read it.
const claimTries = 16

func claimKey(id string, run, seq, gen int) string {
	return claimPrefix(id, run, seq) + strconv.Itoa(gen)
}

func claimPrefix(id string, run, seq int) string {
	return FinalizePrefix(id, run) + fmt.Sprintf("%06d.claim.", seq)
}

// newestClaim is the highest generation of the claims of checkpoint seq
// (one listing of their prefix), at least 1.
func (f *Finalizer) newestClaim(ctx context.Context, id string, run, seq int) (int, error) {
	prefix, newest := claimPrefix(id, run, seq), 1
	err := f.Blobs.List(ctx, f.Blobs.Bucket(), prefix, func(o source.ObjectInfo) error {
		if g, err := strconv.Atoi(strings.TrimPrefix(o.Key, prefix)); err == nil && g > newest {
			newest = g
		}
		return nil
	})
	return newest, err
}

// claimUntil is until when a call that stops reading at end (and whose
// context's deadline, if any, is its invocation's) may still write.
func claimUntil(ctx context.Context, end time.Time) time.Time {
	if dl, ok := ctx.Deadline(); ok && dl.After(end) {
		end = dl
	}
	return end.Add(ClaimGrace)
}

// claimChunk claims the chunk of run of batch id that writes checkpoint
// seq until until (wall clock), and returns the release the caller
// defers once its writes ended. Errors: ErrChunkClaimed (with
// ErrNotFinished) while another call holds the claim, ErrConflict when checkpoint seq is written
// already, else the store's.
func (f *Finalizer) claimChunk(ctx context.Context, id string, run, seq int, until time.Time) (func(), error) {
	body, err := json.Marshal(active{Until: until})
	if err != nil {
		return nil, err
	}
	// The newest generation first: a claim of every call Lambda killed
	// stays (only its finish deletes them), so counting up from the
	// first would run out of tries after as many kills, and the run
	// would wait for ever.
	gen, err := f.newestClaim(ctx, id, run, seq)
	if err != nil {
		return nil, fmt.Errorf("finalize %s run %d: list the claims of checkpoint %d: %w", id, run, seq, err)
	}
	for try := 0; try < claimTries; try++ {
		key := claimKey(id, run, seq, gen)
		err := f.Blobs.PutIfAbsent(ctx, key, "application/json", body)
		if errors.Is(err, api.ErrConflict) {
			held, rerr := f.Blobs.Get(ctx, key)
			switch {
			case errors.Is(rerr, api.ErrNotFound):
				continue // released meanwhile: claim it again
			case rerr != nil:
				return nil, fmt.Errorf("finalize %s run %d: read the claim of checkpoint %d: %w", id, run, seq, rerr)
			}
			var a active
			if json.Unmarshal(held, &a) == nil && time.Now().Before(a.Until) {
				return nil, fmt.Errorf("finalize %s run %d: checkpoint %d, held until %s: %w: %w",
					id, run, seq, a.Until.UTC().Format(time.RFC3339), ErrChunkClaimed, api.ErrNotFinished)
			}
			gen++ // its holder is past its end: the next generation
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("finalize %s run %d: claim checkpoint %d: %w", id, run, seq, err)
		}
		release := func() {
			// A claim left behind holds the next call back until its end:
			// a failed delete is tried again.
			for range 3 {
				if f.Blobs.Delete(context.WithoutCancel(ctx), key) == nil {
					return
				}
			}
		}
		if _, gerr := f.Blobs.Get(ctx, checkpointKey(id, run, seq)); !errors.Is(gerr, api.ErrNotFound) {
			release()
			if gerr != nil {
				return nil, fmt.Errorf("finalize %s run %d: read checkpoint %d: %w", id, run, seq, gerr)
			}
			return nil, fmt.Errorf("finalize %s run %d: checkpoint %d is written: %w", id, run, seq, api.ErrConflict)
		}
		return release, nil
	}
	return nil, fmt.Errorf("finalize %s run %d: checkpoint %d not claimed in %d tries: %w", id, run, seq, claimTries, api.ErrNotFinished)
}
