package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/source"
)

// MaxItemsPerMessage is the most items one pack message carries (1–100).
const MaxItemsPerMessage = 100

// PackMessage is the body of a pack message (JSON): the items of manifest
// indexes PackFirst .. PackFirst+len(Items)-1, all of the fan-out chunk
// (ChunkFirst, ChunkItems). Pack boundaries depend only on the chunk and
// the items per message K (see PackFirst), never on sizes or on which
// delivery expanded the chunk, so a chunk expanded twice yields the same
// packs with the same PackFirst: the pack's name in the ledger.
type PackMessage struct {
	Format  int         `json:"v"`    // see Message.Format
	Kind    MessageKind `json:"kind"` // KindPack
	BatchID string      `json:"batch_id"`
	Run     int         `json:"run"`
	// ManifestKey is the manifest the items' InputRef point into (always
	// set).
	ManifestKey string       `json:"manifest_key"`
	ChunkFirst  int64        `json:"chunk_first"`
	ChunkItems  int64        `json:"chunk_items"`
	PackFirst   int64        `json:"pack_first"`
	Items       []PackedItem `json:"items"`
	// Priority: see Message.Priority.
	Priority int `json:"priority,omitempty"`
	// Sample: see Message.Sample.
	Sample bool `json:"sample,omitempty"`
	// Requeued: see Message.Requeued.
	Requeued int `json:"requeued,omitempty"`
	// SlotWaits: see Message.SlotWaits.
	SlotWaits int `json:"slot_waits,omitempty"`
	// RateAtUs, RatePos, RateLeadMs: see Message.RateAtUs, RatePos and
	// RateLeadMs.
	RateAtUs   int64   `json:"rate_at_us,omitempty"`
	RatePos    float64 `json:"rate_pos,omitempty"`
	RateLeadMs int64   `json:"rate_lead_ms,omitempty"`
	// TokensAtUs, TokensBookedUs, TokensDriftUs: see Message.TokensAtUs.
	TokensAtUs     int64 `json:"tokens_at_us,omitempty"`
	TokensBookedUs int64 `json:"tokens_booked_us,omitempty"`
	TokensDriftUs  int64 `json:"tokens_drift_us,omitempty"`
	// TrackUnit: see Message.TrackUnit (≈ 150 bytes, inside the room
	// MaxMessageBytes leaves under SQS's limit).
	TrackUnit *TrackUnit `json:"track_unit,omitempty"`
	// HopAtMs: see Message.HopAtMs.
	HopAtMs int64 `json:"hop_at_ms,omitempty"`
}

// PackedItem is one item of a pack message: its key and either its input
// inline or a pointer to its manifest line (Offset, Length; Count 1).
type PackedItem struct {
	Key      string          `json:"key"`
	Input    json.RawMessage `json:"input,omitempty"`
	InputRef *source.Chunk   `json:"input_ref,omitempty"`
}

// Validate reports a malformed pack message (a poison message is
// acknowledged and logged).
func (m PackMessage) Validate() error {
	switch {
	case m.Kind != KindPack:
		return fmt.Errorf("pack message: kind %q", m.Kind)
	case !api.ValidBatchID(m.BatchID):
		return fmt.Errorf("pack message: bad batch_id %q", m.BatchID)
	case m.Run < 1:
		return fmt.Errorf("pack message: bad run %d", m.Run)
	case len(m.Items) == 0 || len(m.Items) > MaxItemsPerMessage:
		return fmt.Errorf("pack message: %d items, want 1–%d", len(m.Items), MaxItemsPerMessage)
	case m.PackFirst < m.ChunkFirst || m.ChunkItems > 0 && m.PackFirst+int64(len(m.Items)) > m.ChunkFirst+m.ChunkItems:
		return fmt.Errorf("pack message: items %d+%d outside chunk %d+%d", m.PackFirst, len(m.Items), m.ChunkFirst, m.ChunkItems)
	}
	for j, it := range m.Items {
		if r := api.CheckKey(it.Key); r != "" {
			return fmt.Errorf("pack message: item %d: %s", j, r)
		}
		if it.Input == nil && it.InputRef == nil {
			return fmt.Errorf("pack message: item %q has neither input nor input_ref", it.Key)
		}
		if it.InputRef != nil && m.ManifestKey == "" {
			return fmt.Errorf("pack message: item %q has input_ref without manifest_key", it.Key)
		}
	}
	return nil
}

