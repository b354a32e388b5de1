package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/eta"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/source"
)

// Store is the durable state of batches and items. The DynamoDB adapter
// (internal/dynamo) and the in-memory store (integration/testbed/memstore)
// implement it; both pass the conformance suite ledgertest.Run,
// run against the emulator for the adapter. All methods are safe for concurrent use; conditional writes
// report a lost condition as an error wrapping ErrConflict.
type Store interface {
	// CreateBatch puts b's row (and its running marker) only if no batch has
	// b.ID. If one exists it returns the stored batch and ErrBatchExists.
	CreateBatch(ctx context.Context, b Batch) (Batch, error)
	// BeginSubmit counts one more background read of a submitting batch
	// (submit_attempts + 1) and records when it must have ended; it
	// returns the updated batch, or ErrConflict when the batch is no longer
	// submitting.
	BeginSubmit(ctx context.Context, id string, deadline time.Time) (Batch, error)
	// Freeze writes the manifest fields of b (digest, manifest key, bytes,
	// item count, shards, run start, and Checked when set) and moves it
	// from submitting to running, only if it is still submitting; else
	// ErrConflict.
	Freeze(ctx context.Context, b Batch) error
	// Refuse moves a submitting batch to refused with r, removes its
	// running marker and writes its retention marker (expiresAt), only if
	// it is still submitting; else ErrConflict.
	Refuse(ctx context.Context, id string, r api.SubmitRefusal, now, expiresAt time.Time) error
	// GetBatch returns the batch row, or ErrNotFound.
	GetBatch(ctx context.Context, id string) (Batch, error)
	// SetFannedOut records that every fan-out chunk message of run was sent.
	// Idempotent.
	SetFannedOut(ctx context.Context, id string, run int) error
	// Reserve binds a new attempt and a lease to an item before its pipeline
	// runs. It succeeds when the item has no row, when its row is failed,
	// cancelled, held or still in flight (interrupted) in an earlier run, or
	// quarantined in an earlier run and released, when it is in flight
	// in this run with an expired lease (a takeover: attempt + 1, same run
	// id), or when it is held in this run and woken (ItemState.Woken: the
	// run's attempts and spend kept). It returns the row as written.
	// Otherwise it returns the stored row and ErrConflict.
	Reserve(ctx context.Context, r Reservation) (Item, error)
	// Record writes an item's terminal outcome, or a held one with its
	// hold (r.Hold: withheld; the row gets an
	// attention entry as a failed one does), only if the item is still in
	// flight in r.Run under r.Attempt (the fence); else ErrConflict, except
	// when the row already holds this very outcome (run, attempt, outcome,
	// reason and error): the same write sent again after its answer was
	// lost, which returns nil.
	Record(ctx context.Context, r Record) error
	// WakeItem wakes held item w.Key (item rows; a pack item is woken by a
	// take of its pack, WritePack): it sets its hold's Woken to w.By only
	// if the row is held in run w.Run, with outcome w.Outcome and subject
	// w.Subject where those are given, under attempt w.Attempt where that
	// is given (> 0), and not woken yet. Else it returns the stored row
	// and ErrConflict: a row woken already (by this wake sent again, or
	// another) tells by its Hold.Woken.
	WakeItem(ctx context.Context, w WakeMark) (Item, error)
	// Halt puts m's halt on the batch row (Batch.Halts[m.Subject]) only if
	// the batch is running run m.Run, holds no halt on m.Subject and fewer
	// than api.MaxHalts; else ErrConflict.
	Halt(ctx context.Context, m HaltMark) error
	// Lift removes the batch's halt on m.Halt.Subject only if one stands
	// (and, when m.Halt.Since is set, one put then, to the millisecond:
	// the halt the caller read), and in the same write sets the batch's LiftedAt to m.At, adds one
	// to its Lifts and keeps m's halt as its LastLift (lifted at m.At);
	// else ErrConflict. On a finished batch, lifting its last halt sets
	// NeedsAttention back to its FinalCensus's (the halt was what needed
	// a look).
	Lift(ctx context.Context, m LiftMark) error
	// Release ends an attempt's lease without an outcome (a transient error
	// whose retry is scheduled), only under the same fence as Record.
	Release(ctx context.Context, r Record) error
	// Settle writes a terminal outcome for an item that did not run in this
	// run (dead-lettered, cancelled): only where Reserve would take it (no
	// row; failed, cancelled, held, in flight or released quarantined in an
	// earlier run; in flight in this run with an expired lease; held in
	// this run and woken). Else it returns the stored row and ErrConflict.
	Settle(ctx context.Context, r Record) (Item, error)
	// SettleUnstarted is Settle only for an item not reserved in r.Run: no
	// row, or a failed or cancelled (or released quarantined) row of an
	// earlier run. An item reserved in this run has its own message (in
	// flight, or waiting for a scheduled retry) and is left to it: else the
	// stored row and ErrConflict.
	SettleUnstarted(ctx context.Context, r Record) (Item, error)
	// CountChunk adds one message batch's terminal items (and the failures
	// among them) to the counter of their fan-out chunk, and reports
	// whether that write brought the chunk to its item count and the run
	// to its last chunk, without reading any counter. Counters may lag or
	// be lost (the finalize tick is the backstop); item rows decide.
	CountChunk(ctx context.Context, c ChunkCount) (ChunkCounted, error)
	// CountLane adds terminal items of a run to counter lane c.Lane
	// (COUNT#{id}#{run}#{lane}, LANE) only if they fit its target (done +
	// c.Done() ≤ c.Target), and returns the lane's done and failures after
	// the write, without reading. When they do not fit it returns the room
	// left (c.Target − done) and ErrConflict. A write sent again after its
	// answer was lost is recognised as its own (c.Token) and answered from
	// the row; when that cannot be told — another write came in between —
	// it returns ErrCountUnknown: the items may or may not be counted.
	CountLane(ctx context.Context, c LaneCount) (LaneCounted, error)
	// CountRun adds c's completed lanes and failures to the run row
	// (COUNT#{id}#{run}, RUN) and returns its totals, without reading; a
	// write sent again after its answer was lost is recognised as
	// CountLane's is (ErrCountUnknown when it cannot be told).
	CountRun(ctx context.Context, c RunCount) (RunCounted, error)
	// CountWaits adds c's items waiting for a retry, by the minute their
	// retry is due, and its interrupted and timed-out attempts to the run's wait
	// counter in counter partition c.Lane (COUNT#{id}#{run}#{lane}, WAIT),
	// without reading; a write sent again after its answer was lost is
	// recognised as CountLane's (ErrCountUnknown when it cannot be told).
	// The live view's counts (Progress.Waiting, NextRetry, Interrupted,
	// TimedOut);
	// nothing decides on them.
	CountWaits(ctx context.Context, c WaitCount) error
	// CountFanned records that the fan-out chunk c.First of c.Run sent its
	// c.Items item messages, once per chunk whatever the repeats
	// (COUNT#{id}#{run}#{lane}, FAN: the chunks' items added under the
	// condition that the chunk is not among those counted).
	CountFanned(ctx context.Context, c FanCount) error
	// Progress sums the run's chunk counters, reading its counter
	// partitions 0..shards-1 (Batch.CounterShards): O(shards) reads
	// whatever the batch's size.
	Progress(ctx context.Context, batchID string, run, shards int) (Progress, error)
	// ScanItems calls fn for every item row of the batch in key byte order,
	// merging its listShards item partitions (Batch.ListShards). fn's
	// error stops the scan and is returned.
	ScanItems(ctx context.Context, batchID string, listShards int, fn func(Item) error) error
	// ScanShard returns up to limit item rows of item shard `shard` (0 ..
	// listShards-1) whose keys sort after `after` ("" from the first), in
	// key byte order, and whether the shard may hold more past the last
	// one. Rows read as in flight or released are read again consistently.
	// Finalize merges the shards with it in bounded memory (shardmerge.Merge).
	ScanShard(ctx context.Context, batchID string, shard int, after string, limit int) ([]Item, bool, error)
	// FinishRun moves the batch from running to f.Status, only if its
	// current run is run and it is still running; else ErrConflict. It also
	// removes the running marker, writes the retention marker, and lists
	// the batch in Unpublished until SetPublished.
	FinishRun(ctx context.Context, id string, run int, f Finish) error
	// FinalizeFailed counts one failed finalize of f.Run (only if the batch
	// is running that run; else ErrConflict) with its reason, and once
	// f.Limit failures were counted moves the batch to
	// StatusFinalizeFailed with Failure set to the reason, FinishedAt, its
	// retention (f.ExpiresAt) and needs_attention, removing the running
	// marker and writing the retention marker (no report, no event). It
	// reports whether it did.
	FinalizeFailed(ctx context.Context, f FinalizeFailure) (bool, error)
	// RunningBatches lists the ids of running batches.
	RunningBatches(ctx context.Context) ([]string, error)
	// ListBatches returns at most q.Limit batches newest first (CreatedAt,
	// then id, descending) that pass q's filters and are not expired at
	// q.Now, and the position to continue from ("" at the end). It may
	// return fewer than q.Limit, even none, with a position (it reads a
	// bounded share per call). Only the fields of BatchSummary are set. A
	// malformed q.Before is an *InputError naming "cursor".
	ListBatches(ctx context.Context, q BatchQuery) ([]Batch, string, error)
	// Stop marks m.Run as stopping with m.Status (StatusCancelled or
	// StatusThresholdExceeded), its detail and counts, only if it is
	// running and not stopping yet; else ErrConflict.
	Stop(ctx context.Context, m StopMark) error
	// Pause writes m's pause on the batch row (Batch.Pause, Since m.Now,
	// no probe yet; Pauses + 1) only if the batch is running run m.Run, is
	// not stopping and is not paused — or, for m.By PauseByCaller with
	// m.Replaces, is paused by that outage pause (it began at
	// m.Replaces.Since), which the caller's pause replaces, its time to
	// m.Now added to PausedMs and kept as LastPause in the same write; for
	// m.By PauseByBudget, only while the batch's budget is m.BudgetUSD;
	// else ErrConflict.
	Pause(ctx context.Context, m PauseMark) error
	// Unpause removes the batch's pause only if it is at run m.Run and
	// paused — by an outage that began at m.Since, for m.By
	// PauseByOutage; by its budget, for m.By PauseByBudget; by anything
	// but its budget, for m.By PauseByCaller (a budget pause written
	// after the caller read the batch stands); with m.Now set, only the
	// pause that began at m.Since, and it adds m.PausedFor() to the run's
	// PausedMs and sets LastPause to m.Span() in the same write; else
	// ErrConflict. A run's start resets PausedMs and LastPause.
	Unpause(ctx context.Context, m UnpauseMark) error
	// SetLimits writes the limits l sets on the batch row — its budget
	// (Batch.BudgetUSD, US dollars) when l.BudgetUSD > 0, its per-item
	// ceilings (Batch.Ceilings) when l.Ceilings is not nil — only if the
	// batch row exists; else ErrConflict. It does not touch the pause
	// (Control.SetBudget unpauses a budget pause after) nor any item
	// (Control.SetCeilings wakes the exhausted ones after).
	SetLimits(ctx context.Context, id string, l Limits) error
	// NoteRateConflict notes on batch id's row that batch c.BatchID names
	// its rate key at another rate (api.RateConflict): c becomes the
	// latest noted and c.BatchID joins the noted ones, unless it is among
	// them already (a submit repeated notes nothing more) or
	// api.MaxRateConflicts are noted; then, and for a missing row, it
	// writes nothing and returns nil. c.Batches is ignored (the store
	// counts). One conditional UpdateItem.
	NoteRateConflict(ctx context.Context, id string, c api.RateConflict) error
	// MarkApproval writes on a sampled batch's row (api.Plan.Sample) its
	// sample's estimate (m.Estimate not nil), only if the batch is at run
	// m.Run and has neither an estimate nor a decision; or its decision
	// (m.Decision: api.ApprovalApproved or api.ApprovalRejected, by m.By
	// at m.Now), only if the batch is at run m.Run, running, not
	// stopping, and has no decision; else ErrConflict. One write wins:
	// the item function's estimate once, one decision ever.
	MarkApproval(ctx context.Context, m ApprovalMark) error
	// ClaimProbe records probe c.Probe of the outage pause that began at
	// c.Since only if the batch is still so paused and no probe of that
	// number or later was claimed; else ErrConflict. One delivery per
	// check wins.
	ClaimProbe(ctx context.Context, c ProbeClaim) error
	// StartRun starts run from+1 of a finished batch (status running,
	// not fanned out, no stop, no run revision) and returns the batch;
	// ErrConflict when the batch is not at run from or is still running.
	StartRun(ctx context.Context, id string, from int, now time.Time) (Batch, error)
	// StartCorrection is StartRun for a correction: it also appends rev to
	// the batch's revisions and makes it the run's (RunRevision), rev.Run
	// being from+1. ErrConflict as StartRun.
	StartCorrection(ctx context.Context, id string, from int, rev api.Revision, now time.Time) (Batch, error)
	// MarkRevision gives the items of marks revision rev's input for run
	// b.Run (a correction run, started): each item row or pack entry gets
	// Revision rev, only if an earlier run left it failed, quarantined or
	// cancelled, or it has rev already (idempotent). Else the error wraps
	// ErrConflict, naming the key; the marks made stay (a repeat makes
	// them again).
	MarkRevision(ctx context.Context, b Batch, rev int, marks []RevisionMark) error
	// ReadItems reads the item rows of keys (one item per message; a key
	// without a row is left out), strongly consistent, in any order.
	ReadItems(ctx context.Context, batchID string, listShards int, keys []string) ([]Item, error)
	// LocateItem reads item key's state, strongly consistent: its item
	// row, or, for an item of a pack row that has an attention entry
	// (failed, quarantined, held), the pack's entry (Packed, PackFirst,
	// Pos set). ErrNotFound when it has neither.
	LocateItem(ctx context.Context, batchID string, listShards int, key string) (Item, error)
	// ReleaseItem marks a quarantined item released for the next run;
	// ErrNotFound without a row, ErrConflict when it is not quarantined.
	// listShards is the batch's Batch.ListShards (where its row lives).
	ReleaseItem(ctx context.Context, batchID string, listShards int, key string) error
	// ListItems pages the items of outcome (failed, quarantined, in_flight)
	// in key byte order after the key after; it returns the key to continue
	// after, or "" at the end.
	ListItems(ctx context.Context, batchID string, listShards int, outcome api.Outcome, after string, limit int) ([]Item, string, error)
	// MarkCounted records that an item answered from an earlier run's row
	// (succeeded, or quarantined and not released) was counted in run; it
	// returns false when it already was (a duplicate delivery). It never
	// writes the item row (whose output would be billed again). now
	// stamps the mark (its row TTL).
	MarkCounted(ctx context.Context, batchID string, listShards int, key string, run int, now time.Time) (bool, error)
	// MarkForgetting flags a finished batch as being forgotten, so that no
	// run can start while its state is deleted, and stamps the mark
	// (Batch.ForgettingAt = m.Now, Batch.ForgettingBy = m.Token; see
	// ForgetMark). Errors: ErrNotFound
	// without a row, or when the row is another batch of the id than the
	// one read (m.CreatedAt); ErrConflict while a run is going;
	// ErrForgetGoing when m.Quiet is set and another forget marked the
	// batch less than m.Quiet before m.Now. Idempotent otherwise.
	MarkForgetting(ctx context.Context, m ForgetMark) error
	// DeleteBatch removes every row of the batch: its items, counters,
	// concurrency slots, tracks and claim counters, and running marker, then the batch row, and its retention markers last,
	// only once everything else is gone (rows a delete left unprocessed are
	// retried; if some stay, the error says so and the markers remain).
	// With b.ForgettingBy set, the batch row goes only while that is its
	// mark's token (a later forget's mark is that forget's to delete):
	// ErrForgetGoing otherwise, the markers kept.
	DeleteBatch(ctx context.Context, b Batch) error
	// KeepRows sets the TTL (config.AttrExpiresAt, epoch seconds) of the
	// batch's item rows named by keys, and of its counter rows of every
	// run, to until where it is earlier or unset; rows that no longer
	// exist are not created. Idempotent.
	KeepRows(ctx context.Context, b Batch, keys []string, until time.Time) error
	// AcquireSlot takes concurrency slot `slot` of the batch for holder
	// until now+lease, only if the slot is free or its lease has ended;
	// else ErrConflict. Each slot is its own row (its own partition key).
	AcquireSlot(ctx context.Context, batchID string, slot int, holder string, now time.Time, lease time.Duration) error
	// FreeSlot frees the slot only if holder still holds it; a slot taken
	// over by another holder (or gone) is left alone, without error.
	FreeSlot(ctx context.Context, batchID string, slot int, holder string) error
	// ClaimSlice takes the next slice of the run for a track of a batch
	// with max_concurrency: one atomic increment of claim counter
	// c.Counter of the run (its own row), answering the claim's number on
	// that counter, 1 for the first (pace.ClaimNumber gives its slice).
	// Idempotent per track and c.Claim (the track's own count of its
	// claims, from 1, across counters): a claim made again (its answer
	// lost, its delivery crashed before the track was sent on) answers
	// the same number, so no slice is skipped. A claim below the track's
	// last on that counter is ErrConflict (a stale delivery).
	ClaimSlice(ctx context.Context, c SliceClaim) (int64, error)
	// SliceCounter reads claim counter r.Counter of the run strongly
	// consistent: its claims answered and track r.Track's last claim on
	// it (zeros for a counter not claimed from yet).
	SliceCounter(ctx context.Context, r SliceCounterRead) (SliceCount, error)
	// TakeTrack takes the fence row of a track (its own row) for t.Holder
	// until t.Now + t.Lease, when no row exists, the row's seq is below
	// t.Seq, or it is t.Seq and its lease ended or t.Holder holds it,
	// removes the handed units t.Clear names, and answers those left
	// (TrackTaken.Handed). Otherwise ErrConflict, with the time until
	// which another holder of the same seq holds it (zero: a later seq
	// took the track, so this delivery is stale). A retire (t.Holder
	// TrackRetired) is also refused while units other than t.Clear are
	// handed to the track: ErrConflict with Held zero and every handed
	// unit in Handed, the row unchanged.
	TakeTrack(ctx context.Context, t TrackTake) (TrackTaken, error)
	// HandToTrack hands h.Unit to a track of its run: it waits on the
	// track's fence row, under h.ID (the same ID again replaces it),
	// until a take of the track clears it, every take answering it
	// (TrackTaken.Handed); at most MaxHandoffs wait on a row (ErrConflict,
	// retired false, beyond). ErrConflict when the
	// track retired (retired true) or has no row yet; nothing written.
	HandToTrack(ctx context.Context, h TrackHand) (retired bool, err error)
	// TakeTrackSlot takes the fence row of a retired track as a
	// concurrency slot for s.Holder until s.Now + s.Lease, only if the
	// track retired and no other holder's lease on it runs; else
	// ErrConflict. FreeTrackSlot frees it only if s.Holder holds it (no
	// error otherwise). A run's retired tracks are its slots, so that
	// its woken units never run beside more tracks than it has.
	TakeTrackSlot(ctx context.Context, s TrackSlot) error
	FreeTrackSlot(ctx context.Context, s TrackSlot) error
	// The pacing rows of downstream keys (rates, token budgets, the
	// adaptive pace): pace.Rows.
	pace.Rows
	// Unpublished lists the finished runs whose completion event is not
	// yet marked published, oldest first within a batch.
	Unpublished(ctx context.Context) ([]RunRef, error)
	// SetPublished marks run's completion event published on the batch row
	// (Batch.Published while the batch is at run), then drops the run from
	// Unpublished. A batch that no longer exists only loses the entry.
	// Idempotent.
	SetPublished(ctx context.Context, id string, run int) error
	// SetTaskGone marks the batch's task token no longer awaited
	// (Batch.TaskGone): its heartbeats stop. Idempotent; a missing batch
	// is no error.
	SetTaskGone(ctx context.Context, id string) error
	// ExpiredMarkers returns up to limit retention markers that expired at
	// or before now, oldest first.
	ExpiredMarkers(ctx context.Context, now time.Time, limit int) ([]RetentionMarker, error)
	// DeleteMarker deletes the retention marker with the given key.
	DeleteMarker(ctx context.Context, markerKey string) error
	// ClaimUpload stores claim c of an upload's content (one row per
	// content, TTL a day past c.Until) and returns it, only if no claim of
	// c.Content stands: none, one whose Until is not after c.ClaimedAt,
	// or one of the same c.Source — or force. Otherwise it returns the
	// standing claim and ErrConflict, writing nothing. See
	// Submitter.ClaimUpload.
	ClaimUpload(ctx context.Context, c api.UploadClaim, force bool) (api.UploadClaim, error)

	// The pack rows of a batch with items_per_message > 1 (see Pack).
	// ListItems lists their failed and quarantined items with the item
	// rows' (from their attention entries), ReleaseItem releases a
	// quarantined item of a pack, DeleteBatch deletes them.

	// GetPack reads a pack row with a strongly consistent read, or
	// ErrNotFound. A failed or quarantined item's Error may be empty: a
	// store may keep that text on the item's attention entry alone, which
	// ScanPacks, ListItems and LocateItem read it from.
	GetPack(ctx context.Context, ref PackRef) (Pack, error)
	// WritePack takes a pack or writes it under its fence (see PackWrite);
	// ErrConflict when the condition does not hold.
	WritePack(ctx context.Context, w PackWrite) error
	// ScanPacks is ScanShard for pack rows: up to about limit items of the
	// packs of item shard `shard` whose position (Item.Pos) sorts after
	// `after` ("" from the first), in position order, never-reserved items
	// left out, and whether the shard may hold more. A pack read with an
	// item in flight or released is read again consistently.
	ScanPacks(ctx context.Context, batchID string, shard int, after string, limit int) ([]Item, bool, error)
	// ListPackItems pages the in-flight items of the batch's pack rows in
	// key byte order after the key after; it returns the key to continue
	// after, or "" at the end. It reads the packs whose last write left
	// items in flight (PackWrite.InFlight), not the others.
	ListPackItems(ctx context.Context, batchID string, listShards int, after string, limit int) ([]Item, string, error)
	// KeepPacks is KeepRows for the pack rows starting at firsts and the
	// attention entries of the pack items named by attention.
	KeepPacks(ctx context.Context, b Batch, firsts []int64, attention []string, until time.Time) error
}

