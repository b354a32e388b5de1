package memstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Store is an in-memory ledger store: one mutex over maps, with the
// conditions, transitions and listing orders of the DynamoDB adapter
// (internal/dynamo), proven by the same conformance suite
// (ledgertest.Run). It lets the engines' code paths (submit, items,
// finalize, control, sweep) be tested in milliseconds; storage semantics
// are still tested against DynamoDB on the emulator.
//
// Times are kept at the adapter's precision: milliseconds for leases and
// stamps, seconds for row TTLs. It meters no capacity (Progress.Usage is
// zero) and commits no staged effects (a Record carrying any is refused).
// The zero value is not usable: call NewStore.
type Store struct {
	mu        sync.Mutex
	batches   map[string]*ledger.Batch
	items     map[string]map[string]*row // batch id → item key → row
	marks     map[markKey]bool
	chunks    map[chunkKey]*counter
	runs      map[runKey]*runCounter
	slots     map[slotKey]slot
	claims    map[counterKey]*claimRow // a max_concurrency run's claim counters
	tracks    map[trackKey]track       // a max_concurrency run's track fences
	rates     map[rateKey]time.Time    // a rate key's bucket row: its Next
	tokens    map[string]tokenRow      // a token key's row: its Next and usage
	adapts    map[string]pace.Adapt    // a downstream key's adaptive row
	running   map[string]int           // batch id → run
	retention map[string]string        // marker key → batch id
	publish   map[ledger.RunRef]bool
	packs     map[string]map[int64]*packRow   // batch id → first index → pack row
	attn      map[string]map[string]attnEntry // batch id → key → attention entry of a pack item
	uploads   map[string]api.UploadClaim      // content → claim
	conflicts map[string][]string             // batch id → the batch ids noted on it (NoteRateConflict)
}

var _ ledger.Store = (*Store)(nil)

// MaxItemBytes is DynamoDB's item size limit, which the in-memory store
// applies to item and pack rows as DynamoDB does: 400 KB, counted as
// 409,600 bytes (Amazon DynamoDB developer guide, "Service, account, and
// table quotas", Item size,
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html).
// The store sizes a row by ledger.StateBytes, an upper estimate, so a
// row it takes fits DynamoDB too.
const MaxItemBytes = 400 << 10

// ErrItemTooLarge is the in-memory store's refusal of a row over
// MaxItemBytes, as DynamoDB refuses one with a ValidationException
// ("Item size has exceeded the maximum allowed size"): not a conflict,
// not AWS being unavailable.
var ErrItemTooLarge = errors.New("item size has exceeded the maximum allowed size")

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{
		batches: map[string]*ledger.Batch{}, items: map[string]map[string]*row{}, marks: map[markKey]bool{},
		chunks: map[chunkKey]*counter{}, runs: map[runKey]*runCounter{}, slots: map[slotKey]slot{},
		claims: map[counterKey]*claimRow{}, tracks: map[trackKey]track{}, rates: map[rateKey]time.Time{},
		running: map[string]int{}, retention: map[string]string{}, publish: map[ledger.RunRef]bool{},
		packs: map[string]map[int64]*packRow{}, attn: map[string]map[string]attnEntry{},
		uploads: map[string]api.UploadClaim{}, tokens: map[string]tokenRow{}, adapts: map[string]pace.Adapt{},
	}
}

// ClaimUpload stores c unless another object's claim of its content
// stands (see ledger.Store).
func (s *Store) ClaimUpload(_ context.Context, c api.UploadClaim, force bool) (api.UploadClaim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.uploads[c.Content]; ok && !force && old.Until.After(c.ClaimedAt) && old.Source != c.Source {
		return old, api.ErrConflict
	}
	s.uploads[c.Content] = c
	return c, nil
}

type markKey struct {
	batchID, key string
	run          int
}

type chunkKey struct {
	batchID string
	run     int
	first   int64 // the chunk's first item; the lane number for a lane
	lane    bool  // a counter lane (CountLane), not a chunk counter
}

type counter struct {
	part           int
	done, failures int64
	items          int64
	busyMs         int64 // a lane's LaneCount.BusyMs
	byOutcome      map[api.Outcome]int64
	cost, spent    pipeline.CostSum
	updatedAt      time.Time
	expiresAt      time.Time
	streaks        map[int]int64 // a lane's failure-class streaks by slot
}

// MaxExpressionBytes is DynamoDB's limit on an expression string: 4 KB
// (Amazon DynamoDB developer guide, "Service, account, and table
// quotas", Expression parameters). The in-memory store applies it to a
// counter lane's write, sized as the DynamoDB adapter writes it
// (laneExpressionBytes), whose update names one attribute per cost name.
const MaxExpressionBytes = 4 << 10

// ErrExpressionTooLong is the in-memory store's refusal of a write whose
// expression would pass MaxExpressionBytes, as DynamoDB refuses one with
// a ValidationException.
var ErrExpressionTooLong = errors.New("expression exceeds the maximum length")

// laneExpressionBytes estimates the update expression of c as the
// DynamoDB adapter writes it (internal/dynamo, CountLane): 12 bytes per
// ADD or SET clause ("#123 :123, " and its keyword's share), one per cost
// and spent name, outcome and streak slot, and 12 clauses more for done,
// failures, the token, the units, the format and the times.
func laneExpressionBytes(c ledger.LaneCount) int {
	return 12 * (len(c.Cost) + len(c.Spent) + len(c.Outcomes) + len(c.Streaks) + 12)
}

// laneRowBytes is the size of the counter lane row c leaves: 512 bytes
// for its counts, and per cost and spent name its attribute ("c#" or
// "s#" and the name) and a 21-byte number.
func laneRowBytes(ctr *counter, c ledger.LaneCount) int {
	n := 512
	for _, sums := range [][2]pipeline.CostSum{{ctr.cost, c.Cost}, {ctr.spent, c.Spent}} {
		for name := range sums[0] {
			n += 2 + len(name) + 21
		}
		for name := range sums[1] {
			if _, had := sums[0][name]; !had {
				n += 2 + len(name) + 21
			}
		}
	}
	return n
}