// Body encodes the pack message as the fan-out does (see Packer).
func (m PackMessage) Body() ([]byte, error) {
	m.Format = FormatVersion
	return EncodeSafe(m)
}

// PackFirst is the manifest index of the first item of the pack that
// holds manifest index i of chunk, with k items per message: packs start
// at chunk.FirstIndex and every k items after it, so the last pack of a
// chunk may hold fewer (packs never cross chunks: each chunk has its own
// counter).
func PackFirst(chunk source.Chunk, k int, i int64) int64 {
	return chunk.FirstIndex + (i-chunk.FirstIndex)/int64(k)*int64(k)
}

// Packer turns the manifest lines of one fan-out chunk, in manifest order,
// into message bodies of up to K items each. With K = 1 every body is the
// item message of today (ItemMessageBody), byte for byte. With K > 1 a
// body is a PackMessage of at most MaxMessageBytes: an input larger than
// MaxInlineInputBytes (or a bad row's, see ItemMessage) travels by
// pointer as in an item message, and while
// the pack is still too large its largest inline input goes by pointer
// too (the first of equal ones), so the pack keeps its K items whatever
// their sizes.
type Packer struct {
	batchID     string
	run         int
	manifestKey string
	chunk       source.Chunk
	k           int
	emit        func(body []byte, keys []string) error
	priority    int   // api.Plan.Priority above 1, else 0 (SetPriority)
	sample      int64 // the batch's sample (SetSample): units starting below it are marked
	added       int64
	lines       []packLine
}

type packLine struct {
	line           source.ManifestLine
	offset, length int64
}

// NewPacker returns a Packer for chunk of manifestKey that gives each
// body, with the keys of its items in order, to emit. k outside 1–
// MaxItemsPerMessage is an *InputError naming items_per_message.
func NewPacker(batchID string, run int, manifestKey string, chunk source.Chunk, k int, emit func(body []byte, keys []string) error) (*Packer, error) {
	if k < 1 || k > MaxItemsPerMessage {
		return nil, &api.InputError{Field: "items_per_message", Reason: fmt.Sprintf("%d is not within 1–%d", k, MaxItemsPerMessage)}
	}
	return &Packer{batchID: batchID, run: run, manifestKey: manifestKey, chunk: chunk, k: k, emit: emit}, nil
}

// Skip starts the packer n items into its chunk (n a multiple of its k,
// within the chunk), as if it had been given the chunk's first n lines:
// a track runs a slice of a chunk (shared/pace) without its lines before.
func (p *Packer) Skip(n int64) {
	p.added = min(max(n, 0), p.chunk.Count)
}

// Add takes the chunk's next manifest line (at offset, length bytes, as
// ReadManifestLines gives it) and emits a body once K lines are held.
func (p *Packer) Add(line source.ManifestLine, offset, length int64) error {
	if p.added >= p.chunk.Count {
		return fmt.Errorf("pack: chunk at %d holds %d items, got more", p.chunk.FirstIndex, p.chunk.Count)
	}
	p.added++
	if p.k == 1 {
		m := ItemMessage(p.batchID, p.run, p.manifestKey, p.chunk, line, offset, length)
		m.Priority = p.priority
		m.Sample = p.chunk.FirstIndex+p.added-1 < p.sample
		body, err := itemMessageBody(m, offset, length, p.manifestKey)
		if err != nil {
			return err
		}
		return p.emit(body, []string{line.Key})
	}
	p.lines = append(p.lines, packLine{line: line, offset: offset, length: length})
	if len(p.lines) == p.k {
		return p.Flush()
	}
	return nil
}

// SetPriority makes every body carry the batch's priority (api.Plan.Weight),
// the message groups it is sent in (MessageGroup); 1, the default,
// writes none. Call it before the first Add.
func (p *Packer) SetPriority(weight int) {
	p.priority = 0
	if weight > 1 {
		p.priority = weight
	}
}

// SetSample marks every body whose first item's manifest index is below
// n as a unit of the batch's sample (Message.Sample): the first n items,
// rounded up to whole bodies. 0, the default, marks none. Call it before
// the first Add.
func (p *Packer) SetSample(n int64) { p.sample = max(n, 0) }

// Flush emits the lines held (the chunk's last, short pack). Call it once
// after the chunk's last line.
func (p *Packer) Flush() error {
	if len(p.lines) == 0 {
		return nil
	}
	body, keys, err := p.body()
	if err != nil {
		return err
	}
	p.lines = p.lines[:0]
	return p.emit(body, keys)
}