// RunRef names one run of a batch.
type RunRef struct {
	BatchID string
	Run     int
}

// RetentionMarker says when a finished batch's retention ends. Key is the
// stored sort key ("{expires_at_ms:020}#{batch id}"); Malformed is set when
// it does not parse (BatchID and ExpiresAt are then empty).
type RetentionMarker struct {
	Key       string
	BatchID   string
	ExpiresAt time.Time
	Malformed bool
}

// Reservation asks Store.Reserve for an item.
type Reservation struct {
	BatchID string
	Key     string
	RunID   string
	Run     int
	// Revision is the run's revision (Batch.RunRevision): ≥ 2 for a
	// correction run, whose fresh items are those marked with it (Plan).
	Revision   int
	ListShards int // Batch.ListShards: which partition holds the row
	Now        time.Time
	Lease      time.Duration
	// Redelivered says the message was received before, so the row is most
	// likely in flight in this run (a scheduled retry, a takeover): a store
	// that decides by conditional writes tries the takeover's condition
	// first, which then holds, instead of the new run's, which then fails
	// (and is billed). Either order takes the same rows.
	Redelivered bool
	// Token tells this take from every other: random, one per take
	// (NewTakeToken), stored on the row with it. The SDK sends a write
	// again when its answer was lost (a reset connection, a 5xx), also
	// when the first try was applied; the resend then fails the take's
	// condition on the take's own row. A refused take whose stored row
	// carries its token is that take, applied: Reserve answers it as
	// taken, as the first try would have, and no attempt is lost. Empty:
	// no such check (a refused resend reads as another delivery's take).
	Token string
}

