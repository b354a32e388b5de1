// Package memstore is an in-memory batch.Store: one mutex over maps, with
// the conditions, transitions and listing orders of the DynamoDB adapter
// (shared/dynamo), proven by the same conformance suite
// (shared/batch/storetest). It lets the domain's code paths (Submit,
// Worker, Finalize, Control, Sweep) be tested in milliseconds; storage
// semantics are still tested against DynamoDB on the emulator.
//
// Times are kept at the adapter's precision: milliseconds for leases and
// stamps, seconds for row TTLs. It meters no capacity (Progress.Usage is
// zero) and commits no staged effects (a Record carrying any is refused).
package memstore

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bulkrun/bulkrun/shared/batch"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Store is an in-memory batch.Store. The zero value is not usable: call New.
type Store struct {
	mu        sync.Mutex
	batches   map[string]*batch.Batch
	items     map[string]map[string]*row // batch id → item key → row
	marks     map[markKey]bool
	chunks    map[chunkKey]*counter
	runs      map[runKey]*runCounter
	slots     map[slotKey]slot
	running   map[string]int    // batch id → run
	retention map[string]string // marker key → batch id
	publish   map[batch.RunRef]bool
	packs     map[string]map[int64]*packRow   // batch id → first index → pack row
	attn      map[string]map[string]attnEntry // batch id → key → attention entry of a pack item
}

var _ batch.Store = (*Store)(nil)

// New returns an empty Store.
func New() *Store {
	return &Store{
		batches: map[string]*batch.Batch{}, items: map[string]map[string]*row{}, marks: map[markKey]bool{},
		chunks: map[chunkKey]*counter{}, runs: map[runKey]*runCounter{}, slots: map[slotKey]slot{},
		running: map[string]int{}, retention: map[string]string{}, publish: map[batch.RunRef]bool{},
		packs: map[string]map[int64]*packRow{}, attn: map[string]map[string]attnEntry{},
	}
}

type row struct {
	it           batch.Item
	shard        int // item shard, from the write's ListShards
	firstAttempt int
	retry        bool
}

type markKey struct {
	batchID, key string
	run          int
}

type chunkKey struct {
	batchID string
	run     int
	first   int64
}

type counter struct {
	part           int
	done, failures int64
	items          int64
	byOutcome      map[batch.Outcome]int64
	updatedAt      time.Time
	expiresAt      time.Time
}

type runKey struct {
	batchID string
	run     int
}

type runCounter struct{ chunksDone, failures int64 }

type slotKey struct {
	batchID string
	slot    int
}

type slot struct {
	holder     string
	leaseUntil time.Time
}

func ms(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.UnixMilli(t.UnixMilli()).UTC()
}

func conflictf(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, batch.ErrConflict)...)
}

// view is the item as the adapter reads it back.
func (r *row) view() batch.Item {
	it := r.it
	it.Interrupted = false
	it.RunAttempts = max(0, it.Attempt-max(r.firstAttempt, 1)+1)
	it.Output = slices.Clone(it.Output)
	it.Cost = maps.Clone(it.Cost)
	it.Spent = maps.Clone(it.Spent)
	return it
}

func (s *Store) row(batchID, key string) *row {
	return s.items[batchID][key]
}

func (s *Store) putRow(batchID, key string, r *row) {
	if s.items[batchID] == nil {
		s.items[batchID] = map[string]*row{}
	}
	s.items[batchID][key] = r
}

// fresh: no row; a failed, cancelled or in-flight row of an earlier run;
// a released quarantined row of an earlier run.
func fresh(r *row, run int) bool {
	if r == nil {
		return true
	}
	if r.it.Run >= run {
		return false
	}
	switch r.it.Outcome {
	case batch.OutcomeFailed, batch.OutcomeCancelled, batch.OutcomeInFlight:
		return true
	case batch.OutcomeQuarantined:
		return r.it.Released
	}
	return false
}

// expired: in flight in run with a lease ended before now.
func expired(r *row, run int, now time.Time) bool {
	return r != nil && r.it.Run == run && r.it.Outcome == batch.OutcomeInFlight && r.it.LeaseUntil.UnixMilli() < now.UnixMilli()
}

