package ledger

import (
	"fmt"
	"strconv"
	"time"

	"github.com/bulkrun/bulkrun/shared/source"
)

// Track is the state of one track of a batch with max_concurrency (see
// shared/pace): a fan-out message (KindFanout) carrying a Track is not
// expanded into item or pack messages; the item function runs its units
// one after another, one at a time, and sends the track again (a new
// message, Seq + 1) when its invocation nears its deadline or it waits.
// The message's Chunk is the fan-out chunk of the slice it runs (a
// release that knows no tracks expands that chunk as a fan-out, which
// reservations make safe). JSON names as tagged; every time is epoch
// milliseconds.
type Track struct {
	// Index is the track's number, 0 … Tracks−1; its fence row is
	// Store.TakeTrack's.
	Index int `json:"i"`
	// Tracks is how many tracks the run has: the claim counters' first
	// claims take slice numbers from Tracks on (pace.ClaimNumber).
	Tracks int `json:"tracks"`
	// Counters is how many claim counters the run has (pace.Counters; 0,
	// as a track sent before counters were several has it: 1). Counter is
	// the one the track claims from now: its home counter
	// (pace.HomeCounter) until that is drained, then the next, in turn;
	// Drained counts the counters it found drained. The track is done
	// when it found every counter drained.
	Counters int `json:"cs,omitempty"`
	Counter  int `json:"cn,omitempty"`
	Drained  int `json:"cd,omitempty"`
	// Size is the run's slice size in items (pace.SliceSize, computed by
	// the submit that started the run's tracks): every track numbers the
	// run's slices by it. 0, as a track sent before tracks carried it has
	// it: pace.SliceSizeItems of the run.
	Size int64 `json:"sz,omitempty"`
	// Seq fences the track's sends: each new message of the track carries
	// a higher one, and a delivery whose Seq is below the fence row's is
	// stale (acknowledged, not run).
	Seq int64 `json:"seq"`
	// Slice is the slice number the track runs (pace.Slice); Span is that
	// slice's bytes and items in the manifest once read (Span.Length 0:
	// not read yet).
	Slice int64        `json:"g"`
	Span  source.Chunk `json:"span"`
	// At is the manifest index of the slice's next unit to start, Pos the
	// byte offset of its first line; At = Span.FirstIndex + Span.Count
	// once every unit of the slice started.
	At  int64 `json:"at"`
	Pos int64 `json:"pos"`
	// Retries are the units of the track waiting to run again (at most
	// pace.MaxTrackRetries).
	Retries []TrackRetry `json:"retries,omitempty"`
	// UntilMs is when the track was sent to come back (a wait for its
	// retries or its batch's pause): units due by then are due when it is
	// delivered, whatever the clock of the invocation says.
	UntilMs int64 `json:"until_ms,omitempty"`
	// Idle counts the track's sends in a row that ran no unit: bounded
	// by MaxResends, past which the track waits on its message (a receive
	// per wait), so that a track that never moves ends in the dead-letter
	// queue.
	Idle int `json:"idle,omitempty"`
	// Claims counts the slices the track claimed (Store.ClaimSlice); the
	// track is sent on after each claim, so that a delivery run again from
	// this message claims the same slice.
	Claims int64 `json:"claims,omitempty"`
	// Done: every claim counter answered past the run's last slice (or
	// was found drained), so the track claims no more.
	Done bool `json:"done,omitempty"`
	// Merged are the hand-offs to the track (Store.HandToTrack, by their
	// ID) whose units it took into its Retries since its last take: the
	// take of this message's Seq removes them from its fence row
	// (TrackTake.Clear), so that a delivery that crashed before sending
	// the track on finds them on the row again.
	Merged []string `json:"mg,omitempty"`
	// Looks counts the track's sends in a row whose wait was cut to
	// pace.TrackLookEvery: every MaxResendDelay / TrackLookEvery of them
	// count one Idle, so that the bound on idle sends keeps its time.
	Looks int `json:"looks,omitempty"`
}

// Drain records that the counter the track claims from is drained (it
// answered past the run's last slice, or was read so): the track moves
// on to the next counter, in turn.
func (t *Track) Drain() {
	t.Counter, t.Drained = (t.Counter+1)%max(t.Counters, 1), t.Drained+1
}

// MaxHandoffs is the most hand-offs that wait on one track's fence row
// (Store.HandToTrack refuses more): the row's take then removes at most
// that many (its update expression stays far under DynamoDB's 4 KB for an
// expression: about 20 bytes an id) and the track message they join
// stays small (≈ 100 bytes each).
const MaxHandoffs = 64

// TrackUnit is where a unit a track ran lies (its TrackRetry, with its
// DueMs, Requeued and RateAtUs zero) and how many tracks its run has: an
// item or pack message made from a track's unit carries it
// (Message.TrackUnit, PackMessage.TrackUnit), so that when the unit's
// held items are woken and its message is sent again, the delivery hands
// the unit back to a track of its run (Store.HandToTrack) instead of
// running it beside the tracks.
type TrackUnit struct {
	Tracks int `json:"tracks"`
	TrackRetry
}

// TrackRetired is the holder of a retired track's fence row: the track ran
// its last unit and moved its fence past every send of it
// (TrackTake.Holder).
const TrackRetired = "done"