// addSum adds every amount of from into to.
func addSum(to, from pipeline.CostSum) {
	for k, v := range from {
		to[k] = to[k].Add(v)
	}
}

type runKey struct {
	batchID string
	run     int
}

type runCounter struct {
	chunksDone, lanesDone, failures int64
	// The live view's counts (CountWaits, CountFanned).
	due, throttled      map[int64]int64
	causes              map[string]ledger.WaitCause
	interrupted, fanned int64
	timedOut            int64
	retried, retriedT   int64
	fanChunks           map[fanEntry]bool // per fan row, as DynamoDB's string set on the row (CountFanned)
	held                map[api.Outcome]int64
}

func (s *Store) runCounter(batchID string, run int) *runCounter {
	rk := runKey{batchID: batchID, run: run}
	rc := s.runs[rk]
	if rc == nil {
		rc = &runCounter{}
		s.runs[rk] = rc
	}
	if rc.due == nil {
		rc.due, rc.fanChunks = map[int64]int64{}, map[fanEntry]bool{}
		rc.throttled, rc.causes = map[int64]int64{}, map[string]ledger.WaitCause{}
		rc.held = map[api.Outcome]int64{}
	}
	return rc
}

type slotKey struct {
	batchID string
	slot    int
}

type slot struct {
	holder     string
	leaseUntil time.Time
}

// ms is t at DynamoDB's rows' precision (milliseconds), UTC; zero stays zero.
func ms(t time.Time) time.Time { return t.Truncate(time.Millisecond).UTC() }

func conflictf(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, api.ErrConflict)...)
}

// MarkCounted implements ledger.Store.
func (s *Store) MarkCounted(_ context.Context, batchID string, _ int, key string, run int, _ time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := markKey{batchID: batchID, key: key, run: run}
	if s.marks[k] {
		return false, nil
	}
	s.marks[k] = true
	return true, nil
}

// CountChunk implements ledger.Store.
func (s *Store) CountChunk(_ context.Context, c ledger.ChunkCount) (ledger.ChunkCounted, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var res ledger.ChunkCounted
	k := chunkKey{batchID: c.BatchID, run: c.Run, first: c.First}
	ctr := s.chunks[k]
	if ctr == nil {
		ctr = &counter{byOutcome: map[api.Outcome]int64{}, cost: pipeline.CostSum{}, spent: pipeline.CostSum{}}
		s.chunks[k] = ctr
	}
	ctr.part = int((c.First / max(c.Items, 1)) % int64(max(1, c.Shards)))
	done := c.Done()
	ctr.done += done
	ctr.failures += c.Failures
	ctr.items = c.Items
	ctr.updatedAt = ms(c.Now)
	for o, n := range c.Outcomes {
		if o.Terminal() {
			ctr.byOutcome[o] += n
		}
	}
	addSum(ctr.cost, c.Cost)
	addSum(ctr.spent, c.Spent)
	res.ChunkDone = ctr.done >= c.Items && ctr.done-done < c.Items
	if !res.ChunkDone && !c.RunFailures {
		return res, nil
	}
	rk := runKey{batchID: c.BatchID, run: c.Run}
	rc := s.runs[rk]
	if rc == nil {
		rc = &runCounter{}
		s.runs[rk] = rc
	}
	if res.ChunkDone {
		rc.chunksDone++
	}
	if c.RunFailures {
		rc.failures += c.Failures
		res.Failures = rc.failures
	}
	res.RunDone = res.ChunkDone && c.Chunks > 0 && rc.chunksDone == int64(c.Chunks)
	return res, nil
}

// CountLane implements ledger.Store.
func (s *Store) CountLane(_ context.Context, c ledger.LaneCount) (ledger.LaneCounted, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := chunkKey{batchID: c.BatchID, run: c.Run, first: int64(c.Lane), lane: true}
	ctr := s.chunks[k]
	if ctr == nil {
		ctr = &counter{part: c.Lane, byOutcome: map[api.Outcome]int64{}, cost: pipeline.CostSum{}, spent: pipeline.CostSum{}}
	}
	done := c.Done()
	if ctr.done+done > c.Target {
		return ledger.LaneCounted{Done: ctr.done, Failures: ctr.failures, Room: c.Target - ctr.done},
			conflictf("count lane %d of %s run %d: %d items do not fit", c.Lane, c.BatchID, c.Run, done)
	}
	if n := laneExpressionBytes(c); n > MaxExpressionBytes {
		return ledger.LaneCounted{}, fmt.Errorf("count lane %d of %s run %d: %w (≈ %d bytes)", c.Lane, c.BatchID, c.Run, ErrExpressionTooLong, n)
	}
	if n := laneRowBytes(ctr, c); n > MaxItemBytes {
		return ledger.LaneCounted{}, fmt.Errorf("count lane %d of %s run %d: %w (%d bytes)", c.Lane, c.BatchID, c.Run, ErrItemTooLarge, n)
	}
	s.chunks[k] = ctr
	ctr.done += done
	ctr.failures += c.Failures
	ctr.busyMs += c.BusyMs
	ctr.items = c.Target
	ctr.updatedAt = ms(c.Now)
	for o, n := range c.Outcomes {
		if o.Terminal() {
			ctr.byOutcome[o] += n
		}
	}
	addSum(ctr.cost, c.Cost)
	addSum(ctr.spent, c.Spent)
	got := ledger.LaneCounted{Done: ctr.done, Failures: ctr.failures}
	switch {
	case c.Answered:
		ctr.streaks = nil
	case len(c.Streaks) > 0:
		if ctr.streaks == nil {
			ctr.streaks = map[int]int64{}
		}
		got.Streaks = map[int]int64{}
		for slot, n := range c.Streaks {
			ctr.streaks[slot] += n
			got.Streaks[slot] = ctr.streaks[slot]
		}
	}
	return got, nil
}