// body encodes the held lines as one PackMessage within MaxMessageBytes.
// A JSON array's encoding is its elements' encodings joined by commas, and
// SQSSafe escapes rune by rune, so the body's size is the envelope's plus
// each item's plus the commas: sizes are computed once per item, and the
// body is encoded once.
func (p *Packer) body() ([]byte, []string, error) {
	first := p.chunk.FirstIndex + p.added - int64(len(p.lines))
	m := PackMessage{Format: FormatVersion, Kind: KindPack, BatchID: p.batchID, Run: p.run, ManifestKey: p.manifestKey,
		ChunkFirst: p.chunk.FirstIndex, ChunkItems: p.chunk.Count, PackFirst: first, Items: []PackedItem{}, Priority: p.priority, Sample: first < p.sample}
	env, err := EncodeSafe(m)
	if err != nil {
		return nil, nil, err
	}
	items := make([]PackedItem, len(p.lines))
	inline := make([]int, len(p.lines)) // encoded size with the input inline; 0: by pointer
	ref := make([]int, len(p.lines))
	keys := make([]string, len(p.lines))
	size := len(env) + len(p.lines) - 1
	for i, l := range p.lines {
		keys[i] = l.line.Key
		items[i] = PackedItem{Key: l.line.Key, InputRef: &source.Chunk{Offset: l.offset, Length: l.length, Count: 1}}
		b, err := EncodeSafe(items[i])
		if err != nil {
			return nil, nil, err
		}
		ref[i] = len(b)
		if len(l.line.Input) <= MaxInlineInputBytes && l.line.Invalid == "" {
			in := PackedItem{Key: l.line.Key, Input: l.line.Input}
			b, err := EncodeSafe(in)
			if err != nil {
				return nil, nil, err
			}
			items[i], inline[i] = in, len(b)
			size += len(b)
		} else {
			size += ref[i]
		}
	}
	for size > MaxMessageBytes {
		big, gain := -1, 0
		for i := range items {
			if inline[i] > 0 && inline[i]-ref[i] > gain {
				big, gain = i, inline[i]-ref[i]
			}
		}
		if big < 0 {
			return nil, nil, fmt.Errorf("pack at %d: %d bytes with every input by pointer, more than %d", first, size, MaxMessageBytes)
		}
		l := p.lines[big]
		items[big] = PackedItem{Key: l.line.Key, InputRef: &source.Chunk{Offset: l.offset, Length: l.length, Count: 1}}
		inline[big] = 0
		size -= gain
	}
	m.Items = items
	body, err := EncodeSafe(m)
	if err != nil {
		return nil, nil, err
	}
	if len(body) != size {
		return nil, nil, fmt.Errorf("pack at %d: encoded %d bytes, sized %d", first, len(body), size)
	}
	return body, keys, nil
}

