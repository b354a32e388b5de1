package control

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/held"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/lifecycle"
	"github.com/bulkrun/bulkrun/shared/live"
)

// Control carries out a caller's commands on existing batches: cancel,
// release, forget, and the listing of items needing attention. Safe for
// concurrent use.
type Control struct {
	Store Store
	Blobs ledger.Blobs
	Log   *slog.Logger
	Clock ledger.Clock // decides expiry; nil means SystemClock
	// Bus gets the Batch Paused and Batch Unpaused events of a caller's
	// pause and unpause, the Batch Halt Lifted event of a lift, and the
	// Batch State Change approved of a caller's approval; nil for none.
	Bus ledger.EventBus
	// ItemTimeout is the item function's timeout, which decides when a
	// live view calls a run stalled (live.Of); 0 means
	// api.DefaultItemTimeout.
	ItemTimeout time.Duration
	// Wake wakes held items (shared/held): a lift's, and a cancel's
	// (every held item, to settle cancelled). nil: a lift refuses, and a
	// cancel leaves held items to the finalize tick.
	Wake *held.Waker
}

func (c *Control) now() time.Time {
	if c.Clock == nil {
		return ledger.SystemClock{}.Now()
	}
	return c.Clock.Now()
}

// Get reads the batch as callers see it: ErrNotFound without a row, an
// error wrapping ErrExpired once its retention has ended (Batch.Expired),
// whether or not the sweep has deleted it yet.
func (c *Control) Get(ctx context.Context, id string) (ledger.Batch, error) {
	b, err := c.Store.GetBatch(ctx, id)
	if err != nil {
		return ledger.Batch{}, err
	}
	return ledger.Live(b, c.now())
}

// Cancel stops the batch's current run: items not yet started end
// cancelled, started ones finish, held ones are woken to end cancelled
// (within WakeTime; what that leaves — a pack another delivery holds, a
// call cut short — the finalize tick wakes, finalize.Finalizer.Settle),
// and finalize gives
// the run the status cancelled. Idempotent: cancelling a run that is already stopping, or a
// batch whose run has finished (whatever its status), returns the batch
// unchanged. Errors: ErrNotFound (ErrExpired past the retention);
// ErrConflict while the source is still being read (submitting).
func (c *Control) Cancel(ctx context.Context, id string) (ledger.Batch, error) {
	return c.cancelAs(ctx, id, "cancelled by a caller")
}

// cancelAs is Cancel, the stop's detail saying detail.
func (c *Control) cancelAs(ctx context.Context, id, detail string) (ledger.Batch, error) {
	b, err := c.Get(ctx, id)
	if err != nil {
		return ledger.Batch{}, err
	}
	if b.Status.Finished() {
		return b, nil // nothing runs: the answer is the batch as it ended
	}
	if b.Status != api.StatusRunning {
		return b, fmt.Errorf("cancel %s: no run is going yet (status %s): %w", id, b.Status, api.ErrConflict)
	}
	if b.Stop == "" {
		err := lifecycle.StopRun(ctx, c.Store, b, b.Run, api.StatusCancelled, detail)
		if err != nil && !errors.Is(err, api.ErrConflict) {
			return ledger.Batch{}, err
		}
		c.Log.InfoContext(ctx, "run cancelling", "batch_id", id, "run", b.Run)
	}
	// Held items have no message on the queue: woken, they settle
	// cancelled like the others.
	c.wakeToCancel(ctx, b)
	return c.Store.GetBatch(ctx, id)
}

// Release makes a quarantined item eligible for the next run (resume).
// Items are released between runs: a run in progress may already have
// answered the item's message. Errors, the same at every items per
// message: ErrNotFound when the batch has no item with the key;
// ErrConflict when the item is not quarantined or a run is going.
//
// A pack item that is neither failed nor quarantined has no row of its
// own to say that it exists (Store.ReleaseItem answers ErrNotFound): the
// key is then looked up in the results of the batch's last finalized
// run, which list every item of the batch once, in key order (see
// keysort.go), by a binary search in ranged reads (about log2 of the
// lines, one read each, per results file). A key found there is a
// conflict. Results a release before key-ordered packs wrote (manifest
// order) may not find it: ErrNotFound, as that release answered.
func (c *Control) Release(ctx context.Context, id, key string) error {
	b, err := c.Get(ctx, id)
	if err != nil {
		return err
	}
	if b.Status == api.StatusRunning {
		return fmt.Errorf("release %s/%s: run %d is going; release between runs: %w", id, key, b.Run, api.ErrConflict)
	}
	err = c.Store.ReleaseItem(ctx, id, b.ListShards, key)
	if b.Packed() && errors.Is(err, api.ErrNotFound) {
		o, found, ferr := c.resultOf(ctx, b, key)
		switch {
		case ferr != nil:
			return fmt.Errorf("release %s/%s: %w", id, key, ferr)
		case found:
			return fmt.Errorf("release %s/%s: not quarantined (%s): %w", id, key, o, api.ErrConflict)
		}
	}
	return err
}