// CountRun implements ledger.Store.
func (s *Store) CountRun(_ context.Context, c ledger.RunCount) (ledger.RunCounted, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rc := s.runCounter(c.BatchID, c.Run)
	rc.lanesDone += c.LanesDone
	rc.failures += c.Failures
	return ledger.RunCounted{LanesDone: rc.lanesDone, Failures: rc.failures}, nil
}

// CountWaits implements ledger.Store.
func (s *Store) CountWaits(_ context.Context, c ledger.WaitCount) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rc := s.runCounter(c.BatchID, c.Run)
	for m, n := range c.Due {
		rc.due[m] += n
		rc.retried += n
	}
	for m, n := range c.Throttled {
		rc.throttled[m] += n
		rc.retriedT += n
	}
	for class, w := range c.Causes {
		had := rc.causes[class]
		if had.Due == nil {
			had.Due = map[int64]int64{}
		}
		had.Error = w.Error
		for m, n := range w.Due {
			had.Due[m] += n
			had.Total += n
		}
		rc.causes[class] = had
	}
	rc.interrupted += c.Interrupted
	rc.timedOut += c.TimedOut
	for o, n := range c.Held {
		rc.held[o] += n
	}
	return nil
}

// fanEntry is a chunk in a fan row: its first index in row row of
// counter partition lane.
type fanEntry struct {
	lane, row int
	first     int64
}

// CountFanned implements ledger.Store: a chunk counts once per fan row,
// as on DynamoDB, where each row's string set holds its own chunks; the
// same chunk written to another row counts again.
func (s *Store) CountFanned(_ context.Context, c ledger.FanCount) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rc := s.runCounter(c.BatchID, c.Run)
	if e := (fanEntry{lane: c.Lane, row: c.Row, first: c.First}); !rc.fanChunks[e] {
		rc.fanChunks[e] = true
		rc.fanned += c.Items
	}
	return nil
}

// Progress implements ledger.Store.
func (s *Store) Progress(_ context.Context, batchID string, run, shards int) (ledger.Progress, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := ledger.Progress{ByOutcome: map[api.Outcome]int64{}, Cost: pipeline.CostSum{}, Spent: pipeline.CostSum{}, RetryDue: map[int64]int64{},
		ThrottledDue: map[int64]int64{}, Causes: map[string]ledger.WaitCause{}}
	if rc := s.runs[runKey{batchID: batchID, run: run}]; rc != nil {
		for m, n := range rc.due {
			p.RetryDue[m] += n
		}
		for m, n := range rc.throttled {
			p.ThrottledDue[m] += n
		}
		for class, w := range rc.causes {
			p.Causes[class] = ledger.WaitCause{Error: w.Error, Due: maps.Clone(w.Due), Total: w.Total}
		}
		p.Interrupted, p.FannedOut, p.FanChunks = rc.interrupted, rc.fanned, int64(len(rc.fanChunks))
		p.Retried, p.RetriedThrottled = rc.retried, rc.retriedT
		p.TimedOut = rc.timedOut
		for o, n := range rc.held {
			if n != 0 {
				if p.Held == nil {
					p.Held = map[api.Outcome]int64{}
				}
				p.Held[o] += n
			}
		}
	}
	for k, c := range s.chunks {
		if k.batchID != batchID || k.run != run || c.part >= max(1, shards) {
			continue
		}
		p.Done += c.done
		p.Failures += c.failures
		p.BusyMs += c.busyMs
		addSum(p.Cost, c.cost)
		addSum(p.Spent, c.spent)
		for o, n := range c.byOutcome {
			p.ByOutcome[o] += n
		}
		if c.updatedAt.After(p.UpdatedAt) {
			p.UpdatedAt = c.updatedAt
		}
	}
	return p, nil
}