func fenced(r *row, run, attempt int) bool {
	return r != nil && r.it.Outcome == batch.OutcomeInFlight && r.it.Attempt == attempt && r.it.Run == run
}

func (s *Store) stored(r *row) batch.Item {
	if r == nil {
		return batch.Item{}
	}
	return r.view()
}

// Reserve implements batch.Store.
func (s *Store) Reserve(_ context.Context, r batch.Reservation) (batch.Item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.row(r.BatchID, r.Key)
	lease := ms(r.Now.Add(r.Lease))
	switch {
	case fresh(cur, r.Run):
		n := &row{shard: batch.Shard(r.Key, r.ListShards)}
		prevAttempt := 0
		if cur != nil {
			prevAttempt = cur.it.Attempt
			n.it.Spent, n.it.SpentRun, n.it.ExpiresAt = cur.it.Spent, cur.it.SpentRun, cur.it.ExpiresAt
			n.shard = cur.shard
		}
		n.it.BatchID, n.it.Key, n.it.RunID, n.it.Run = r.BatchID, r.Key, batch.RunID(r.BatchID, r.Key), r.Run
		n.it.Outcome, n.it.Attempt, n.it.LeaseUntil, n.it.UpdatedAt = batch.OutcomeInFlight, prevAttempt+1, lease, ms(r.Now)
		n.firstAttempt = prevAttempt + 1
		s.putRow(r.BatchID, r.Key, n)
		it := batch.Item{BatchID: r.BatchID, Key: r.Key, RunID: r.RunID, Run: r.Run, Outcome: batch.OutcomeInFlight,
			Attempt: n.it.Attempt, LeaseUntil: lease, UpdatedAt: ms(r.Now), RunAttempts: 1}
		return it, nil
	case expired(cur, r.Run, r.Now):
		prev := *cur
		cur.it.Attempt++
		cur.it.LeaseUntil, cur.it.UpdatedAt = lease, ms(r.Now)
		cur.retry = false
		it := batch.Item{BatchID: r.BatchID, Key: r.Key, RunID: r.RunID, Run: r.Run, Outcome: batch.OutcomeInFlight,
			Attempt: cur.it.Attempt, LeaseUntil: lease, UpdatedAt: ms(r.Now),
			Interrupted: !prev.retry, RunAttempts: cur.it.Attempt - max(prev.firstAttempt, 1) + 1}
		if prev.it.SpentRun == r.Run && len(prev.it.Spent) > 0 {
			it.Spent, it.SpentRun = maps.Clone(prev.it.Spent), r.Run
		}
		return it, nil
	}
	return s.stored(cur), conflictf("reserve %s/%s", r.BatchID, r.Key)
}

// setOutcome writes r's outcome fields on n, as the adapter's outcome
// update does.
func setOutcome(n *row, r batch.Record) error {
	if !r.Outcome.Terminal() {
		return fmt.Errorf("record %s/%s: %q is not a terminal outcome", r.BatchID, r.Key, r.Outcome)
	}
	n.it.Run, n.it.UpdatedAt, n.it.Outcome = r.Run, ms(r.Now), r.Outcome
	n.it.Output, n.it.OutputRef = slices.Clone(r.Output), r.OutputRef
	if len(n.it.Output) == 0 {
		n.it.Output = nil
	}
	n.it.Error = pipeline.CutText(r.Error, pipeline.MaxErrorTextBytes)
	n.it.Reason = r.Reason
	n.it.Cost = nil
	if len(r.Cost) > 0 {
		n.it.Cost = maps.Clone(r.Cost)
	}
	setSpent(n, r)
	return nil
}

func setSpent(n *row, r batch.Record) {
	if len(r.Spent) > 0 {
		n.it.Spent, n.it.SpentRun = maps.Clone(r.Spent), r.Run
	}
}