// Record is an outcome to write (Record, Settle) or a lease to release
// (Release).
type Record struct {
	BatchID    string
	Key        string
	RunID      string
	Run        int
	Revision   int // the run's revision (Batch.RunRevision; Settle, SettleUnstarted: see Reservation)
	ListShards int
	Attempt    int // the fence (Record, Release); ignored by Settle
	Outcome    api.Outcome
	Output     json.RawMessage
	OutputRef  string
	Error      string
	Reason     api.Reason
	// Hold is a held outcome's hold (Record of withheld); ignored for
	// any other outcome.
	Hold api.Hold
	Cost pipeline.Cost // the attempt's own cost (Record, Settle)
	// Spent is what every attempt of Run has spent, this one included
	// (Record, Release); stored with the run number when not empty.
	Spent pipeline.Cost
	// FirstAttempt (Record, Release) and ThrottledSince (Release) are the
	// item's first counted attempt of the run and the start of its streak
	// of throttled attempts, written as given: a throttled attempt, or one
	// a stop ended before its call, moves FirstAttempt past itself
	// (ledger.Ended), so it does not count (toward max attempts, or in the
	// results' attempts); a zero ThrottledSince ends a streak.
	// FirstAttempt 0 leaves the stored one.
	FirstAttempt   int
	ThrottledSince time.Time
	// RetryAt (Release) is when the released attempt's retry is due
	// (ItemState.RetryAt): the row's lease runs until 1 ms before it, so
	// that a delivery before it (an SQS duplicate) finds the item held and
	// comes back then; zero or past: the lease ends at Now.
	RetryAt time.Time
	// Effects are the writes the pipeline staged during this attempt
	// (shared/pipeline/effects), committed by Record in one transaction
	// with a succeeded outcome, under the same fence; nil or Len 0 for
	// none. Record refuses them with an *EffectsError.
	Effects StagedEffects
	Now     time.Time
	// Token (Settle, SettleUnstarted) is the settle's own, as a take's
	// (Reservation.Token): a settle sent again after its answer was lost
	// finds its own outcome under it and answers as the first try (the
	// item counted once, by the delivery that settled it).
	Token string
}