// TrackRetry is a unit of a track waiting to run again: its items
// (First, Count; a pack's first is its PackFirst), its lines (Offset,
// Length bytes in the manifest), its fan-out chunk, when it is due, and
// how often AWS being unavailable sent it back in a row; RateAtUs is the
// start of the rate lease it waits for (Message.RateAtUs), RateLeadMs
// how long before it the unit was due (Message.RateLeadMs; −1 once the
// track was received again: its lateness is not learned), RatePos the
// position of an adaptive one (Message.RatePos); TokensAtUs and
// TokensBookedUs (TokensUs) and TokensDriftUs (TokensDrift) the token
// booking it waits for (Message.TokensAtUs).
type TrackRetry struct {
	First       int64   `json:"first"`
	Count       int64   `json:"n"`
	Offset      int64   `json:"off"`
	Length      int64   `json:"len"`
	ChunkFirst  int64   `json:"cf"`
	ChunkItems  int64   `json:"ci"`
	DueMs       int64   `json:"due_ms"`
	Requeued    int     `json:"rq,omitempty"`
	RateAtUs    int64   `json:"ra,omitempty"`
	RatePos     float64 `json:"rp,omitempty"`
	RateLeadMs  int64   `json:"rl,omitempty"`
	TokensAtUs  int64   `json:"ta,omitempty"`
	TokensUs    int64   `json:"tb,omitempty"`
	TokensDrift int64   `json:"td,omitempty"`
}

// Due is when r may run again.
func (r TrackRetry) Due() time.Time { return time.UnixMilli(r.DueMs).UTC() }

// Validate reports a malformed track (its message is poison).
func (t Track) Validate() error {
	switch {
	case t.Tracks < 1 || t.Index < 0 || t.Index >= t.Tracks:
		return fmt.Errorf("track %d of %d", t.Index, t.Tracks)
	case t.Seq < 1 || t.Slice < 0:
		return fmt.Errorf("track %d: seq %d, slice %d", t.Index, t.Seq, t.Slice)
	}
	for _, r := range t.Retries {
		if r.Count < 1 || r.Length < 1 || r.Offset < 0 {
			return fmt.Errorf("track %d: retry of %d items at %d", t.Index, r.Count, r.First)
		}
	}
	return nil
}

// TrackTake is what Store.TakeTrack asks: the fence row of track Track of
// the batch's run, for Holder (a delivery's own nonce; TrackRetired
// retires the track) with message Seq, until Now + Lease. Clear are the
// hand-offs (by ID) whose units the message's track took into its
// Retries (Track.Merged): the take removes them from the row.
type TrackTake struct {
	BatchID string
	Run     int
	Track   int
	Seq     int64
	Holder  string
	Now     time.Time
	Lease   time.Duration
	Clear   []string
}

// TrackTaken is what Store.TakeTrack answers: Held, on a conflict, the
// time until which another holder of the same seq holds the row (zero: a
// later seq took the track, or, retiring, units were handed to it);
// Handed, the hand-offs to the track still on its row after the take's
// Clear (on a refused retire: every one of them), in ID order.
type TrackTaken struct {
	Held   time.Time
	Handed []TrackHanded
}

// TrackHanded is one hand-off waiting on a track's fence row: its ID and
// its unit.
type TrackHanded struct {
	ID   string
	Unit TrackRetry
}

// TrackHand is what Store.HandToTrack asks: hand Unit (a woken unit of the
// run, DueMs zero) to track Track of the batch's run, as hand-off ID (a
// nonce of at most 32 letters and digits: each delivery hands its unit
// under its own, so that a take clearing an earlier hand-off of the same
// unit leaves a later one).
type TrackHand struct {
	BatchID string
	Run     int
	Track   int
	ID      string
	Unit    TrackRetry
	Now     time.Time
}

// TrackSlot is what Store.TakeTrackSlot and FreeTrackSlot ask: the fence
// row of retired track Track of the batch's run as a concurrency slot, for
// Holder until Now + Lease.
type TrackSlot struct {
	BatchID string
	Run     int
	Track   int
	Holder  string
	Now     time.Time
	Lease   time.Duration
}

// SliceClaim is what Store.ClaimSlice asks: track Track's Claim-th
// claim (from 1) of the batch's run, from claim counter Counter of the
// run's Counters (pace.Counters). Counters ≤ 1 is the run's one counter
// (a track sent before a run had more leaves it 0); a run of several
// counters keeps each in a row of its own, apart from the one counter's,
// so that a run's tracks that disagree on Counters (sent by releases on
// either side of a deploy) each deal every slice, none skipped.
type SliceClaim struct {
	BatchID  string
	Run      int
	Track    int
	Claim    int64
	Counters int
	Counter  int
	Now      time.Time
}

// SliceCounterRead is what Store.SliceCounter asks: claim counter Counter
// of Counters of the batch's run, and track Track's last claim on it.
type SliceCounterRead struct {
	BatchID  string
	Run      int
	Track    int
	Counters int
	Counter  int
}

// SliceCount is a claim counter as read: how many claims it answered,
// and the last claim (Store.ClaimSlice's SliceClaim.Claim) the track
// asked read made on it (0: none).
type SliceCount struct {
	Claims     int64
	TrackClaim int64
}

// ChunksKey is where the fan-out chunks of a run's manifest are kept
// beside it: a JSON array of source.Chunk in manifest order. A manifest
// assembled from parts has it from its assembly; a batch with
// max_concurrency writes it when its run starts, for its tracks.
func ChunksKey(manifestKey string) string { return manifestKey + ".chunks.json" }

// SlicesKey is where the slices of size items (pace.SliceSize) of the
// fan-out chunk starting at manifest index first are kept beside the
// manifest: a JSON array of source.Chunk, one per slice. They depend only
// on the manifest, the size and first, so every run of the manifest and
// every track that reads the chunk writes the same.
func SlicesKey(manifestKey string, size, first int64) string {
	return manifestKey + ".slices/" + strconv.FormatInt(size, 10) + "/" + strconv.FormatInt(first, 10) + ".json"
}