// Record implements batch.Store. Staged effects are refused: this store
// has no table to commit them to.
func (s *Store) Record(_ context.Context, r batch.Record) error {
	if r.Effects != nil && r.Effects.Len() > 0 {
		return fmt.Errorf("record %s/%s attempt %d: memstore commits no staged writes (%T)", r.BatchID, r.Key, r.Attempt, r.Effects)
	}
	if !r.Outcome.Terminal() {
		return fmt.Errorf("record %s/%s: %q is not a terminal outcome", r.BatchID, r.Key, r.Outcome)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.row(r.BatchID, r.Key)
	if !fenced(cur, r.Run, r.Attempt) {
		if cur != nil && cur.it.Run == r.Run && cur.it.Attempt == r.Attempt && cur.it.Outcome == r.Outcome &&
			cur.it.Reason == r.Reason && cur.it.Error == pipeline.CutText(r.Error, pipeline.MaxErrorTextBytes) {
			return nil // the same write sent again
		}
		return conflictf("record %s/%s attempt %d", r.BatchID, r.Key, r.Attempt)
	}
	if err := setOutcome(cur, r); err != nil {
		return err
	}
	cur.it.LeaseUntil = time.Time{}
	return nil
}

// Release implements batch.Store.
func (s *Store) Release(_ context.Context, r batch.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.row(r.BatchID, r.Key)
	if !fenced(cur, r.Run, r.Attempt) {
		return conflictf("release %s/%s attempt %d", r.BatchID, r.Key, r.Attempt)
	}
	cur.it.LeaseUntil, cur.it.UpdatedAt = ms(r.Now), ms(r.Now)
	cur.retry = true
	cur.it.Error = pipeline.CutText(r.Error, pipeline.MaxErrorTextBytes)
	setSpent(cur, r)
	return nil
}

// Settle implements batch.Store.
func (s *Store) Settle(_ context.Context, r batch.Record) (batch.Item, error) {
	return s.settle(r, true)
}

// SettleUnstarted implements batch.Store.
func (s *Store) SettleUnstarted(_ context.Context, r batch.Record) (batch.Item, error) {
	return s.settle(r, false)
}

func (s *Store) settle(r batch.Record, takeover bool) (batch.Item, error) {
	if !r.Outcome.Terminal() {
		return batch.Item{}, fmt.Errorf("record %s/%s: %q is not a terminal outcome", r.BatchID, r.Key, r.Outcome)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.row(r.BatchID, r.Key)
	newRun := fresh(cur, r.Run)
	if !newRun && !(takeover && expired(cur, r.Run, r.Now)) {
		return s.stored(cur), conflictf("settle %s/%s", r.BatchID, r.Key)
	}
	if cur == nil {
		cur = &row{shard: batch.Shard(r.Key, r.ListShards)}
		cur.it.BatchID, cur.it.Key, cur.it.RunID = r.BatchID, r.Key, batch.RunID(r.BatchID, r.Key)
		s.putRow(r.BatchID, r.Key, cur)
	}
	if err := setOutcome(cur, r); err != nil {
		return batch.Item{}, err
	}
	cur.it.LeaseUntil, cur.it.Released, cur.retry = time.Time{}, false, false
	if newRun {
		cur.firstAttempt = cur.it.Attempt + 1
	}
	return batch.Item{}, nil
}

// ReleaseItem implements batch.Store.
func (s *Store) ReleaseItem(_ context.Context, batchID string, _ int, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.row(batchID, key)
	if cur == nil {
		if found, err := s.releasePackItem(batchID, key); found {
			return err
		}
	}
	switch {
	case cur == nil:
		return fmt.Errorf("item %s/%s: %w", batchID, key, batch.ErrNotFound)
	case cur.it.Outcome != batch.OutcomeQuarantined:
		return conflictf("release %s/%s: not quarantined", batchID, key)
	}
	cur.it.Released = true
	return nil
}

// MarkCounted implements batch.Store.
func (s *Store) MarkCounted(_ context.Context, batchID string, _ int, key string, run int) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := markKey{batchID: batchID, key: key, run: run}
	if s.marks[k] {
		return false, nil
	}
	s.marks[k] = true
	return true, nil
}

// CountChunk implements batch.Store.
func (s *Store) CountChunk(_ context.Context, c batch.ChunkCount) (batch.ChunkCounted, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var res batch.ChunkCounted
	k := chunkKey{batchID: c.BatchID, run: c.Run, first: c.First}
	ctr := s.chunks[k]
	if ctr == nil {
		ctr = &counter{byOutcome: map[batch.Outcome]int64{}}
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

// Progress implements batch.Store.
func (s *Store) Progress(_ context.Context, batchID string, run, shards int) (batch.Progress, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := batch.Progress{ByOutcome: map[batch.Outcome]int64{}}
	for k, c := range s.chunks {
		if k.batchID != batchID || k.run != run || c.part >= max(1, shards) {
			continue
		}
		p.Done += c.done
		p.Failures += c.failures
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
	slices.SortFunc(rows, func(a, b *row) int { return strings.Compare(a.it.Key, b.it.Key) })
	return rows
}

// ScanItems implements batch.Store. fn runs without the lock held.
func (s *Store) ScanItems(_ context.Context, batchID string, listShards int, fn func(batch.Item) error) error {
	s.mu.Lock()
	rows := s.sortedRows(batchID, func(r *row) bool { return r.shard < max(1, listShards) })
	items := make([]batch.Item, len(rows))
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

// ScanShard implements batch.Store; limit is clamped to 1–1,000 as the
// adapter's is, and more is exact.
func (s *Store) ScanShard(_ context.Context, batchID string, shard int, after string, limit int) ([]batch.Item, bool, error) {
	limit = min(max(limit, 1), 1000)
	s.mu.Lock()
	defer s.mu.Unlock()
	rows := s.sortedRows(batchID, func(r *row) bool { return r.shard == shard && r.it.Key > after })
	more := len(rows) > limit
	rows = rows[:min(limit, len(rows))]
	items := make([]batch.Item, len(rows))
	for i, r := range rows {
		items[i] = r.view()
	}
	return items, more, nil
}

// ListItems implements batch.Store.
func (s *Store) ListItems(_ context.Context, batchID string, listShards int, outcome batch.Outcome, after string, limit int) ([]batch.Item, string, error) {
	switch outcome {
	case batch.OutcomeFailed, batch.OutcomeQuarantined, batch.OutcomeInFlight:
	default:
		return nil, "", fmt.Errorf("list items: outcome %q is not failed, quarantined or in_flight: %w", outcome, batch.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rows := s.sortedRows(batchID, func(r *row) bool {
		return r.shard < max(1, listShards) && r.it.Outcome == outcome && r.it.Key > after
	})
	all := make([]batch.Item, 0, len(rows))
	for _, r := range rows {
		all = append(all, r.view())
	}
	if outcome != batch.OutcomeInFlight {
		all = append(all, s.attentionItems(batchID, listShards, outcome, after)...)
		slices.SortFunc(all, func(a, b batch.Item) int { return strings.Compare(a.Key, b.Key) })
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

func (s *Store) batch(id string) (*batch.Batch, bool) {
	b, ok := s.batches[id]
	return b, ok
}

func clone(b batch.Batch) batch.Batch {
	b.Headers = maps.Clone(b.Headers)
	if b.FinalCensus != nil {
		c := *b.FinalCensus
		b.FinalCensus = &c
	}
	if b.Refusal != nil {
		r := *b.Refusal
		b.Refusal = &r
	}
	if b.StopOnThreshold != nil {
		v := *b.StopOnThreshold
		b.StopOnThreshold = &v
	}
	b.Options, b.Request = slices.Clone(b.Options), slices.Clone(b.Request)
	return b
}

// stored is b as the adapter stores it: times at millisecond precision.
func storedBatch(b batch.Batch) batch.Batch {
	b = clone(b)
	b.CreatedAt, b.RunStartedAt, b.FinishedAt = ms(b.CreatedAt), ms(b.RunStartedAt), ms(b.FinishedAt)
	b.ExpiresAt, b.SubmitDeadline = ms(b.ExpiresAt), ms(b.SubmitDeadline)
	return b
}

// CreateBatch implements batch.Store.
func (s *Store) CreateBatch(_ context.Context, b batch.Batch) (batch.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.batch(b.ID); ok {
		return clone(*cur), batch.ErrBatchExists
	}
	st := storedBatch(b)
	s.batches[b.ID] = &st
	s.running[b.ID] = b.Run
	return b, nil
}

// GetBatch implements batch.Store.
func (s *Store) GetBatch(_ context.Context, id string) (batch.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(id)
	if !ok {
		return batch.Batch{}, fmt.Errorf("batch %s: %w", id, batch.ErrNotFound)
	}
	return clone(*b), nil
}

// BeginSubmit implements batch.Store.
func (s *Store) BeginSubmit(_ context.Context, id string, deadline time.Time) (batch.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(id)
	if !ok || b.Status != batch.StatusSubmitting {
		return batch.Batch{}, conflictf("begin submit %s", id)
	}
	b.SubmitAttempts++
	b.SubmitDeadline = ms(deadline)
	return clone(*b), nil
}

// Freeze implements batch.Store.
func (s *Store) Freeze(_ context.Context, f batch.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(f.ID)
	if !ok || b.Status != batch.StatusSubmitting {
		return conflictf("freeze %s", f.ID)
	}
	b.Status = batch.StatusRunning
	b.Digest, b.ManifestKey, b.ManifestBytes, b.ItemCount = f.Digest, f.ManifestKey, f.ManifestBytes, f.ItemCount
	b.ListShards, b.CounterShards, b.Chunks = f.ListShards, f.CounterShards, f.Chunks
	b.FannedOut, b.RunStartedAt = false, ms(f.RunStartedAt)
	return nil
}

func retentionKey(expiresAt time.Time, id string) string {
	return fmt.Sprintf("%020d#%s", expiresAt.UnixMilli(), id)
}

// Refuse implements batch.Store.
func (s *Store) Refuse(_ context.Context, id string, r batch.SubmitRefusal, now, expiresAt time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(id)
	if !ok || b.Status != batch.StatusSubmitting {
		return conflictf("refuse %s", id)
	}
	b.Status, b.Refusal = batch.StatusRefused, &r
	b.FinishedAt, b.ExpiresAt = ms(now), ms(expiresAt)
	delete(s.running, id)
	s.retention[retentionKey(expiresAt, id)] = id
	return nil
}

// SetFannedOut implements batch.Store: ErrConflict when the batch is not
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

// FinishRun implements batch.Store.
func (s *Store) FinishRun(_ context.Context, id string, run int, f batch.Finish) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(id)
	if !ok || b.Run != run || b.Status != batch.StatusRunning {
		return conflictf("finish %s run %d", id, run)
	}
	c := f.Census
	b.Status, b.ReportKey, b.FinalCensus, b.NeedsAttention = f.Status, f.ReportKey, &c, c.NeedsAttention()
	b.FinishedAt, b.ExpiresAt = ms(f.FinishedAt), ms(f.ExpiresAt)
	delete(s.running, id)
	s.retention[retentionKey(f.ExpiresAt, id)] = id
	s.publish[batch.RunRef{BatchID: id, Run: run}] = true
	return nil
}

// RunningBatches implements batch.Store, in id order.
func (s *Store) RunningBatches(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.running)), nil
}

// Stop implements batch.Store.
func (s *Store) Stop(_ context.Context, m batch.StopMark) error {
	id, run := m.BatchID, m.Run
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(id)
	if !ok || b.Run != run || b.Status != batch.StatusRunning || b.Stop != "" {
		return conflictf("stop %s run %d", id, run)
	}
	b.Stop, b.StopDetail, b.StopRan, b.StopFailures = m.Status, m.Detail, m.Ran, m.Failures
	return nil
}

// StartRun implements batch.Store.
func (s *Store) StartRun(_ context.Context, id string, from int, now time.Time) (batch.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(id)
	if !ok || b.Run != from || b.PendingDeletion ||
		!slices.Contains([]batch.Status{batch.StatusCompleted, batch.StatusThresholdExceeded, batch.StatusCancelled}, b.Status) {
		return batch.Batch{}, conflictf("start run %d of %s", from+1, id)
	}
	b.Run, b.Status, b.FannedOut, b.RunStartedAt = from+1, batch.StatusRunning, false, ms(now)
	b.Stop, b.StopDetail, b.StopRan, b.StopFailures = "", "", 0, 0
	s.running[id] = from + 1
	return clone(*b), nil
}

// MarkForgetting implements batch.Store.
func (s *Store) MarkForgetting(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.batch(id)
	switch {
	case !ok:
		return fmt.Errorf("batch %s: %w", id, batch.ErrNotFound)
	case b.Status == batch.StatusRunning || b.Status == batch.StatusSubmitting:
		return conflictf("forget %s: a run is going", id)
	}
	b.PendingDeletion = true
	return nil
}

// DeleteBatch implements batch.Store: every row of the batch goes.
func (s *Store) DeleteBatch(_ context.Context, b batch.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
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
	for k := range s.publish {
		if k.BatchID == b.ID {
			delete(s.publish, k)
		}
	}
	delete(s.running, b.ID)
	delete(s.batches, b.ID)
	if !b.ExpiresAt.IsZero() {
		delete(s.retention, retentionKey(b.ExpiresAt, b.ID))
	}
	return nil
}

// KeepRows implements batch.Store.
func (s *Store) KeepRows(_ context.Context, b batch.Batch, keys []string, until time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := time.Unix(until.Unix(), 0).UTC()
	for _, k := range keys {
		if r := s.row(b.ID, k); r != nil && (r.it.ExpiresAt.IsZero() || r.it.ExpiresAt.Before(u)) {
			r.it.ExpiresAt = u
		}
	}
	for k, c := range s.chunks {
		if k.batchID == b.ID && (c.expiresAt.IsZero() || c.expiresAt.Before(u)) {
			c.expiresAt = u
		}
	}
	return nil
}

// AcquireSlot implements batch.Store.
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

// FreeSlot implements batch.Store.
func (s *Store) FreeSlot(_ context.Context, batchID string, n int, holder string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := slotKey{batchID: batchID, slot: n}
	if cur, ok := s.slots[k]; ok && cur.holder == holder {
		delete(s.slots, k)
	}
	return nil
}

// Unpublished implements batch.Store: by batch id, then run.
func (s *Store) Unpublished(context.Context) ([]batch.RunRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	refs := slices.Collect(maps.Keys(s.publish))
	slices.SortFunc(refs, func(a, b batch.RunRef) int {
		if c := strings.Compare(a.BatchID, b.BatchID); c != 0 {
			return c
		}
		return a.Run - b.Run
	})
	return refs, nil
}

// SetPublished implements batch.Store.
func (s *Store) SetPublished(_ context.Context, id string, run int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.batch(id); ok && b.PublishedRun < run {
		b.PublishedRun = run
	}
	delete(s.publish, batch.RunRef{BatchID: id, Run: run})
	return nil
}

// ExpiredMarkers implements batch.Store.
func (s *Store) ExpiredMarkers(_ context.Context, now time.Time, limit int) ([]batch.RetentionMarker, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	bound := fmt.Sprintf("%020d", now.UnixMilli()+1)
	var out []batch.RetentionMarker
	for _, k := range slices.Sorted(maps.Keys(s.retention)) {
		if k >= bound || len(out) == limit {
			break
		}
		digits, id, _ := strings.Cut(k, "#")
		msec, _ := strconv.ParseInt(digits, 10, 64)
		out = append(out, batch.RetentionMarker{Key: k, BatchID: id, ExpiresAt: time.UnixMilli(msec).UTC()})
	}
	return out, nil
}

// DeleteMarker implements batch.Store.
func (s *Store) DeleteMarker(_ context.Context, markerKey string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.retention, markerKey)
	return nil
}

// batchesEpoch is the first month the adapter's batches index lists
// (shared/dynamo): batches created before it are not listed.
var batchesEpoch = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

var positionRE = regexp.MustCompile(`^[0-9]{13}(#[A-Za-z0-9_-]{1,128})?$`)

// ListBatches implements batch.Store with the adapter's positions
// ("{created ms:013}#{id}"), in one call per page.
func (s *Store) ListBatches(_ context.Context, q batch.BatchQuery) ([]batch.Batch, string, error) {
	if q.Limit < 1 {
		return nil, "", &batch.InputError{Field: "limit", Reason: fmt.Sprintf("%d: want at least 1", q.Limit)}
	}
	if q.Before != "" && !positionRE.MatchString(q.Before) {
		return nil, "", &batch.InputError{Field: "cursor", Reason: "not a cursor from a previous page"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	type entry struct {
		sk string
		b  *batch.Batch
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
	var out []batch.Batch
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