// StagedEffects is what one attempt staged. Its concrete type belongs to
// the Store that commits it (internal/dynamo takes effects.Writes), so this
// package links no storage SDK.
type StagedEffects interface{ Len() int }

// ChunkCount is one counter write of Store.CountChunk.
type ChunkCount struct {
	BatchID string
	Run     int
	// First and Items name the fan-out chunk (Chunk.FirstIndex,
	// Chunk.Count): its counter is complete at Items.
	First, Items int64
	Chunks       int // the run's chunks (Batch.Chunks); 0: completion is left to the tick
	Shards       int // Batch.CounterShards
	// Outcomes counts the terminal items by outcome; their sum is what
	// the chunk's counter grows by.
	Outcomes map[api.Outcome]int64
	Failures int64 // failed and quarantined among them
	// RunFailures also adds Failures to the run's failure total and
	// returns it (for the early stop on a threshold); without it the run
	// row is written only when the chunk completes.
	RunFailures bool
	// Cost and Spent are what the counted items cost, summed per name as
	// the census sums them (Census.Cost: the attempt that ended each item;
	// Census.RunSpent: every attempt of this run of the items that ran in
	// it). Added to the chunk's counter, so that a running batch shows its
	// cost so far (Progress). Empty for none.
	Cost, Spent pipeline.CostSum
	Now         time.Time
}