// sortedRows returns the batch's rows in key byte order whose shard
// passes keep.
func (s *Store) sortedRows(batchID string, keep func(*row) bool) []*row {
	var rows []*row
	for _, r := range s.items[batchID] {
		if keep(r) {
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(a, b *row) int { return strings.Compare(a.s.Key, b.s.Key) })
	return rows
}

// ScanItems implements ledger.Store. fn runs without the lock held.
func (s *Store) ScanItems(_ context.Context, batchID string, listShards int, fn func(ledger.Item) error) error {
	s.mu.Lock()
	rows := s.sortedRows(batchID, func(r *row) bool { return r.shard < max(1, listShards) })
	items := make([]ledger.Item, len(rows))
	for i, r := range rows {
		items[i] = r.view()
	}
	s.mu.Unlock()
	for _, it := range items {
		if err := fn(it); err != nil {
			return err
		}
	}
	return nil
}

// ScanShard implements ledger.Store; limit is clamped to 1–1,000 as the
// adapter's is, and more is exact.
func (s *Store) ScanShard(_ context.Context, batchID string, shard int, after string, limit int) ([]ledger.Item, bool, error) {
	limit = min(max(limit, 1), 1000)
	s.mu.Lock()
	defer s.mu.Unlock()
	rows := s.sortedRows(batchID, func(r *row) bool { return r.shard == shard && r.s.Key > after })
	more := len(rows) > limit
	rows = rows[:min(limit, len(rows))]
	items := make([]ledger.Item, len(rows))
	for i, r := range rows {
		items[i] = r.view()
	}
	return items, more, nil
}

// ListItems implements ledger.Store.
func (s *Store) ListItems(_ context.Context, batchID string, listShards int, outcome api.Outcome, after string, limit int) ([]ledger.Item, string, error) {
	if !ledger.Listable(outcome) {
		return nil, "", fmt.Errorf("list items: outcome %q is not failed, quarantined, held or in_flight: %w", outcome, api.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rows := s.sortedRows(batchID, func(r *row) bool {
		return r.shard < max(1, listShards) && ledger.ListedAs(r.s.Outcome, outcome) && r.s.Key > after
	})
	all := make([]ledger.Item, 0, len(rows))
	for _, r := range rows {
		all = append(all, r.view())
	}
	if outcome != api.OutcomeInFlight {
		all = append(all, s.attentionItems(batchID, listShards, outcome, after)...)
		slices.SortFunc(all, func(a, b ledger.Item) int { return strings.Compare(a.Key, b.Key) })
	}
	items := all[:min(max(limit, 0), len(all))]
	if len(items) == 0 {
		items = nil
	}
	if len(all) > len(items) && len(items) > 0 {
		return items, items[len(items)-1].Key, nil
	}
	return items, "", nil
}

func (s *Store) batch(id string) (*ledger.Batch, bool) {
	b, ok := s.batches[id]
	return b, ok
}

func clone(b ledger.Batch) ledger.Batch {
	b.Plan = b.Plan.Clone()
	if b.FinalCensus != nil {
		c := *b.FinalCensus
		b.FinalCensus = &c
	}
	if b.Refusal != nil {
		r := *b.Refusal
		b.Refusal = &r
	}
	if b.Pause != nil {
		p := *b.Pause
		b.Pause = &p
	}
	if b.LastPause != nil {
		p := *b.LastPause
		b.LastPause = &p
	}
	if b.LastLift != nil {
		l := *b.LastLift
		b.LastLift = &l
	}
	if b.Approval != nil {
		a := *b.Approval // its Estimate is never changed once written
		b.Approval = &a
	}
	if b.RateConflict != nil {
		c := *b.RateConflict
		b.RateConflict = &c
	}
	b.Halts = maps.Clone(b.Halts)
	b.Request = slices.Clone(b.Request)
	b.Revisions = slices.Clone(b.Revisions)
	return b
}

// stored is b as the adapter stores it: times at millisecond precision.
func storedBatch(b ledger.Batch) ledger.Batch {
	b = clone(b)
	if a := b.Approval; a != nil {
		b.Approval = api.ApprovalOf(b.Sample, a.Decision, a.DecidedBy, ms(a.DecidedAt), a.Estimate)
	} else {
		b.Approval = api.ApprovalOf(b.Sample, "", "", time.Time{}, nil)
	}
	b.CreatedAt, b.RunStartedAt, b.FinishedAt = ms(b.CreatedAt), ms(b.RunStartedAt), ms(b.FinishedAt)
	b.ExpiresAt, b.SubmitDeadline = ms(b.ExpiresAt), ms(b.SubmitDeadline)
	return b
}

// CreateBatch implements ledger.Store.
func (s *Store) CreateBatch(_ context.Context, b ledger.Batch) (ledger.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.batch(b.ID); ok {
		return clone(*cur), api.ErrBatchExists
	}
	st := storedBatch(b)
	s.batches[b.ID] = &st
	s.running[b.ID] = b.Run
	return b, nil
}

// GetBatch implements ledger.Store.
func (s *Store) GetBatch(_ context.Context, id string) (ledger.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(id)
	if !ok {
		return ledger.Batch{}, fmt.Errorf("batch %s: %w", id, api.ErrNotFound)
	}
	return clone(*b), nil
}

// BeginSubmit implements ledger.Store.
func (s *Store) BeginSubmit(_ context.Context, id string, deadline time.Time) (ledger.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(id)
	if !ok || b.Status != api.StatusSubmitting {
		return ledger.Batch{}, conflictf("begin submit %s", id)
	}
	b.SubmitAttempts++
	b.SubmitDeadline = ms(deadline)
	return clone(*b), nil
}

// Freeze implements ledger.Store.
func (s *Store) Freeze(_ context.Context, f ledger.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(f.ID)
	if !ok || b.Status != api.StatusSubmitting {
		return conflictf("freeze %s", f.ID)
	}
	b.Status = api.StatusRunning
	b.Digest, b.ManifestKey, b.ManifestBytes, b.ItemCount = f.Digest, f.ManifestKey, f.ManifestBytes, f.ItemCount
	b.ListShards, b.CounterShards, b.CounterLanes, b.Chunks, b.FanRows = f.ListShards, f.CounterShards, f.CounterLanes, f.Chunks, f.FanRows
	b.FannedOut, b.RunStartedAt = false, ms(f.RunStartedAt)
	if f.Checked != nil {
		b.Checked = f.Checked
	}
	return nil
}

func retentionKey(expiresAt time.Time, id string) string {
	return fmt.Sprintf("%020d#%s", expiresAt.UnixMilli(), id)
}

// Refuse implements ledger.Store.
func (s *Store) Refuse(_ context.Context, id string, r api.SubmitRefusal, now, expiresAt time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(id)
	if !ok || b.Status != api.StatusSubmitting {
		return conflictf("refuse %s", id)
	}
	b.Status, b.Refusal = api.StatusRefused, &r
	b.FinishedAt, b.ExpiresAt = ms(now), ms(expiresAt)
	delete(s.running, id)
	s.retention[retentionKey(expiresAt, id)] = id
	return nil
}

// SetFannedOut implements ledger.Store: ErrConflict when the batch is not
// at run (or has no row), as the adapter's condition run = :run.
func (s *Store) SetFannedOut(_ context.Context, id string, run int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(id)
	if !ok || b.Run != run {
		return conflictf("set fanned out %s run %d", id, run)
	}
	b.FannedOut = true
	return nil
}

// FinishRun implements ledger.Store.
func (s *Store) FinishRun(_ context.Context, id string, run int, f ledger.Finish) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(id)
	if !ok || b.Run != run || b.Status != api.StatusRunning {
		return conflictf("finish %s run %d", id, run)
	}
	c := f.Census
	b.Status, b.ReportKey, b.FinalCensus, b.NeedsAttention = f.Status, f.ReportKey, &c, f.NeedsAttention || c.NeedsAttention()
	b.FinishedAt, b.ExpiresAt = ms(f.FinishedAt), ms(f.ExpiresAt)
	b.Pause = nil
	delete(s.running, id)
	s.retention[retentionKey(f.ExpiresAt, id)] = id
	s.publish[ledger.RunRef{BatchID: id, Run: run}] = true
	return nil
}

// FinalizeFailed implements ledger.Store.
func (s *Store) FinalizeFailed(_ context.Context, f ledger.FinalizeFailure) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(f.BatchID)
	if !ok || b.Run != f.Run || b.Status != api.StatusRunning {
		return false, conflictf("count a failed finalize of %s run %d", f.BatchID, f.Run)
	}
	b.FinalizeFailures++
	b.Failure = ledger.CutError(f.Reason)
	if b.FinalizeFailures < f.Limit {
		return false, nil
	}
	b.Status, b.NeedsAttention, b.FinishedAt, b.ExpiresAt = api.StatusFinalizeFailed, true, ms(f.Now), ms(f.ExpiresAt)
	b.Pause = nil
	delete(s.running, f.BatchID)
	s.retention[retentionKey(f.ExpiresAt, f.BatchID)] = f.BatchID
	return true, nil
}

// RunningBatches implements ledger.Store, in id order.
func (s *Store) RunningBatches(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.running)), nil
}