// EncodeSafe encodes v as Message.Body does: JSON without HTML escaping,
// SQS-safe.
func EncodeSafe(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return SQSSafe(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

// PackSK is the sort key of the pack whose first item is manifest index
// first: 12 digits, so that byte order is manifest order.
func PackSK(first int64) string { return fmt.Sprintf("%012d", first) }

// PackShard is the item shard (0 .. shards-1) whose pack partition holds
// the pack starting at manifest index first: FNV-1a of PackSK mod shards,
// so packs spread over the shards as item rows do.
func PackShard(first int64, shards int) int { return Shard(PackSK(first), shards) }

// PackPos is the scan position of item j of the pack starting at first
// (Item.Pos): packs in manifest order, their items in pack order.
func PackPos(first int64, j int) string { return fmt.Sprintf("%s.%03d", PackSK(first), j) }

// PackRef names a pack row: its batch, the batch's Batch.ListShards
// (which partition holds it) and the manifest index of its first item.
type PackRef struct {
	BatchID    string
	ListShards int
	First      int64
}

// Pack is a pack row: the ledger row of the items of one pack message of
// a batch with items_per_message > 1. It carries the pack's reservation
// (Attempt, the fence of every write while the pack is taken; LeaseUntil,
// until when its holder owns it) and each item's own state, which is what
// an item row holds with one item per message. Only the pack's holder
// writes its items (Store.WritePack), so every item's transition is
// decided in the worker from the row it read (see ItemState).
type Pack struct {
	BatchID string
	First   int64
	// Run is the run of the pack's last take.
	Run int
	// Attempt counts the takes of the pack across runs: a write is fenced
	// by the attempt of its take.
	Attempt    int
	LeaseUntil time.Time // zero: free
	// Items holds manifest indexes First .. First+len(Items)-1; an item
	// never reserved has an empty Outcome.
	Items     []ItemState
	ExpiresAt time.Time // the row's TTL; zero when it has none
	// Token is the token of the pack's last take (PackWrite.Token).
	Token string
}

// ItemState is one item's state in its ledger unit: what an item row
// holds, and what each entry of a pack row holds. The item rules (Plan,
// Start, Settled, Ended) are functions of it.
type ItemState struct {
	Key     string
	Run     int
	Outcome api.Outcome // "": never reserved (pending)
	// Attempt counts the item's own attempts across runs; FirstAttempt is
	// the first of them in Run, so attempts in the run are Attempt -
	// FirstAttempt + 1.
	Attempt, FirstAttempt int
	// Retry is set on an item in flight whose attempt failed transiently:
	// its retry is scheduled (the pack's message comes back), it was not
	// interrupted.
	Retry bool
	// RetryAt is when the scheduled retry is due (Retry set): the attempt's
	// end + its wait (Ending.Wait: the backoff, a Retry-After, twice a
	// timeout). No delivery runs the item before it — a duplicate, a pack
	// message sent again for a sibling's wake or timer (a pack's take
	// leaves it; an item row's lease runs until then, Record.RetryAt).
	// Zero: due at once (a given-back item, rows written before it).
	RetryAt time.Time
	// ThrottledSince is when the item's current streak of throttled
	// attempts began (see Conclude); zero when its last attempt was not
	// throttled. Attempts of the streak do not count toward max attempts:
	// FirstAttempt was moved past each.
	ThrottledSince time.Time
	Released       bool // quarantined and released for the next run
	Output         json.RawMessage
	OutputRef      string
	Error          string
	Reason         api.Reason
	Cost           pipeline.Cost // the attempt that ended the item
	Spent          pipeline.Cost // every attempt of SpentRun
	SpentRun       int
	// CountedRun is the last run in which the item, answered from an
	// earlier run's outcome, was counted toward the run's progress (the
	// count mark of one item per message, kept in the row).
	CountedRun int
	// Revision is the manifest revision whose input the item runs with
	// (Batch.Revisions): 0 for the batch's own manifest, n ≥ 2 once a
	// correction gave it a new input. Set by Store.MarkRevision, kept by
	// every other write.
	Revision int
	// Hold is a held item's hold (Outcome withheld): its subject, since
	// when, and whether it was woken. Zero for any other outcome.
	Hold api.Hold
	// Signalled is the attempt whose suspension a signal ended (its
	// payload's key, held.SignalKey), kept until an outcome is recorded.
	Signalled int
	UpdatedAt time.Time
}

// RetryWaits reports whether s is in flight in run with a scheduled
// retry not yet due at now (RetryAt): no delivery runs it yet.
func (s ItemState) RetryWaits(run int, now time.Time) bool {
	return s.Run == run && s.Outcome == api.OutcomeInFlight && s.Retry && s.RetryAt.After(now)
}

// Attention reports whether the item is listed as needing attention
// (failed, quarantined or held): the stores keep an attention entry for
// it.
func (p ItemState) Attention() bool {
	return p.Outcome == api.OutcomeFailed || p.Outcome == api.OutcomeQuarantined || p.Outcome.Held()
}

// Woken reports whether a held item may move on: woken by a caller
// (Hold.Woken). False for an item that is not held.
func (p ItemState) Woken() bool {
	return p.Outcome.Held() && p.Hold.Woken != ""
}

// Item is the item of state s in batch batchID as Store readers see it
// (no lease, TTL or scan position: its unit's).
func (s ItemState) Item(batchID string) Item {
	it := Item{
		Item: api.Item{
			Key:            s.Key,
			RunID:          RunID(batchID, s.Key),
			Run:            s.Run,
			Outcome:        s.Outcome,
			Attempt:        s.Attempt,
			RunAttempts:    max(0, s.RunAttempts()),
			Released:       s.Released,
			Output:         s.Output,
			OutputRef:      s.OutputRef,
			Error:          s.Error,
			Reason:         s.Reason,
			Cost:           s.Cost,
			Spent:          s.Spent,
			UpdatedAt:      s.UpdatedAt,
			ThrottledSince: s.ThrottledSince,
			Revision:       s.Revision,
		},
		BatchID:        batchID,
		SpentRun:       s.SpentRun,
		Signalled:      s.Signalled,
		RetryScheduled: s.Outcome == api.OutcomeInFlight && s.Retry,
	}
	if s.Outcome.Held() {
		h := s.Hold
		it.Hold = &h
	}
	if s.Outcome == "" || s.Attempt == 0 {
		it.RunAttempts = 0
	}
	return it
}

// Item is item j of the pack as Store readers see it: an Item with its
// scan position (PackPos) and the pack it lives in.
func (p Pack) Item(j int) Item {
	s := p.Items[j]
	it := s.Item(p.BatchID)
	it.ExpiresAt, it.Pos, it.Packed, it.PackFirst = p.ExpiresAt, PackPos(p.First, j), true, p.First
	if s.Outcome == api.OutcomeInFlight && s.Run == p.Run && !s.Retry {
		it.LeaseUntil = p.LeaseUntil
	}
	return it
}

// PackWrite is one write of a pack row (Store.WritePack).
//
// A take (Take true) reserves the pack for a holder: with Attempt 0 only
// if the pack has no row; else only if its attempt is still Attempt (the
// row the holder read) and its lease has ended before Now. It sets the
// pack's attempt to Attempt+1 and its run to Run. Any other write is
// fenced: only if the pack's attempt is Attempt. Both set the lease to
// LeaseUntil (zero: the pack is left free) and write the items named,
// leaving the others as they are; an item written with an empty Outcome
// is removed (never reserved). A lost condition is ErrConflict; a store
// that has the row as stored at hand (DynamoDB sends it back with
// ReturnValuesOnConditionCheckFailure) returns it in a *PackConflict that
// wraps ErrConflict, so that the holder plans again without a read. A
// fenced write sent again after its answer was lost is applied again, to
// the same effect.
type PackWrite struct {
	Ref        PackRef
	Take       bool
	Attempt    int
	Run        int
	LeaseUntil time.Time
	Items      []PackItemWrite
	// InFlight is how many of the pack's items are in flight once this
	// write is applied (the holder counts them in the row it holds): the
	// store keeps it on the row, so that the in-flight listing
	// (ListPackItems) reads only packs with some. −1 leaves the stored
	// count (a write of one item with its staged writes: the holder's
	// next write counts again).
	InFlight int
	// Effects are the writes one item's attempt staged, committed with
	// this write in one transaction (a fenced write of that item alone);
	// see Record.Effects.
	Effects StagedEffects
	Now     time.Time
	// Token is the take's own (Take only; see Reservation.Token): a
	// refused take whose stored row carries it is this take, applied, and
	// the write succeeds.
	Token string
}

// TakenBefore reports whether p, the row as stored that refused the take
// w, is w's own take applied: the SDK sends a write again when its answer
// was lost, also when the first try was applied, and the resend then
// fails the take's condition on the take's own row. Then p is held under
// w's token, in w's run, at the attempt w took (PackWrite.Token).
func TakenBefore(w PackWrite, p Pack) bool {
	return w.Take && w.Token != "" && p.Token == w.Token && p.Run == w.Run && p.Attempt == w.Attempt+1
}

// PackConflict is a pack write's lost condition with the pack row as it
// was stored when the condition was checked. errors.Is(err,
// api.ErrConflict) holds for it.
type PackConflict struct {
	Pack Pack
	Err  error // the store's conflict, wrapping api.ErrConflict
}

func (e *PackConflict) Error() string { return e.Err.Error() }
func (e *PackConflict) Unwrap() error { return e.Err }

// InFlight counts the items of states in flight.
func InFlight(states []ItemState) int {
	n := 0
	for _, s := range states {
		if s.Outcome == api.OutcomeInFlight {
			n++
		}
	}
	return n
}

// PackItemWrite is one item of a PackWrite: its index in the pack, its new
// state, and the outcome it replaces (Was), by which the store keeps the
// item's attention entry: put while failed or quarantined, deleted when it
// leaves them.
type PackItemWrite struct {
	Index int
	Item  ItemState
	Was   api.Outcome
}

// Pack is the batch's items per message: ItemsPerMessage, 1 when unset.
func (b Batch) Pack() int { return max(1, b.ItemsPerMessage) }

// Packed reports whether the batch's units are packs (Pack > 1): its
// items are recorded in pack rows, listed through them and merged from
// them, not from one row per item. The one place that decides it.
func (b Batch) Packed() bool { return b.Pack() > 1 }