// Done is the number of items c counts.
func (c ChunkCount) Done() int64 {
	var n int64
	for _, v := range c.Outcomes {
		n += v
	}
	return n
}

// LaneCount is one write of Store.CountLane.
type LaneCount struct {
	BatchID string
	Run     int
	Lane    int   // 0 … Batch.CounterLanes−1
	Target  int64 // LaneTarget of the lane
	// Outcomes counts the terminal items by outcome; their sum is what
	// the lane grows by.
	Outcomes map[api.Outcome]int64
	Failures int64 // failed and quarantined among them
	// Cost and Spent are what the counted items cost and this run spent
	// on them, summed per name (as ChunkCount's).
	Cost, Spent pipeline.CostSum
	// Answered says an item of the message batch ended other than by a
	// transient failure (the downstream answered): every failure-class
	// streak of the lane ends (is removed). Streaks adds, per slot
	// (streak.Slot), the attempts that failed transiently when none was
	// answered. See Pause.
	Answered bool
	Streaks  map[int]int64
	// BusyMs adds how long, in milliseconds, the message batch's
	// deliveries that ran an attempt took, each from its start to its
	// end (Progress.BusyMs); 0 adds nothing. The worker sends it only
	// for a sampled first run without its estimate.
	BusyMs int64
	// Token tells this write from every other (a random string): a write
	// sent again after its answer was lost finds it on the row (the
	// adapter keeps recent writes' tokens in slots).
	Token string
	Now   time.Time
}

// Done is the number of items c counts.
func (c LaneCount) Done() int64 { return SumOutcomes(c.Outcomes) }