// Stop implements ledger.Store.
func (s *Store) Stop(_ context.Context, m ledger.StopMark) error {
	id, run := m.BatchID, m.Run
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(id)
	if !ok || b.Run != run || b.Status != api.StatusRunning || b.Stop != "" {
		return conflictf("stop %s run %d", id, run)
	}
	b.Stop, b.StopDetail, b.StopRan, b.StopFailures = m.Status, m.Detail, m.Ran, m.Failures
	return nil
}

// Pause implements ledger.Store.
func (s *Store) Pause(_ context.Context, m ledger.PauseMark) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(m.BatchID)
	replaces := m.By == api.PauseByCaller && m.Replaces != nil
	if !ok || b.Run != m.Run || b.Status != api.StatusRunning || b.Stop != "" ||
		!replaces && b.Pause != nil ||
		replaces && (b.Pause == nil || b.Pause.By != api.PauseByOutage || !b.Pause.Since.Equal(ms(m.Replaces.Since))) ||
		m.By == api.PauseByBudget && b.BudgetUSD != m.BudgetUSD {
		return conflictf("pause %s run %d", m.BatchID, m.Run)
	}
	if replaces {
		span := m.Replaced()
		span.Since, span.Until = ms(span.Since), ms(span.Until)
		b.PausedMs += max(0, span.Until.Sub(span.Since).Milliseconds())
		b.LastPause = &span
	}
	b.Pause = &api.Pause{By: m.By, Since: ms(m.Now), Class: m.Class, Error: ledger.CutError(m.Error)}
	b.Pauses++
	return nil
}

// Unpause implements ledger.Store.
func (s *Store) Unpause(_ context.Context, m ledger.UnpauseMark) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(m.BatchID)
	if !ok || b.Run != m.Run || b.Pause == nil ||
		m.By == api.PauseByOutage && (b.Pause.By != api.PauseByOutage || !b.Pause.Since.Equal(ms(m.Since))) ||
		m.By == api.PauseByBudget && b.Pause.By != api.PauseByBudget ||
		m.By == api.PauseByCaller && b.Pause.By == api.PauseByBudget ||
		!m.Now.IsZero() && !b.Pause.Since.Equal(ms(m.Since)) {
		return conflictf("unpause %s run %d", m.BatchID, m.Run)
	}
	b.Pause = nil
	if !m.Now.IsZero() {
		span := m.Span()
		span.Since, span.Until = ms(span.Since), ms(span.Until)
		b.PausedMs += m.PausedFor()
		b.LastPause = &span
	}
	return nil
}

// SetLimits implements ledger.Store.
func (s *Store) SetLimits(_ context.Context, id string, l ledger.Limits) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(id)
	if !ok {
		return conflictf("set the limits of %s: no batch", id)
	} else if l.Ceilings != nil && !reflect.DeepEqual(b.Ceilings, l.CeilingsWas) {
		return conflictf("set the ceilings of %s: changed since read", id)
	}
	b.BudgetUSD, b.Ceilings = cmp.Or(l.BudgetUSD, b.BudgetUSD), cmp.Or(l.Ceilings, b.Ceilings)
	return nil
}

// MarkApproval implements ledger.Store.
func (s *Store) MarkApproval(_ context.Context, m ledger.ApprovalMark) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(m.BatchID)
	if !ok || b.Run != m.Run || b.Approval == nil || b.Approval.Decision != "" {
		return conflictf("approval of %s run %d", m.BatchID, m.Run)
	}
	a := *b.Approval
	if m.Estimate != nil {
		if a.Estimate != nil {
			return conflictf("estimate of %s run %d: written already", m.BatchID, m.Run)
		}
		e := *m.Estimate
		a.Estimate = &e
	} else {
		if b.Status != api.StatusRunning || b.Stop != "" {
			return conflictf("decision on %s run %d: not running", m.BatchID, m.Run)
		}
		a.Decision, a.DecidedBy, a.DecidedAt = m.Decision, m.By, ms(m.Now)
	}
	b.Approval = api.ApprovalOf(b.Sample, a.Decision, a.DecidedBy, a.DecidedAt, a.Estimate)
	return nil
}

// Halt implements ledger.Store.
func (s *Store) Halt(_ context.Context, m ledger.HaltMark) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(m.BatchID)
	if !ok || b.Run != m.Run || b.Status != api.StatusRunning || len(b.Halts) >= api.MaxHalts {
		return conflictf("halt %s on %s", m.BatchID, m.Subject)
	}
	if _, ok := b.Halts[m.Subject]; ok {
		return conflictf("halt %s on %s: one stands", m.BatchID, m.Subject)
	}
	if b.Halts == nil {
		b.Halts = map[string]api.Halt{}
	}
	b.Halts[m.Subject] = api.Halt{Subject: m.Subject, Since: ms(m.Now), Reason: ledger.CutError(m.Reason)}
	return nil
}

