// Package fanout expands a batch's manifest chunks into items-queue
// messages: one message per item, or per pack of K items
// (ledger.Packer), sent in SendMessageBatch calls, with what the queue
// refused recorded and what it did not take marked for the next
// delivery; the chunk of a sampled run's end sends the sample's messages
// only until the decision. The item function (shared/worker) delivers a
// fan-out message here and counts what was refused.
package fanout

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"time"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/source"
)

// Expander expands fan-out chunks.
type Expander struct {
	Queue ledger.Queue // the items queue
	Blobs ledger.Blobs // the batches bucket: the manifest's chunks
	// Store counts the items fanned out (CountFanned).
	Store interface {
		CountFanned(ctx context.Context, c ledger.FanCount) error
	}
	Clock ledger.Clock
	// Settle records failed, with text, the items (keys, in order) of the
	// unit at first in chunk whose message the queue refused, unless they
	// were reserved in the run, and returns how many it recorded.
	Settle func(ctx context.Context, chunk source.Chunk, first int64, keys []string, text string) (int64, error)
}

// Result is what one Expand did: Held, the chunk of a sample's end sent
// the sample's messages only (the caller holds its message for the
// decision); Sent, the items on the queue (or refused); Refused, the items
// recorded failed because the queue refused their message (counted by
// no counter yet).
type Result struct {
	Held          bool
	Sent, Refused int64
}

