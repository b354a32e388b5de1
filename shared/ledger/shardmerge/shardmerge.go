// Package shardmerge reads a batch's item rows (or pack rows) from its
// item shards in key order, merged, in bounded memory: what finalize
// counts and writes the results from, and what a run's partial results
// stream. It needs only the store's two shard scans (Scanner).
package shardmerge

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"

	"github.com/bulkrun/bulkrun/internal/sliceheap"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Defaults of Options.
const (
	// DefaultBudgetBytes bounds the rows Merge holds read ahead
	// of the merge: 48 MiB.
	DefaultBudgetBytes = 48 << 20
	// DefaultReads is how many shard reads Merge keeps in
	// flight at once.
	DefaultReads = 8
	// itemRowOverheadBytes is what a ledger.Item takes in memory besides its
	// strings and cost map (the struct, slice slot, map header).
	itemRowOverheadBytes = 320
	// minRowEstimateBytes is the row size Merge sizes its first
	// reads by, before it has seen any row.
	minRowEstimateBytes = 1 << 10
)

// Options bounds Merge. The zero value takes the defaults.
type Options struct {
	// BudgetBytes bounds the rows read ahead and not yet passed to fn,
	// counted by RowBytes; each shard may still hold one row beyond it, so
	// the rows held are at most max(BudgetBytes, shards × the largest
	// row). Default DefaultBudgetBytes.
	BudgetBytes int64
	// Reads is how many Store.ScanShard calls run at once (read-ahead of
	// the shards whose rows run low). Default DefaultReads.
	Reads int
	// Packed reads the shards' pack rows (Store.ScanPacks) instead of
	// their item rows: a batch with items per message > 1 (Batch.Pack).
	// The items then come in manifest order (Item.Pos), and `after` is a
	// position.
	Packed bool
	// ShardFrom and ShardTo, when ShardTo > 0, read only the shards
	// ShardFrom … ShardTo−1 (a part of a parallel finalize, see
	// finalize_parts.go); else every shard.
	ShardFrom, ShardTo int
}

// RowBytes estimates what an item row takes in memory once read: its
// strings, its cost entries and a fixed overhead.
func RowBytes(it ledger.Item) int64 {
	n := len(it.Key) + len(it.RunID) + len(it.Output) + len(it.OutputRef) + len(it.Error) + len(it.Reason) + len(it.Outcome)
	for name := range it.Cost {
		n += len(name) + 48
	}
	for name := range it.Spent {
		n += len(name) + 48
	}
	return int64(n + itemRowOverheadBytes)
}