// Lift implements ledger.Store.
func (s *Store) Lift(_ context.Context, m ledger.LiftMark) error {
	id, subject, at := m.BatchID, m.Halt.Subject, m.At
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(id)
	if !ok {
		return conflictf("lift %s on %s: no batch", id, subject)
	}
	if h, ok := b.Halts[subject]; !ok {
		return conflictf("lift %s on %s: no halt stands", id, subject)
	} else if !m.Halt.Since.IsZero() && !h.Since.Equal(ms(m.Halt.Since)) {
		return conflictf("lift %s on %s: the halt standing is not the one read (since %v, read %v)", id, subject, h.Since, m.Halt.Since)
	}
	delete(b.Halts, subject)
	if len(b.Halts) == 0 {
		b.Halts = nil
		if b.Status.Finished() && b.FinalCensus != nil {
			b.NeedsAttention = b.FinalCensus.NeedsAttention()
		}
	}
	b.LiftedAt = ms(at)
	b.Lifts++
	last := m.Lifted()
	b.LastLift = &last
	return nil
}

// ClaimProbe implements ledger.Store.
func (s *Store) ClaimProbe(_ context.Context, c ledger.ProbeClaim) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(c.BatchID)
	if !ok || b.Run != c.Run || b.Pause == nil || b.Pause.By != api.PauseByOutage ||
		!b.Pause.Since.Equal(ms(c.Since)) || b.Pause.Probes >= c.Probe {
		return conflictf("claim probe %d of %s run %d", c.Probe, c.BatchID, c.Run)
	}
	b.Pause.Probes = c.Probe
	return nil
}

// StartRun implements ledger.Store.
func (s *Store) StartRun(_ context.Context, id string, from int, now time.Time) (ledger.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(id)
	if !ok || b.Run != from || b.PendingDeletion ||
		!slices.Contains([]api.Status{api.StatusCompleted, api.StatusThresholdExceeded, api.StatusCancelled, api.StatusFinalizeFailed}, b.Status) {
		return ledger.Batch{}, conflictf("start run %d of %s", from+1, id)
	}
	b.Run, b.Status, b.FannedOut, b.RunStartedAt = from+1, api.StatusRunning, false, ms(now)
	b.Stop, b.StopDetail, b.StopRan, b.StopFailures = "", "", 0, 0
	b.Failure, b.FinalizeFailures = "", 0
	b.Pause, b.Pauses, b.PausedMs, b.LastPause = nil, 0, 0, nil
	b.RunRevision = 0
	s.running[id] = from + 1
	return clone(*b), nil
}