// Expand expands one manifest chunk into item messages. Items whose
// message the queue refuses as the sender's fault (a retry cannot help)
// are recorded failed with the queue's reason (Settle; Result.Refused
// counts them, for the caller to count); the others are sent. A
// message m.Sent says is on the queue already is not sent again; when the
// queue does not take some messages (an *UnsentError), m.Sent is set to
// what is on the queue by now, so that the fan-out message sent again
// (the item function's unavailable) sends only the rest.
//
// While b's first run holds the rest for an approval, the chunk that holds
// the sample's end sends the sample's messages only (sampleMessages),
// sets m.Sent to them and reports Result.Held: the caller holds m as a chunk
// wholly after the sample is held, and its delivery after the decision
// sends the rest. So the sample's messages are the only units on the
// queue while it runs — not mixed with up to a chunk's worth of held ones,
// each a delivery that takes nothing (on a standard queue, which does
// not keep their order, the sample's 20 messages of a 5,000-item chunk
// at K = 10 came out among the 480 others over ≈ 2 s on the emulator) —
// and a batch left awaiting holds one message per chunk.
func (e *Expander) Expand(ctx context.Context, log *slog.Logger, b ledger.Batch, m *ledger.Message) (Result, error) {
	stopAt := sampleMessages(b, *m.Chunk)
	rc, err := e.Blobs.OpenRange(ctx, m.ManifestKey, m.Chunk.Offset, m.Chunk.Length)
	if err != nil {
		return Result{}, fmt.Errorf("open chunk: %w", err)
	}
	defer rc.Close()
	const flushAt = 500
	bodies := make([][]byte, 0, flushAt)
	keys := make([][]string, 0, flushAt) // the items of each body
	ords := make([]int64, 0, flushAt)    // the number of each body in the chunk's messages
	var sent, refused, made int64        // items sent (or refused), items refused, messages made
	flush := func() error {
		if len(bodies) == 0 {
			return nil
		}
		err := e.Queue.Send(ctx, bodies)
		var re *ledger.RefusedError
		var ue *ledger.UnsentError
		switch {
		case errors.As(err, &ue) && len(ue.Refused) > 0:
			re = &ledger.RefusedError{Refused: ue.Refused}
		case !errors.As(err, &re):
			re = nil
		}
		if re != nil {
			n, serr := e.settleRefused(ctx, log, b, *m.Chunk, ords, keys, re)
			refused += n
			if serr != nil {
				// What the queue took is on it: the fan-out message sent
				// again sends (and settles) only the refused messages and
				// the unsent ones, not the others a second time.
				// (A refusal naming no body of this send marks nothing.)
				again := make([]int64, 0, len(re.Refused))
				for _, r := range re.Refused {
					if r.Index < 0 || r.Index >= len(ords) {
						return serr
					}
					again = append(again, ords[r.Index])
				}
				if ue != nil {
					for _, i := range ue.Unsent {
						again = append(again, ords[i])
					}
				}
				m.Sent = m.Sent.After(made, again)
				return serr
			}
			if ue == nil {
				err = nil
			}
		}
		if ue != nil {
			unsent := make([]int64, 0, len(ue.Unsent))
			for _, i := range ue.Unsent {
				unsent = append(unsent, ords[i])
			}
			m.Sent = m.Sent.After(made, unsent)
			log.WarnContext(ctx, "fan-out: the queue did not take some messages; only those are sent again", "unsent", len(ue.Unsent), "of", len(bodies))
		}
		if err != nil {
			return err
		}
		for _, k := range keys {
			sent += int64(len(k))
		}
		bodies, keys, ords = bodies[:0], keys[:0], ords[:0]
		return nil
	}
	packer, err := ledger.NewPacker(b.ID, b.Run, m.ManifestKey, *m.Chunk, b.Pack(), func(body []byte, ks []string) error {
		n := made
		if stopAt >= 0 && n >= stopAt {
			return errSampleSent
		}
		made++
		if m.Sent.Has(n) {
			sent += int64(len(ks)) // on the queue since an earlier delivery of this fan-out
			return nil
		}
		bodies, keys, ords = append(bodies, body), append(keys, ks), append(ords, n)
		if len(bodies) >= flushAt {
			return flush()
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	packer.SetPriority(b.Weight())
	if b.Run == 1 {
		packer.SetSample(int64(b.Sample))
	}
	err = source.ReadManifestLines(rc, m.Chunk.Offset, packer.Add)
	if err == nil {
		err = packer.Flush() // the chunk's last, short message may be the first after the sample
	}
	partial := errors.Is(err, errSampleSent)
	if err == nil || partial {
		err = flush()
	}
	if err == nil {
		pieces := fanPieces(b, *m.Chunk)
		if partial {
			m.Sent, pieces = m.Sent.After(stopAt, nil), pieces[:1]
			log.InfoContext(ctx, "fan-out: the sample's messages sent; the rest of the chunk waits for an approval", "messages", stopAt, "first", m.Chunk.FirstIndex)
		}
		e.countFanned(ctx, log, b, pieces)
	}
	res := Result{Held: partial && err == nil, Sent: sent, Refused: refused}
	if err != nil || partial {
		return res, err
	}
	if sent != m.Chunk.Count {
		return res, fmt.Errorf("chunk at %d holds %d items, want %d", m.Chunk.Offset, sent, m.Chunk.Count)
	}
	return res, nil
}

// countFanned counts the live view's items fanned out (refused ones were
// recorded failed, and counted so): each piece once, whatever the
// repeats (Store.CountFanned).
func (e *Expander) countFanned(ctx context.Context, log *slog.Logger, b ledger.Batch, pieces []source.Chunk) {
	for _, p := range pieces {
		c := CountOf(b, p.FirstIndex, p.Count, e.Clock.Now())
		if err := e.Store.CountFanned(ctx, c); err != nil {
			log.WarnContext(ctx, "count the fanned-out chunk", "error", err.Error(), "first", p.FirstIndex)
		}
	}
}

// CountOf is the live view's count of the chunk (or piece) of b at first
// with items items: in counter partition ledger.Shard(first) — h mod
// shards, h the FNV-1a hash of first in decimal — and fan row
// ⌊h / shards⌋ mod b.FanRows (1 when 0: a batch frozen before fan rows,
// whose writers of an earlier release put every chunk on row 0), so that
// the same chunk always goes to the same row (whose set makes a repeat
// count once), whatever release writes it, and the rows of a partition
// fill evenly.
func CountOf(b ledger.Batch, first, items int64, now time.Time) ledger.FanCount {
	shards := uint32(max(1, b.CounterShards))
	h := fnv.New32a()
	h.Write([]byte(strconv.FormatInt(first, 10)))
	sum := h.Sum32()
	return ledger.FanCount{BatchID: b.ID, Run: b.Run, Lane: int(sum % shards), Row: int(sum / shards % uint32(max(1, b.FanRows))),
		First: first, Items: items, Now: now}
}

// fanPieces is chunk as the fan-out counts it: one piece, or, on a
// sampled first run whose sample ends inside it with messages after it,
// the sample's messages' items and the rest's — the same pieces whether
// or not the sample was sent on its own (sampleMessages), so that each
// is counted once.
func fanPieces(b ledger.Batch, chunk source.Chunk) []source.Chunk {
	n := sampleItems(b, chunk)
	if n == 0 {
		return []source.Chunk{chunk}
	}
	return []source.Chunk{{FirstIndex: chunk.FirstIndex, Count: n}, {FirstIndex: chunk.FirstIndex + n, Count: chunk.Count - n}}
}

// sampleItems is how many of chunk's items the messages holding b's
// sample cover (whole messages: the sample's end rounded up to the end of
// its message), when b's first run is sampled and the sample ends inside
// chunk with messages after it; 0 otherwise.
func sampleItems(b ledger.Batch, chunk source.Chunk) int64 {
	if b.Run != 1 || b.Sample <= 0 || chunk.FirstIndex >= int64(b.Sample) {
		return 0
	}
	k := int64(max(1, b.Pack()))
	n := (int64(b.Sample) - chunk.FirstIndex + k - 1) / k * k
	if n >= chunk.Count {
		return 0
	}
	return n
}

// errSampleSent stops a fan-out at the first message after the sample
// (sampleMessages).
var errSampleSent = errors.New("the sample's messages are made")

// sampleMessages is how many of chunk's messages a fan-out sends while b's
// first run holds the rest for an approval: those whose first item is
// among the sample's (Packer.SetSample marks the same ones), when the
// chunk holds the sample's end and messages after it; −1 (all of them)
// otherwise.
func sampleMessages(b ledger.Batch, chunk source.Chunk) int64 {
	n := sampleItems(b, chunk)
	if !b.Approval.Holds() || b.Stop != "" || n == 0 {
		return -1
	}
	return n / int64(max(1, b.Pack()))
}

// settleRefused records the items whose message the queue refused as
// failed (Settle: permanent, with the queue's code and message), unless
// they were already reserved in this run. keys holds each body's items and ords
// each body's number in the chunk's messages (its unit starts at
// chunk.FirstIndex + that × the batch's items per message). It returns
// how many it recorded.
func (e *Expander) settleRefused(ctx context.Context, log *slog.Logger, b ledger.Batch, chunk source.Chunk, ords []int64, keys [][]string, re *ledger.RefusedError) (int64, error) {
	var n int64
	for _, r := range re.Refused {
		if r.Index < 0 || r.Index >= len(keys) {
			return n, fmt.Errorf("refusal of message %d of %d", r.Index, len(keys))
		}
		text := pipeline.CutText(fmt.Sprintf("the items queue refused the item's message: %s: %s", r.Code, r.Message), pipeline.MaxErrorTextBytes)
		first := chunk.FirstIndex + ords[r.Index]*int64(b.Pack())
		settled, err := e.Settle(ctx, chunk, first, keys[r.Index], text)
		if err != nil {
			return n, err
		}
		n += settled
		log.WarnContext(ctx, "message refused by the queue; its items recorded failed", "first", first, "items", settled, "error", text)
	}
	return n, nil
}