// resultOf finds key in the results of b's last finalized run (a run that
// ended finalize_failed has none: the run before it).
func (c *Control) resultOf(ctx context.Context, b ledger.Batch, key string) (api.Outcome, bool, error) {
	for run := b.Run; run >= 1; run-- {
		body, err := c.Blobs.Get(ctx, api.ReportKey(b.ID, run))
		if errors.Is(err, api.ErrNotFound) {
			continue
		}
		if err != nil {
			return "", false, err
		}
		var rep api.Report
		if err := json.Unmarshal(body, &rep); err != nil {
			return "", false, fmt.Errorf("report of run %d: %w", run, err)
		}
		for _, o := range api.TerminalOutcomes() {
			file, ok := rep.Results.Files[o]
			if !ok || file.Bytes == 0 {
				continue
			}
			found, err := searchResults(ctx, c.Blobs, api.ResultsKey(b.ID, run, o), file.Bytes, key)
			if err != nil || found {
				return o, found, err
			}
		}
		return "", false, nil
	}
	return "", false, nil
}

// searchResults reports whether the results file at objectKey (size
// bytes of JSONL in KeyOrder) has a line of key: a binary search over
// byte offsets, each probe reading the first whole line at or after its
// offset.
func searchResults(ctx context.Context, blobs ledger.Blobs, objectKey string, size int64, key string) (bool, error) {
	lo, hi := int64(0), size // lo starts a line; key's line, if any, starts in [lo, hi)
	for lo < hi {
		mid := lo + (hi-lo)/2
		start, line, err := lineFrom(ctx, blobs, objectKey, size, mid, mid == lo)
		if err != nil {
			return false, err
		}
		if start >= hi {
			hi = mid // no line starts in [mid, hi)
			continue
		}
		var l struct {
			Key string `json:"key"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			return false, fmt.Errorf("results %s at %d: %w", objectKey, start, err)
		}
		switch c := ledger.KeyOrder(l.Key, key); {
		case c == 0:
			return true, nil
		case c < 0:
			lo = start + int64(len(line))
		default:
			hi = mid
		}
	}
	return false, nil
}

// lineFrom returns the first whole line of objectKey that starts at off
// (atStart) or after it, and where it starts; start is size past the
// last line.
func lineFrom(ctx context.Context, blobs ledger.Blobs, objectKey string, size, off int64, atStart bool) (int64, []byte, error) {
	const read = 64 << 10
	from := off
	if !atStart {
		from = off - 1 // a line starts at off if the byte before it ends one
	}
	var buf []byte
	start := int64(-1)
	if atStart {
		start = off
	}
	for pos := from; ; {
		if start >= 0 {
			if i := bytes.IndexByte(buf[start-from:], '\n'); i >= 0 {
				return start, buf[start-from : start-from+int64(i)+1], nil
			}
		} else if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			start = from + int64(i) + 1
			continue
		}
		if pos >= size {
			if start >= 0 && start < size {
				return start, buf[start-from:], nil // a last line without its newline
			}
			return size, nil, nil
		}
		n := min(int64(read), size-pos)
		body, err := blobs.OpenRange(ctx, objectKey, pos, n)
		if err != nil {
			return 0, nil, err
		}
		chunk, err := io.ReadAll(body)
		body.Close()
		if err != nil {
			return 0, nil, fmt.Errorf("results %s at %d: %w", objectKey, pos, err)
		}
		if len(chunk) == 0 {
			return 0, nil, fmt.Errorf("results %s: nothing at %d of %d bytes", objectKey, pos, size)
		}
		buf = append(buf, chunk...)
		pos += int64(len(chunk))
	}
}

// Forget removes everything the batch owns: it flags the batch as being
// forgotten (pending_deletion; no resume can start a run from then on),
// deletes its objects under batches/{id}/ (manifests, outputs, results,
// reports), then its rows, the batch row and its retention markers last. A
// later submit of the id starts from nothing. An expired batch may be
// forgotten. Retrying an interrupted forget finishes it. Errors:
// ErrNotFound; ErrConflict while a run is going (cancel it first);
// ErrPendingDeletion (wrapped, with the cause) when deleting started and
// did not finish.
func (c *Control) Forget(ctx context.Context, id string) error {
	return lifecycle.Forget(ctx, c.Store, c.Blobs, id, c.Log)
}

// ItemPageBytes bounds a page of Items by size as well as by count: its
// items, each as its JSON (json.Marshal of api.Item), add up to at most
// ItemPageBytes (2 MiB), and a page holds at least one item. The REST API
// writes a page indented inside the function's JSON response to Lambda,
// which escapes each quote and backslash again: at most twice the page
// plus the indentation, within the 6 MB of a synchronous Lambda response
// ("Lambda quotas", "Invocation payload (request and response)",
// https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html)
// even for 1,000 items whose 4 KiB errors are HTML.
const ItemPageBytes = 2 << 20

// Items lists the batch's items of outcome (failed, quarantined,
// withheld, in_flight; api.NeedsAttention: every
// failed, quarantined and held item, each with its next move, Item.Next),
// oldest key first, limit per page (default 100, at most
// 1,000) and at most ItemPageBytes of items, continuing after cursor
// (opaque, from the previous page): a page cut by bytes has a cursor
// that goes on after its last item.
func (c *Control) Items(ctx context.Context, id string, outcome api.Outcome, cursor string, limit int) (api.ItemPage, error) {
	q, err := readItemsQuery(outcome, cursor, limit)
	if err != nil {
		return api.ItemPage{}, err
	}
	b, err := c.Get(ctx, id)
	if err != nil {
		return api.ItemPage{}, err
	}
	return c.itemsOf(ctx, b, q)
}

// itemsQuery is a page of Items asked for: its outcome, the key it goes
// on after ("" from the first), its limit.
type itemsQuery struct {
	outcome api.Outcome
	cursor  string // as given: a first page is cursor ""
	after   string
	limit   int
}

// readItemsQuery checks Items' outcome, cursor and limit (0: the
// default), each an *api.InputError naming it.
func readItemsQuery(outcome api.Outcome, cursor string, limit int) (itemsQuery, error) {
	if !ledger.Listable(outcome) {
		reason := fmt.Sprintf("%q: want failed, quarantined, withheld, exhausted, suspended, in_flight or needs_attention", outcome)
		if outcome == api.OutcomeSucceeded || outcome == api.OutcomeCancelled {
			// No index row lists them (only items needing attention have
			// one): a run's results files do, once it has ended.
			reason += fmt.Sprintf("; %s items are listed in the run's results (GET /batches/{id}/report names their file; bulkrun results ID --outcome %s), or in the results recorded so far while it runs (GET /batches/{id}/results/partial)", outcome, outcome)
		}
		return itemsQuery{}, &api.InputError{Field: "outcome", Reason: reason}
	}
	if limit == 0 {
		limit = api.DefaultListLimit
	}
	if limit < 1 || limit > api.MaxListLimit {
		return itemsQuery{}, &api.InputError{Field: "limit", Reason: fmt.Sprintf("%d is not within 1–%d", limit, api.MaxListLimit)}
	}
	q := itemsQuery{outcome: outcome, cursor: cursor, limit: limit}
	if cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil {
			return itemsQuery{}, &api.InputError{Field: "cursor", Reason: "not a cursor from a previous page"}
		}
		q.after = string(raw)
	}
	return q, nil
}

// itemsOf is the page q of batch b's items (Items, with b read).
func (c *Control) itemsOf(ctx context.Context, b ledger.Batch, q itemsQuery) (api.ItemPage, error) {
	id, outcome, cursor, after, limit := b.ID, q.outcome, q.cursor, q.after, q.limit
	list := c.Store.ListItems
	if b.Packed() && outcome == api.OutcomeInFlight {
		list = func(ctx context.Context, id string, shards int, _ api.Outcome, after string, limit int) ([]ledger.Item, string, error) {
			return c.Store.ListPackItems(ctx, id, shards, after, limit)
		}
	}
	items, next, err := list(ctx, id, b.ListShards, outcome, after, limit)
	if err != nil {
		return api.ItemPage{}, err
	}
	p := api.ItemPage{Items: make([]api.Item, 0, len(items))}
	size, ended, stop := 0, b.Status.Finished(), b.Stop
	for i, it := range items {
		b, err := json.Marshal(it.Item)
		if err != nil {
			return api.ItemPage{}, fmt.Errorf("items of %s: %w", id, err)
		}
		if size += len(b); size > ItemPageBytes && i > 0 {
			next = items[i-1].Key // the page is cut: go on after its last item
			break
		}
		p.Items = append(p.Items, withNext(it.Item, ended, stop))
	}
	if next != "" {
		p.NextCursor = itemCursor(next)
	}
	if outcome == api.OutcomeInFlight && cursor == "" && b.Status == api.StatusRunning {
		// One Progress read (its counter partitions) per first page.
		pr, err := c.Store.Progress(ctx, id, b.Run, max(1, b.CounterShards))
		if err != nil {
			return api.ItemPage{}, err
		}
		l := live.Of(b, pr, c.Clock.Now(), c.ItemTimeout)
		p.Live = &l
	}
	return p, nil
}

// itemCursor is the cursor of a page of Items (or Inputs) that goes on
// after key.
func itemCursor(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

// withNext is it with its next move (api.NextMove) and, for a held item,
// its hold's; ended: its batch's run has ended; stop: the run is being
// stopped (api.Batch.Stop), which ends a held item cancelled whatever a
// caller does.
func withNext(it api.Item, ended bool, stop api.Status) api.Item {
	it.Next = api.NextMove(it.Outcome, it.Hold, ended)
	if stop != "" && !ended && it.Outcome.Held() {
		it.Next = fmt.Sprintf("none: the run is stopping (%s); it ends cancelled without a call", stop)
	}
	return it
}