// StartCorrection implements ledger.Store.
func (s *Store) StartCorrection(ctx context.Context, id string, from int, rev api.Revision, now time.Time) (ledger.Batch, error) {
	if _, err := s.StartRun(ctx, id, from, now); err != nil {
		return ledger.Batch{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, _ := s.batch(id)
	b.Revisions = append(slices.Clone(b.Revisions), rev)
	b.RunRevision = rev.N
	return clone(*b), nil
}

// MarkForgetting implements ledger.Store.
func (s *Store) MarkForgetting(_ context.Context, m ledger.ForgetMark) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(m.BatchID)
	switch {
	case !ok:
		return fmt.Errorf("batch %s: %w", m.BatchID, api.ErrNotFound)
	case b.Status == api.StatusRunning || b.Status == api.StatusSubmitting:
		return conflictf("forget %s: a run is going", m.BatchID)
	case !m.CreatedAt.IsZero() && !ms(b.CreatedAt).Equal(ms(m.CreatedAt)):
		return fmt.Errorf("batch %s: submitted again since: %w", m.BatchID, api.ErrNotFound)
	case m.Token != "" && b.ForgettingBy == m.Token && b.ForgettingAt.Equal(ms(m.Now)):
		return nil // the same mark sent again
	case m.Quiet > 0 && !b.ForgettingAt.IsZero() && !b.ForgettingAt.Before(ms(m.Now.Add(-m.Quiet))):
		return fmt.Errorf("forget %s: marked by another forget: %w", m.BatchID, ledger.ErrForgetGoing)
	}
	b.PendingDeletion, b.ForgettingAt, b.ForgettingBy = true, ms(m.Now), m.Token
	return nil
}

// DeleteBatch implements ledger.Store: every row of the batch goes; with
// b.ForgettingBy set, the batch row and its retention marker only while
// that is the row's mark (as DynamoDB's adapter deletes them last, under
// that condition).
func (s *Store) DeleteBatch(_ context.Context, b ledger.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.batch(b.ID); ok && b.ForgettingBy != "" && cur.ForgettingBy != b.ForgettingBy {
		defer delete(s.running, b.ID) // the adapter deletes the marker with the rows, before the batch row
		return fmt.Errorf("forget %s: the batch row is no longer this forget's: %w", b.ID, ledger.ErrForgetGoing)
	}
	delete(s.items, b.ID)
	delete(s.packs, b.ID)
	delete(s.attn, b.ID)
	for k := range s.marks {
		if k.batchID == b.ID {
			delete(s.marks, k)
		}
	}
	for k := range s.chunks {
		if k.batchID == b.ID {
			delete(s.chunks, k)
		}
	}
	for k := range s.runs {
		if k.batchID == b.ID {
			delete(s.runs, k)
		}
	}
	for k := range s.slots {
		if k.batchID == b.ID {
			delete(s.slots, k)
		}
	}
	for k := range s.claims {
		if k.run.batchID == b.ID {
			delete(s.claims, k)
		}
	}
	for k := range s.tracks {
		if k.batchID == b.ID {
			delete(s.tracks, k)
		}
	}
	for k := range s.publish {
		if k.BatchID == b.ID {
			delete(s.publish, k)
		}
	}
	delete(s.running, b.ID)
	delete(s.batches, b.ID)
	delete(s.conflicts, b.ID)
	if !b.ExpiresAt.IsZero() {
		delete(s.retention, retentionKey(b.ExpiresAt, b.ID))
	}
	return nil
}

// KeepRows implements ledger.Store.
func (s *Store) KeepRows(_ context.Context, b ledger.Batch, keys []string, until time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := time.Unix(until.Unix(), 0).UTC()
	for _, k := range keys {
		if r := s.row(b.ID, k); r != nil && (r.expiresAt.IsZero() || r.expiresAt.Before(u)) {
			r.expiresAt = u
		}
	}
	for k, c := range s.chunks {
		if k.batchID == b.ID && (c.expiresAt.IsZero() || c.expiresAt.Before(u)) {
			c.expiresAt = u
		}
	}
	return nil
}

// AcquireSlot implements ledger.Store.
func (s *Store) AcquireSlot(_ context.Context, batchID string, n int, holder string, now time.Time, lease time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := slotKey{batchID: batchID, slot: n}
	if cur, ok := s.slots[k]; ok && cur.leaseUntil.UnixMilli() >= now.UnixMilli() {
		return conflictf("take slot %d of %s", n, batchID)
	}
	s.slots[k] = slot{holder: holder, leaseUntil: ms(now.Add(lease))}
	return nil
}

// FreeSlot implements ledger.Store.
func (s *Store) FreeSlot(_ context.Context, batchID string, n int, holder string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := slotKey{batchID: batchID, slot: n}
	if cur, ok := s.slots[k]; ok && cur.holder == holder {
		delete(s.slots, k)
	}
	return nil
}

type trackKey struct {
	batchID    string
	run, track int
}

type track struct {
	seq        int64
	holder     string
	leaseUntil time.Time
	handed     map[string]ledger.TrackRetry
	// slotHolder and slotUntil: a woken unit running under the retired
	// track as a slot (TakeTrackSlot).
	slotHolder string
	slotUntil  time.Time
}

// claimRow is a run's claim counter and each track's last claim and
// its answer.
type claimRow struct {
	n          int64
	last, took map[int]int64
}

// counterKey is a claim counter's row: the run's one counter (counters
// ≤ 1), or counter c of a run of counters, each a row of its own.
type counterKey struct {
	run         runKey
	counters, c int
}

func counterOf(batchID string, run, counters, c int) counterKey {
	if counters <= 1 {
		counters, c = 1, 0
	}
	return counterKey{run: runKey{batchID: batchID, run: run}, counters: counters, c: c}
}

// SliceCounter implements ledger.Store.
func (s *Store) SliceCounter(_ context.Context, r ledger.SliceCounterRead) (ledger.SliceCount, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	row := s.claims[counterOf(r.BatchID, r.Run, r.Counters, r.Counter)]
	if row == nil {
		return ledger.SliceCount{}, nil
	}
	return ledger.SliceCount{Claims: row.n, TrackClaim: row.last[r.Track]}, nil
}

// ClaimSlice implements ledger.Store.
func (s *Store) ClaimSlice(_ context.Context, c ledger.SliceClaim) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := counterOf(c.BatchID, c.Run, c.Counters, c.Counter)
	r := s.claims[k]
	if r == nil {
		r = &claimRow{last: map[int]int64{}, took: map[int]int64{}}
		s.claims[k] = r
	}
	switch last, ok := r.last[c.Track]; {
	case ok && last == c.Claim:
		return r.took[c.Track], nil
	case ok && last > c.Claim:
		return 0, conflictf("claim %d of track %d of %s run %d: the track claimed %d since", c.Claim, c.Track, c.BatchID, c.Run, last)
	}
	r.n++
	r.last[c.Track], r.took[c.Track] = c.Claim, r.n
	return r.n, nil
}

// handedUnits is a track's hand-offs in ID order.
func (cur track) handedUnits() []ledger.TrackHanded {
	var units []ledger.TrackHanded
	for _, id := range slices.Sorted(maps.Keys(cur.handed)) {
		units = append(units, ledger.TrackHanded{ID: id, Unit: cur.handed[id]})
	}
	return units
}

// TakeTrack implements ledger.Store.
func (s *Store) TakeTrack(_ context.Context, t ledger.TrackTake) (ledger.TrackTaken, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := trackKey{batchID: t.BatchID, run: t.Run, track: t.Track}
	cur, ok := s.tracks[k]
	switch {
	case !ok, cur.seq < t.Seq:
	case cur.seq > t.Seq:
		return ledger.TrackTaken{}, conflictf("take track %d of %s run %d: seq %d is past %d", t.Track, t.BatchID, t.Run, cur.seq, t.Seq)
	case cur.holder != t.Holder && cur.leaseUntil.UnixMilli() >= t.Now.UnixMilli():
		return ledger.TrackTaken{Held: cur.leaseUntil}, conflictf("take track %d of %s run %d: held until %s", t.Track, t.BatchID, t.Run, cur.leaseUntil)
	}
	if t.Holder == ledger.TrackRetired {
		for f := range cur.handed {
			if !slices.Contains(t.Clear, f) {
				return ledger.TrackTaken{Handed: cur.handedUnits()}, conflictf("retire track %d of %s run %d: units handed to it", t.Track, t.BatchID, t.Run)
			}
		}
	}
	handed := maps.Clone(cur.handed)
	for _, f := range t.Clear {
		delete(handed, f)
	}
	cur.seq, cur.holder, cur.leaseUntil, cur.handed = t.Seq, t.Holder, ms(t.Now.Add(t.Lease)), handed
	s.tracks[k] = cur
	return ledger.TrackTaken{Handed: s.tracks[k].handedUnits()}, nil
}