// LaneCounted is the lane after one CountLane write.
type LaneCounted struct {
	Done, Failures int64 // the lane's totals after the write
	Room           int64 // when the items did not fit (ErrConflict): Target − done
	// Streaks holds the slots LaneCount.Streaks added to, after the write.
	Streaks map[int]int64
}

// RunCount is one write of Store.CountRun.
type RunCount struct {
	BatchID   string
	Run       int
	LanesDone int64 // lanes this write completes (0 or 1)
	Failures  int64 // failures pushed to the run's total (Worker.count)
	Token     string
	Now       time.Time
}

// WaitCount is one write of Store.CountWaits.
type WaitCount struct {
	BatchID string
	Run     int
	Lane    int // 0 … Batch.CounterShards−1
	// Due counts the items whose retry was scheduled by the Unix minute
	// (UTC) it is due, rounded up: an item waits until its minute begins.
	Due map[int64]int64
	// Throttled counts, by the same minutes, the items of Due that wait
	// out a throttling (the downstream's own rate: an HTTP 429 or 503 and
	// its Retry-After, Lambda's TooManyRequestsException), which uses no
	// attempt.
	Throttled map[int64]int64
	// Causes counts, by failure class (streak.Class), the other items of
	// Due: those that wait after a transient failure, by the same minutes,
	// with one failure's text.
	Causes      map[string]WaitCause
	Interrupted int64 // attempts cut off or taken over (outcome unknown)
	TimedOut    int64 // attempts whose call was given up without an answer (*pipeline.TimeoutError)
	// Held adds items held (+1 by the attempt that held one) and moved on
	// (−1 by the take or settle of a woken one), by held outcome.
	Held  map[api.Outcome]int64
	Token string
	Now   time.Time
}

// WaitCause is the items waiting for a retry after transient failures of
// one class (WaitCount.Causes, Progress.Causes): by the Unix minute their
// retry is due, with one failure's text (cut to MaxWaitCauseBytes).
type WaitCause struct {
	Error string
	Due   map[int64]int64
	// Total is every item the class's retries counted over the run (Due
	// summed as written: a store may prune Due's past minutes, never
	// this; 0 on rows written before it).
	Total int64
}

// MaxWaitCauseBytes is the longest failure text a wait cause keeps.
const MaxWaitCauseBytes = 256

// FanCount is one write of Store.CountFanned.
type FanCount struct {
	BatchID string
	Run     int
	Lane    int   // 0 … Batch.CounterShards−1
	Row     int   // the partition's fan row: 0 … rows−1 (fanout.CountOf)
	First   int64 // the chunk's first manifest index
	Items   int64 // the chunk's items
	Now     time.Time
}

// RunCounted is the run row after one CountRun write.
type RunCounted struct {
	LanesDone, Failures int64
}

