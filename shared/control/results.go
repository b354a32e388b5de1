package control

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/shardmerge"
)

// The bounds of a page of PartialResults.
const (
	// DefaultResultLimit is the lines of a page of PartialResults when the
	// caller names none; api.MaxListLimit (1,000) at most.
	DefaultResultLimit = api.MaxListLimit
	// ResultExamineFactor bounds the rows one call reads past its cursor:
	// ResultExamineFactor × limit. Rows without a line (items in flight,
	// withheld, or pending in the run) count too, so that a call over a
	// stretch of unfinished items still ends within its bound, with a
	// cursor and fewer lines, even none.
	ResultExamineFactor = 4
)

// errPageFull ends the merge of a page.
var errPageFull = errors.New("page full")

// PartialResults pages the results lines recorded so far in the batch's
// current run, without waiting for finalize: one api.ResultLine per item
// whose outcome in the run is terminal (succeeded, failed, quarantined,
// cancelled; the rule finalize counts by, ledger.OutcomeInRun: an item an
// earlier run ended and this run does not run again keeps its line, as in
// the run's results file), each the line the run's results file holds or
// will hold for it. Items pending, in flight or withheld in the run have
// no line and are absent: the page never marks them, so that once the run
// is finished the stream is the run's results file, line for line. The
// lines come in key byte order (api.ResultOrderKey); a batch with items
// per message > 1 keeps its items in pack rows keyed by manifest position,
// so its lines come in manifest order (api.ResultOrderManifest) — the
// same lines as its results file, which finalize sorts into key order.
//
// A page holds at most limit lines (1–1,000, default DefaultResultLimit)
// and ItemPageBytes of them, and examines at most ResultExamineFactor ×
// limit rows past cursor (opaque, from the previous page; it names the
// run, and a cursor of another run is invalid_request naming cursor): a
// page may hold fewer lines, even none, and still carry a cursor. The
// stream ends when next_cursor is absent. Each call reads the rows as
// they are then: an item recorded after the stream passed its key comes
// in a later stream, not this one.
//
// Reads per call. The batch row (one GetItem) and a k-way merge
// (shardmerge.Merge) of the batch's ListShards item partitions
// (ITEM#{id}#{shard}, or PACK#{id}#{shard}), each read by Query from the
// cursor on, eventually consistent, never a Scan of the table and never
// rows before the cursor: each shard's first Query asks for about
// 1.25 × limit / ListShards + 2 rows, and a shard drained before the
// page is full is read again (its read-ahead included, at most one Query
// of that size in flight per shard). So a call makes ListShards Queries
// and a few more, and reads about limit to 2.5 × limit rows: at 0.5 read
// unit per 4 KB a Query (rounded up per Query), about ListShards × 0.5 +
// rows × row bytes / 8 KB units. A row read in flight (or released) is
// read again strongly consistent (Store.ScanShard), one more unit each,
// one per item then in flight past the cursor within the page — in a
// paused batch every item waiting to start has such a row, and those
// reads are most of a call's units (docs/design/measured.md).
// A stream of the whole batch reads each row about once, plus a Query
// per shard per page.
func (c *Control) PartialResults(ctx context.Context, id, cursor string, limit int) (api.ResultPage, error) {
	if limit == 0 {
		limit = DefaultResultLimit
	}
	if limit < 1 || limit > api.MaxListLimit {
		return api.ResultPage{}, &api.InputError{Field: "limit", Reason: fmt.Sprintf("%d is not within 1–%d", limit, api.MaxListLimit)}
	}
	run, after, err := parseResultCursor(cursor)
	if err != nil {
		return api.ResultPage{}, err
	}
	b, err := c.Get(ctx, id)
	if err != nil {
		return api.ResultPage{}, err
	}
	p := api.ResultPage{BatchID: b.ID, Run: b.Run, Status: b.Status, Order: api.ResultOrderKey, Lines: []api.ResultLine{}}
	if b.Packed() {
		p.Order = api.ResultOrderManifest
	}
	if cursor != "" && run != b.Run {
		return api.ResultPage{}, &api.InputError{Field: "cursor", Reason: fmt.Sprintf("a cursor of run %d; the batch is at run %d: start the stream again without a cursor", run, b.Run)}
	}
	if b.Run == 0 || b.ListShards < 1 {
		return p, nil // submitting, or refused: no item has a row
	}
	shards := b.ListShards
	per := (limit + shards - 1) / shards
	per = min(max(per+per/4+2, 2), 1000)
	opts := shardmerge.Options{
		Packed: b.Packed(),
		// shardmerge.Merge sizes each Query as BudgetBytes / (2 × shards × the
		// row estimate, 1 KiB until larger rows are seen): per rows.
		BudgetBytes: int64(2*shards*per) << 10,
	}
	examine := ResultExamineFactor * limit
	examined, size, last := 0, 0, ""
	err = shardmerge.Merge(ctx, c.Store, b.ID, shards, after, opts, func(it ledger.Item) error {
		if len(p.Lines) >= limit || examined >= examine {
			return errPageFull
		}
		if o, ok := ledger.OutcomeInRun(it, b); ok && o.Terminal() {
			l := ledger.ResultLineOf(it, o)
			raw, err := json.Marshal(l)
			if err != nil {
				return fmt.Errorf("results of %s: %w", id, err)
			}
			if size+len(raw) > ItemPageBytes && len(p.Lines) > 0 {
				return errPageFull
			}
			size += len(raw)
			p.Lines = append(p.Lines, l)
		}
		examined++
		last = it.ScanPos()
		return nil
	})
	switch {
	case errors.Is(err, errPageFull):
		p.NextCursor = resultCursor(b.Run, last)
	case err != nil:
		return api.ResultPage{}, err
	}
	return p, nil
}

// resultCursor is the cursor of a page of run that ends after position
// pos (a key, or a pack batch's manifest position).
func resultCursor(run int, pos string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(run) + "\x00" + pos))
}

// parseResultCursor reads resultCursor's run and position ("" for none).
func parseResultCursor(cursor string) (int, string, error) {
	if cursor == "" {
		return 0, "", nil
	}
	bad := &api.InputError{Field: "cursor", Reason: "not a cursor from a previous page"}
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return 0, "", bad
	}
	r, pos, ok := strings.Cut(string(raw), "\x00")
	run, err := strconv.Atoi(r)
	if !ok || err != nil || run < 1 || pos == "" {
		return 0, "", bad
	}
	return run, pos, nil
}