// HandToTrack implements ledger.Store.
func (s *Store) HandToTrack(_ context.Context, h ledger.TrackHand) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := trackKey{batchID: h.BatchID, run: h.Run, track: h.Track}
	cur, ok := s.tracks[k]
	switch {
	case !ok:
		return false, conflictf("hand a unit to track %d of %s run %d: no row", h.Track, h.BatchID, h.Run)
	case cur.holder == ledger.TrackRetired:
		return true, conflictf("hand a unit to track %d of %s run %d: retired", h.Track, h.BatchID, h.Run)
	}
	if _, again := cur.handed[h.ID]; !again && len(cur.handed) >= ledger.MaxHandoffs {
		return false, conflictf("hand a unit to track %d of %s run %d: %d hand-offs wait on it", h.Track, h.BatchID, h.Run, len(cur.handed))
	}
	if cur.handed == nil {
		cur.handed = map[string]ledger.TrackRetry{}
	}
	cur.handed[h.ID] = h.Unit
	s.tracks[k] = cur
	return false, nil
}

// TakeTrackSlot implements ledger.Store.
func (s *Store) TakeTrackSlot(_ context.Context, t ledger.TrackSlot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := trackKey{batchID: t.BatchID, run: t.Run, track: t.Track}
	cur, ok := s.tracks[k]
	if !ok || cur.holder != ledger.TrackRetired || cur.slotHolder != "" && cur.slotUntil.UnixMilli() >= t.Now.UnixMilli() {
		return conflictf("take retired track %d of %s run %d as a slot", t.Track, t.BatchID, t.Run)
	}
	cur.slotHolder, cur.slotUntil = t.Holder, ms(t.Now.Add(t.Lease))
	s.tracks[k] = cur
	return nil
}

// FreeTrackSlot implements ledger.Store.
func (s *Store) FreeTrackSlot(_ context.Context, t ledger.TrackSlot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := trackKey{batchID: t.BatchID, run: t.Run, track: t.Track}
	if cur, ok := s.tracks[k]; ok && cur.slotHolder == t.Holder {
		cur.slotHolder, cur.slotUntil = "", time.Time{}
		s.tracks[k] = cur
	}
	return nil
}

// Unpublished implements ledger.Store: by batch id, then run.
func (s *Store) Unpublished(context.Context) ([]ledger.RunRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	refs := slices.Collect(maps.Keys(s.publish))
	slices.SortFunc(refs, func(a, b ledger.RunRef) int {
		if c := strings.Compare(a.BatchID, b.BatchID); c != 0 {
			return c
		}
		return a.Run - b.Run
	})
	return refs, nil
}

// SetPublished implements ledger.Store.
func (s *Store) SetPublished(_ context.Context, id string, run int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.batch(id); ok && b.PublishedRun < run {
		b.PublishedRun = run
	}
	delete(s.publish, ledger.RunRef{BatchID: id, Run: run})
	return nil
}

// SetTaskGone implements ledger.Store.
func (s *Store) SetTaskGone(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.batch(id); ok {
		b.TaskGone = true
	}
	return nil
}

// NoteRateConflict implements ledger.Store.
func (s *Store) NoteRateConflict(_ context.Context, id string, c api.RateConflict) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(id)
	noted := s.conflicts[id]
	if !ok || slices.Contains(noted, c.BatchID) || len(noted) >= api.MaxRateConflicts {
		return nil
	}
	if s.conflicts == nil {
		s.conflicts = map[string][]string{}
	}
	s.conflicts[id] = append(noted, c.BatchID)
	c.Batches = len(s.conflicts[id])
	b.RateConflict = &c
	return nil
}

// ExpiredMarkers implements ledger.Store.
func (s *Store) ExpiredMarkers(_ context.Context, now time.Time, limit int) ([]ledger.RetentionMarker, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	bound := fmt.Sprintf("%020d", now.UnixMilli()+1)
	var out []ledger.RetentionMarker
	for _, k := range slices.Sorted(maps.Keys(s.retention)) {
		if k >= bound || len(out) == limit {
			break
		}
		digits, id, _ := strings.Cut(k, "#")
		msec, _ := strconv.ParseInt(digits, 10, 64)
		out = append(out, ledger.RetentionMarker{Key: k, BatchID: id, ExpiresAt: time.UnixMilli(msec).UTC()})
	}
	return out, nil
}

// DeleteMarker implements ledger.Store.
func (s *Store) DeleteMarker(_ context.Context, markerKey string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.retention, markerKey)
	return nil
}

// batchesEpoch is the first month the adapter's batches index lists
// (internal/dynamo): batches created before it are not listed.
var batchesEpoch = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

var positionRE = regexp.MustCompile(`^[0-9]{13}(#[A-Za-z0-9_-]{1,128})?$`)

// ListBatches implements ledger.Store with the adapter's positions
// ("{created ms:013}#{id}"), in one call per page.
func (s *Store) ListBatches(_ context.Context, q ledger.BatchQuery) ([]ledger.Batch, string, error) {
	if q.Limit < 1 {
		return nil, "", &api.InputError{Field: "limit", Reason: fmt.Sprintf("%d: want at least 1", q.Limit)}
	}
	if q.Before != "" && !positionRE.MatchString(q.Before) {
		return nil, "", &api.InputError{Field: "cursor", Reason: "not a cursor from a previous page"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	type entry struct {
		sk string
		b  *ledger.Batch
	}
	var entries []entry
	for _, b := range s.batches {
		if b.CreatedAt.IsZero() || b.CreatedAt.Before(batchesEpoch) {
			continue
		}
		sk := fmt.Sprintf("%013d#%s", b.CreatedAt.UnixMilli(), b.ID)
		if q.Before != "" && sk >= q.Before {
			continue
		}
		if !q.Since.IsZero() && sk < fmt.Sprintf("%013d", q.Since.UnixMilli()) {
			continue
		}
		entries = append(entries, entry{sk, b})
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(b.sk, a.sk) })
	var out []ledger.Batch
	for _, e := range entries {
		if e.b.Expired(q.Now) || len(q.Statuses) > 0 && !slices.Contains(q.Statuses, e.b.Status) ||
			q.Source != "" && (e.b.Source != q.Source || !strings.HasPrefix(q.Source, "s3://")) {
			continue
		}
		out = append(out, clone(*e.b))
		if len(out) == q.Limit {
			return out, e.sk, nil
		}
	}
	return out, "", nil
}