// SumOutcomes is the sum of m's counts.
func SumOutcomes(m map[api.Outcome]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// ChunkCounted is what one CountChunk write found.
type ChunkCounted struct {
	ChunkDone bool  // this write brought the chunk's counter to its item count
	RunDone   bool  // ... and the run's chunks-done counter to Chunks
	Failures  int64 // the run's failures counted so far (with RunFailures)
}

// StopMark is a run being stopped (Store.Stop): why, and how far the run
// had got by its counters (Batch.StopRan, Batch.StopFailures).
type StopMark struct {
	BatchID  string
	Run      int
	Status   api.Status // StatusCancelled or StatusThresholdExceeded
	Detail   string     // e.g. "251 failures of 5000 items > 5% tolerated"
	Ran      int64      // items ended succeeded, failed or quarantined
	Failures int64      // of them failed or quarantined
}

// Progress is the sum of a run's counter rows.
type Progress struct {
	Done      int64
	Failures  int64
	ByOutcome map[api.Outcome]int64 // Done by terminal outcome
	// Cost and Spent sum the counters' Cost and Spent: the cost of the
	// items counted, and what the run's attempts reported spending (lanes:
	// each attempt as its ending is written; a lost counter write loses
	// its share; the report's census is exact).
	Cost, Spent pipeline.CostSum
	UpdatedAt   time.Time // latest update of any counter row; zero when none
	// BusyMs sums LaneCount.BusyMs: the milliseconds the run's deliveries
	// that ran an attempt took while it was counted (a sample's, for its
	// estimate: sample.Run.Busy).
	BusyMs int64
	Usage  api.Usage // what the run's message batches consumed, as far as attributed
	// RetryDue counts the items whose retry was scheduled, by the Unix
	// minute it is due (WaitCount.Due summed): those of minutes still to
	// come are waiting (Waiting, NextRetry).
	RetryDue map[int64]int64
	// ThrottledDue counts, by the same minutes, those of RetryDue that
	// wait out a throttling (WaitCount.Throttled); Causes the others, by
	// failure class (WaitCount.Causes; a store may keep a few classes
	// only, and then merges the others into them).
	ThrottledDue map[int64]int64
	Causes       map[string]WaitCause
	// Retried is every retry the run scheduled (WaitCount.Due summed as
	// written) and RetriedThrottled those of them that waited out a
	// throttling: a store may prune RetryDue's past minutes (they count
	// no wait), never these (0 on rows written before them).
	Retried, RetriedThrottled int64
	// Interrupted counts the run's attempts whose outcome is unknown (cut
	// off at the invocation's deadline or a lease's end, or taken over
	// after their holder died).
	Interrupted int64
	// TimedOut counts the run's attempts whose call reached the
	// downstream and was given up without an answer (WaitCount.TimedOut):
	// the downstream may have finished them.
	TimedOut int64
	// FannedOut counts the items of the chunks whose fan-out sent every
	// item message (CountFanned); FanChunks how many chunks those are
	// (a sampled first run's chunk of the sample's end counts as two: its
	// sample's messages and the rest's).
	FannedOut int64
	FanChunks int64
	// Held counts the run's held items by held outcome (WaitCount.Held
	// summed): items that wait, neither ended nor in flight.
	Held map[api.Outcome]int64
	// Pace is the ring of samples of these counters the batch view keeps
	// (eta.Next), oldest first; empty when none.
	Pace []eta.Sample
}

// HeldItems is how many of the run's items are held (Held summed, never
// below 0).
func (p Progress) HeldItems() int64 { return max(0, SumOutcomes(p.Held)) }

// Waiting is how many items wait for a retry due after now (counted by
// the minute: an item due within the current minute no longer counts).
func (p Progress) Waiting(now time.Time) int64 { return dueAfter(p.RetryDue, now) }

// ThrottledWaiting is how many items wait out a throttling, due after
// now (as Waiting).
func (p Progress) ThrottledWaiting(now time.Time) int64 { return dueAfter(p.ThrottledDue, now) }

// Cause is the failure class most items wait a retry for after now, its
// text and how many wait for it ("" and 0 when none waits after a
// failure). Ties go to the class that sorts first.
func (p Progress) Cause(now time.Time) (class, text string, items int64) {
	for c, w := range p.Causes {
		if n := dueAfter(w.Due, now); n > items || n == items && n > 0 && c < class {
			class, text, items = c, w.Error, n
		}
	}
	return class, text, items
}

// NextFailedRetry is NextRetry of the items waiting after a failure (not
// a throttling): the first minute after now in which more retries are
// due than throttled ones; zero when none.
func (p Progress) NextFailedRetry(now time.Time) time.Time {
	var next int64
	for m, c := range p.RetryDue {
		if c > p.ThrottledDue[m] && m*60 > now.Unix() && (next == 0 || m < next) {
			next = m
		}
	}
	if next == 0 {
		return time.Time{}
	}
	return time.Unix(next*60, 0).UTC()
}

// dueAfter sums the counts of due whose minute begins after now.
func dueAfter(due map[int64]int64, now time.Time) int64 {
	var n int64
	for m, c := range due {
		if m*60 > now.Unix() {
			n += c
		}
	}
	return max(0, n)
}

// NextRetry is the start of the first minute after now in which a
// waiting item's retry is due; zero when none waits.
func (p Progress) NextRetry(now time.Time) time.Time {
	var next int64
	for m, c := range p.RetryDue {
		if c > 0 && m*60 > now.Unix() && (next == 0 || m < next) {
			next = m
		}
	}
	if next == 0 {
		return time.Time{}
	}
	return time.Unix(next*60, 0).UTC()
}

// DueMinute is the Unix minute a retry due at t counts in (rounded up).
func DueMinute(t time.Time) int64 { return (t.Unix() + 59) / 60 }

// FinalizeFailure is what FinalizeFailed writes.
type FinalizeFailure struct {
	BatchID   string
	Run       int
	Reason    string // cut to pipeline.MaxErrorTextBytes
	Limit     int    // failures after which the run is ended
	Now       time.Time
	ExpiresAt time.Time // the retention's end once ended
}

// Finish is what FinishRun writes.
type Finish struct {
	Status    api.Status
	ReportKey string
	Census    api.Census
	// NeedsAttention is the report's (api.Report.NeedsAttention): the
	// census's, or a halt kept.
	NeedsAttention bool
	FinishedAt     time.Time
	ExpiresAt      time.Time // when the retention ends
	// RowsExpireAt is the TTL given to the batch row (ExpiresAt +
	// TTLGrace); zero for none.
	RowsExpireAt time.Time
}

// Blobs stores the batch's objects in one S3 bucket and reads sources from
// any bucket. The S3 adapter (internal/blob) implements it.
type Blobs interface {
	// Bucket is the name of the bucket the batches live in.
	Bucket() string
	// Create starts a streaming write (multipart upload) of key. Close
	// completes it; Abort discards every part. Nothing is visible before Close.
	Create(ctx context.Context, key, contentType string) (BlobWriter, error)
	// Open reads bucket/key; a missing object is ErrNotFound.
	Open(ctx context.Context, bucket, key string) (io.ReadCloser, error)
	// HeadSource returns the size and ETag of bucket/key without reading
	// it (S3 HeadObject, which s3:GetObject grants: S3 API reference,
	// "HeadObject"); a missing object is ErrNotFound.
	HeadSource(ctx context.Context, bucket, key string) (source.ObjectInfo, error)
	// OpenMatch reads bucket/key only if its ETag is etag (S3 If-Match;
	// "" reads whatever is there): another object under the key is
	// ErrConflict, a missing one ErrNotFound.
	OpenMatch(ctx context.Context, bucket, key, etag string) (io.ReadCloser, error)
	// OpenRange reads length bytes at offset of key in the batches bucket.
	OpenRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
	// Put writes key whole (overwrites).
	Put(ctx context.Context, key, contentType string, body []byte) error
	// PutIfAbsent writes key only if no object has that key; else ErrConflict.
	PutIfAbsent(ctx context.Context, key, contentType string, body []byte) error
	// Get reads key whole; ErrNotFound when missing.
	Get(ctx context.Context, key string) ([]byte, error)
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List calls fn for every object under bucket/prefix, in key order,
	// across every page.
	List(ctx context.Context, bucket, prefix string, fn func(source.ObjectInfo) error) error
	// DeletePrefix removes every object under prefix in the batches bucket
	// and returns how many it removed.
	DeletePrefix(ctx context.Context, prefix string) (int, error)
	// StartParts begins a multipart upload of key whose parts may be
	// written from several invocations, and returns its upload id.
	StartParts(ctx context.Context, key, contentType string) (string, error)
	// PutPart writes part n (1–10,000) of upload id; writing it again
	// replaces it. Every part but the last holds at least 5 MiB.
	PutPart(ctx context.Context, key, id string, n int, body []byte) error
	// CopyPart writes part n of upload id of key as bytes [offset,
	// offset+length) of the object src in the batches bucket, copied
	// inside the store (S3 UploadPartCopy with x-amz-copy-source-range: at
	// most 5 GiB, every part but the last at least 5 MiB; it needs
	// s3:GetObject on src and s3:PutObject on key). Writing it again
	// replaces it.
	CopyPart(ctx context.Context, key, id string, n int, src string, offset, length int64) error
	// CompleteParts makes parts 1..n (size bytes in all) the object key.
	// Idempotent: an upload already completed into size bytes is no error.
	CompleteParts(ctx context.Context, key, id string, n int, size int64) error
}

// Events publishes a finished run's report (EventBridge adapter:
// internal/event). Nil means no events.
type Events interface {
	Publish(ctx context.Context, r api.Report) error
}

// Tasks answers Step Functions task tokens (adapter: internal/event):
// Succeed is SendTaskSuccess with output (JSON), Fail is SendTaskFailure
// with an error name (api.TaskError*) and cause, Heartbeat is
// SendTaskHeartbeat. A token Step Functions no longer knows (already
// answered, timed out, its execution ended) is ErrTaskGone. Nil means
// none is answered.
type Tasks interface {
	Succeed(ctx context.Context, token string, output []byte) error
	Fail(ctx context.Context, token, name, cause string) error
	Heartbeat(ctx context.Context, token string) error
}

// BlobWriter is a streaming object write.
type BlobWriter interface {
	io.Writer
	// Close completes the object. After an error nothing is visible.
	Close() error
	// Abort discards what was written. Safe after Close (no-op).
	Abort() error
}

// Queue sends messages to the items queue. The SQS adapter (internal/queue)
// implements it.
type Queue interface {
	// Send delivers every body, in SendMessageBatch calls of at most 10
	// entries and 256 KiB, re-sending only the entries that failed
	// transiently. Bodies the queue refuses as the sender's fault are not
	// retried: Send sends the others and returns a *RefusedError naming
	// them. Bodies still unsent after the retries give an *UnsentError
	// naming them (and any refused), wrapping ErrUnavailable: every other
	// body is on the queue, so a caller sends again only those.
	Send(ctx context.Context, bodies [][]byte) error
	// Requeue sends body as a new message, visible after delay (0–15 min):
	// its receive count starts again from 0.
	Requeue(ctx context.Context, body []byte, delay time.Duration) error
	// Delay makes a received message visible again after d (0–12 h).
	Delay(ctx context.Context, receiptHandle string, d time.Duration) error
}

// RefusedError is Queue.Send's report of bodies the queue refused as the
// sender's fault (SQS SendMessageBatch's SenderFault): sending them again
// cannot succeed. Every other body was sent.
type RefusedError struct {
	Refused []Refusal // in Index order
}

// Refusal is one refused body: its index in Send's bodies and the queue's
// code and message.
type Refusal struct {
	Index   int
	Code    string
	Message string
}

func (e *RefusedError) Error() string {
	if len(e.Refused) == 0 {
		return "send: no message refused"
	}
	r := e.Refused[0]
	return fmt.Sprintf("send: %d messages refused by the queue; first: message %d: %s: %s", len(e.Refused), r.Index, r.Code, r.Message)
}

// UnsentError is Queue.Send's report of bodies it did not send: the queue
// did not accept them within its tries, or the call that would have
// carried them was not made once another call had failed. Unsent lists
// their indexes in Send's bodies, ascending; every other body was sent,
// or refused as the sender's fault (Refused, as a *RefusedError lists
// them). Err is why: it wraps ErrUnavailable when the queue failed (or
// holds the context's error), so errors.Is(err, ErrUnavailable) tells a
// caller to send the Unsent bodies again later — and only them.
type UnsentError struct {
	Unsent  []int
	Refused []Refusal // in Index order
	Err     error
}

func (e *UnsentError) Error() string {
	return fmt.Sprintf("send: %d messages unsent: %v", len(e.Unsent), e.Err)
}

func (e *UnsentError) Unwrap() error { return e.Err }

// Trigger starts finalize for a run, asynchronously. Triggering twice is
// harmless: finalize writes the report once per run.
type Trigger interface {
	Finalize(ctx context.Context, batchID string, run int) error
}

// Clock tells the time (UTC).
type Clock interface{ Now() time.Time }

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().UTC().
func (SystemClock) Now() time.Time { return time.Now().UTC() }

// BatchQuery is what Store.ListBatches reads: batches newest first (by
// CreatedAt, then id), at most Limit of them.
type BatchQuery struct {
	// Statuses keeps only batches in one of these statuses; empty keeps all.
	Statuses []api.Status
	// Since keeps only batches created at or after it; zero: no bound.
	Since time.Time
	// Source keeps only the batches whose source is this S3 object or
	// prefix, as Batch.Source describes it ("s3://bucket/key",
	// "s3://bucket/prefix/*"); "" keeps all. A store reads only that
	// source's batches then (an index of their own), not the whole listing.
	Source string
	// Before continues a listing: the position a previous page ended at
	// (its next position, as the store returned it); "" starts at the
	// newest batch.
	Before string
	// Limit is the most batches of the page, ≥ 1.
	Limit int
	// Now decides expiry: a batch Expired at Now is never listed.
	Now time.Time
}

// ApprovalMark is what Store.MarkApproval writes: an estimate, or a
// decision.
type ApprovalMark struct {
	BatchID  string
	Run      int
	Estimate *api.SampleEstimate
	Decision api.ApprovalState
	By       string
	Now      time.Time
}

// Limits are what Store.SetLimits writes on a batch row: BudgetUSD when
// > 0, Ceilings when not nil; the rest of the row stays.
type Limits struct {
	BudgetUSD float64
	Ceilings  *api.Ceilings
	// CeilingsWas, with Ceilings, is the batch's ceilings as the caller
	// read them (nil: none): the write is refused with ErrConflict when
	// the row holds others, so that two raises merged from one read do
	// not undo each other.
	CeilingsWas *api.Ceilings
}
