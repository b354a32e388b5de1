package layout

import (
	"strconv"

	"github.com/bulkrun/bulkrun/shared/config"
)

// The rows of a max_concurrency run's tracks (shared/pace, ledger.Track),
// each its own partition key under config.PKSlot, so that the item
// function's DeleteItem grant and the LeadingKeys of its role cover them
// as they cover the slot rows:
//
//   - the claim counter SLOT#{id}#r{run}, sk CLAIM (a run of more than
//     64 tracks: one per 64 tracks, SLOT#{id}#r{run}#c{counters}.{c}):
//     attribute claims, one update per slice a track claims, which also
//     keeps each of its tracks' last claim and its answer (c{track},
//     g{track});
//   - a track's fence SLOT#{id}#r{run}#t{track}, sk TRACK: seq, holder,
//     lease_until_ms, one write per delivery of the track; the units
//     handed to the track (AttrHanded, a map from a unit's First to its
//     ledger.TrackRetry as JSON), one write per woken unit and removed by
//     the track's next take; once the track retired (holder "done"), the
//     holder and lease of a woken unit that runs under it as a slot
//     (AttrSlotHolder, AttrSlotUntilMs).
const (
	SKClaim         = "CLAIM"
	SKTrack         = "TRACK"
	AttrSeq         = "seq"
	AttrClaims      = "claims"
	AttrHanded      = "h"
	AttrSlotHolder  = "slot_holder"
	AttrSlotUntilMs = "slot_until_ms"
)

// ClaimPK is the partition key of run run's claim counter:
// "SLOT#{id}#r{run}", sort key SKClaim.
func ClaimPK(id string, run int) string { return config.PKSlot + id + "#r" + strconv.Itoa(run) }

// CounterPK is the partition key of claim counter c of a run of counters
// (pace.Counters): the run's one counter's (ClaimPK) when counters ≤ 1,
// else "SLOT#{id}#r{run}#c{counters}.{c}", each counter its own key,
// sort key SKClaim.
func CounterPK(id string, run, counters, c int) string {
	if counters <= 1 {
		return ClaimPK(id, run)
	}
	return ClaimPK(id, run) + "#c" + strconv.Itoa(counters) + "." + strconv.Itoa(c)
}

// TrackPK is the partition key of track track's fence in run run:
// "SLOT#{id}#r{run}#t{track}", sort key SKTrack.
func TrackPK(id string, run, track int) string {
	return ClaimPK(id, run) + "#t" + strconv.Itoa(track)
}