// Merge calls fn for every item row of the batch whose key sorts
// after `after` ("" from the first), in key byte order, merging its
// listShards item shards read with Store.ScanShard. Memory is bounded
// whatever the batch's size: the rows read ahead stay within
// opts.BudgetBytes (a read that would pass it keeps only its first rows
// and the shard is read again from the last kept key later), plus one row
// per shard, plus opts.Reads reads in flight (each at most Store.ScanShard's
// limit, sized from the budget, the shard count and the largest rows seen).
// fn's error stops the merge and is returned; so is a read's error.
func Merge(ctx context.Context, store Scanner, batchID string, listShards int, after string, opts Options, fn func(ledger.Item) error) error {
	m := &merger{store: store, id: batchID, budget: opts.BudgetBytes, estimate: minRowEstimateBytes, scan: store.ScanShard}
	if opts.Packed {
		m.scan = store.ScanPacks
	}
	if m.budget <= 0 {
		m.budget = DefaultBudgetBytes
	}
	reads := opts.Reads
	if reads <= 0 {
		reads = DefaultReads
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends reads still in flight
	m.ctx = ctx
	m.sem = make(chan struct{}, reads)
	from, to := 0, max(1, listShards)
	if opts.ShardTo > 0 {
		from, to = max(0, opts.ShardFrom), min(to, opts.ShardTo)
	}
	m.shards = make([]*mergeShard, max(0, to-from))
	for i := range m.shards {
		sh := &mergeShard{n: from + i, cursor: after, more: true}
		m.shards[i] = sh
		m.read(sh)
	}
	h := &sliceheap.Heap[*mergeShard]{Order: func(a, b *mergeShard) bool { return cmp.Less(a.rows[0].ScanPos(), b.rows[0].ScanPos()) }}
	for _, sh := range m.shards {
		if err := m.fill(sh); err != nil {
			return err
		}
		if len(sh.rows) > 0 {
			h.S = append(h.S, sh)
		}
	}
	heap.Init(h)
	for h.Len() > 0 {
		sh := h.S[0]
		it := sh.rows[0]
		sh.rows[0] = ledger.Item{} // the slot no longer holds the row
		sh.rows = sh.rows[1:]
		m.held -= RowBytes(it)
		if sh.more && sh.pending == nil && len(sh.rows) <= m.limit()/2 {
			m.read(sh) // read ahead
		}
		if err := m.fill(sh); err != nil {
			return err
		}
		if len(sh.rows) == 0 {
			heap.Pop(h)
		} else {
			heap.Fix(h, 0)
		}
		if err := fn(it); err != nil {
			return err
		}
	}
	return nil
}

// merger is Merge' state; only its goroutine touches it, the reads
// answer on each shard's channel.
type merger struct {
	ctx      context.Context
	store    Scanner
	id       string
	budget   int64
	held     int64 // RowBytes of the rows read ahead, in every shard
	estimate int64 // largest mean row size of a read so far
	sem      chan struct{}
	shards   []*mergeShard
	scan     func(ctx context.Context, batchID string, shard int, after string, limit int) ([]ledger.Item, bool, error)
}

type mergeShard struct {
	n       int
	rows    []ledger.Item // read ahead, in key order
	cursor  string        // key of the last row read
	more    bool          // the shard may hold rows past cursor
	pending chan shardRead
}

type shardRead struct {
	rows []ledger.Item
	more bool
	err  error
}

// limit is the rows per ScanShard call: the budget shared by twice the
// shards (a shard's rows and its read ahead), at the largest mean row
// size seen, within 1–1,000.
func (m *merger) limit() int {
	n := m.budget / (2 * int64(max(1, len(m.shards))) * m.estimate)
	return int(min(max(n, 1), 1000))
}

// read starts reading shard sh after its cursor.
func (m *merger) read(sh *mergeShard) {
	ch := make(chan shardRead, 1)
	sh.pending = ch
	after, limit := sh.cursor, m.limit()
	go func() {
		select {
		case m.sem <- struct{}{}:
		case <-m.ctx.Done():
			ch <- shardRead{err: m.ctx.Err()}
			return
		}
		rows, more, err := m.scan(m.ctx, m.id, sh.n, after, limit)
		<-m.sem
		ch <- shardRead{rows: rows, more: more, err: err}
	}()
}

// fill waits for sh's read while sh has no row and may have more, and
// takes in what it read within the budget.
func (m *merger) fill(sh *mergeShard) error {
	for len(sh.rows) == 0 && sh.more {
		if sh.pending == nil {
			m.read(sh)
		}
		if err := m.take(sh); err != nil {
			return err
		}
	}
	return nil
}

// take waits for sh's read in flight and keeps its rows while the budget
// allows (always the first when sh holds none).
func (m *merger) take(sh *mergeShard) error {
	r := <-sh.pending
	sh.pending = nil
	if r.err != nil {
		return fmt.Errorf("merge shards of %s: %w", m.id, r.err)
	}
	var total int64
	for _, it := range r.rows {
		total += RowBytes(it)
	}
	if len(r.rows) > 0 {
		m.estimate = max(m.estimate, total/int64(len(r.rows)))
	}
	kept := len(r.rows)
	for i, it := range r.rows {
		if sh.cursor != "" && it.ScanPos() <= sh.cursor {
			return fmt.Errorf("merge shards of %s: shard %d returned position %q after %q", m.id, sh.n, it.ScanPos(), sh.cursor)
		}
		size := RowBytes(it)
		if len(sh.rows) > 0 && m.held+size > m.budget {
			kept = i // the rest is read again later, from sh.cursor
			break
		}
		sh.rows = append(sh.rows, it)
		sh.cursor = it.ScanPos()
		m.held += size
	}
	sh.more = r.more || kept < len(r.rows)
	return nil
}

// Scanner is what Merge needs of the store (Store documents
// each method): the item rows and the pack rows of one item shard, in
// order, a page at a time.
type Scanner interface {
	ScanShard(ctx context.Context, batchID string, shard int, after string, limit int) ([]ledger.Item, bool, error)
	ScanPacks(ctx context.Context, batchID string, shard int, after string, limit int) ([]ledger.Item, bool, error)
}
