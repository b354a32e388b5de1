package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/source"
)

// FormatVersion is the version of the formats this code writes: every
// items-queue message (its "v" field) and every ledger row (its "fv"
// attribute: item, pack, attention, batch, counter and count-mark rows).
// A message or row without one is of version 0, the formats of the
// release before versions, which this code reads as they are (the shapes
// of version 1 are version 0's plus the version). Version 2 counts a run's
// items in counter lanes (the batch row's counter_lanes, lane rows
// COUNT#{id}#{run}#{lane}, LANE) instead of per fan-out chunk (batches of
// versions 0 and 1, without counter_lanes, keep counting per chunk until
// their runs finish), and a pack item's attention row carries no index
// keys (apk, ask): listings read the ATTN partitions. Version 2 also adds
// corrections: the batch row's revisions and run_revision, an item row's
// rev, a pack entry's rv, and a correction run manifest's i and c (a
// release of version 1 must not run a correction run, whose items it
// would take for a resume's). Version 3 keeps the error text of a pack
// item that turned failed or quarantined on its attention row alone: its
// pack entry has no e, and readers take the text from the attention row
// (a release of version 2 would give such items no text). Version 4 cuts
// a max_concurrency run into slices of up to 100 units (100 × K items,
// pace.SliceSize), its tracks carrying the size (Track.Size, "sz"): a
// release of version 3 would number such a run's slices by 100 items and
// run items twice or never; version 3's tracks, with no size, are cut by
// its rule (pace.SliceSizeItems). Code meeting a version
// above its own leaves the message on the queue and refuses the row
// (docs/operations.md, "Upgrading with batches in flight"); golden files
// pin every version's shapes (integration/testbed/formats/testdata).
const FormatVersion = 4

// NewerFormatError is a message or row of a format version above
// FormatVersion: written by a newer release. The message is left on the
// queue (not acknowledged) for code that reads it.
type NewerFormatError struct {
	What    string // "message", "item row", ...
	Version int
}

func (e *NewerFormatError) Error() string {
	return fmt.Sprintf("%s of format version %d, newer than this code's %d: deploy the release that wrote it", e.What, e.Version, FormatVersion)
}

// CheckFormat returns a *NewerFormatError for a version above
// FormatVersion.
func CheckFormat(what string, version int) error {
	if version > FormatVersion {
		return &NewerFormatError{What: what, Version: version}
	}
	return nil
}

// MessageKind is the kind of an items-queue message, its "kind" field.
type MessageKind string

// The message kinds.
const (
	// KindItem runs one item (Message): its ledger unit is the item row.
	KindItem MessageKind = "item"
	// KindFanout expands one manifest chunk (Message.Chunk) into item or
	// pack messages.
	KindFanout MessageKind = "fanout"
	// KindPack runs several consecutive manifest items of one fan-out
	// chunk (PackMessage): its ledger unit is the pack row.
	KindPack MessageKind = "pack"
)

// MaxInlineInputBytes is the largest item input carried inside an item
// message. A larger input travels as a pointer to its manifest line
// (InputRef), never truncated. SQS allows 1 MiB per message (256 KiB before
// August 2025 and in some emulators); 192 KiB keeps a message with its
// envelope under the older limit.
const MaxInlineInputBytes = 192 << 10

// Message is the body of an items-queue message (JSON).
type Message struct {
	// Format is the message's format version ("v"): FormatVersion when
	// this code writes it (Body sets it), 0 on messages of the release
	// before versions.
	Format      int             `json:"v"`
	Kind        MessageKind     `json:"kind"`
	BatchID     string          `json:"batch_id"`
	Run         int             `json:"run"`
	Key         string          `json:"key,omitempty"`
	Input       json.RawMessage `json:"input,omitempty"`
	InputRef    *source.Chunk   `json:"input_ref,omitempty"` // the item's manifest line: Offset, Length
	ManifestKey string          `json:"manifest_key,omitempty"`
	Chunk       *source.Chunk   `json:"chunk,omitempty"`
	// ChunkFirst and ChunkItems name the fan-out chunk an item message
	// belongs to (its Chunk.FirstIndex and Chunk.Count): the item's
	// terminal outcome is counted on that chunk's counter
	// (Store.CountChunk). ChunkItems 0: sent without one (counted by the
	// finalize tick only).
	ChunkFirst int64 `json:"chunk_first,omitempty"`
	ChunkItems int64 `json:"chunk_items,omitempty"`
	// Requeued counts how often the item worker sent this message again
	// because an AWS service was unavailable (throttling, 5xx): it grows
	// the next delay. Not an attempt.
	Requeued int `json:"requeued,omitempty"`
	// SlotWaits counts how often the item worker sent this message again
	// because every max_concurrency slot it tried was taken, or to wait
	// for its batch's rate (RateAtUs). Not an attempt. Requeued and
	// SlotWaits are each bounded by MaxResends.
	SlotWaits int `json:"slot_waits,omitempty"`
	// RateAtUs is the start (epoch microseconds) of the rate lease the
	// message carries: booked by the delivery that sent it on to wait for
	// it (its batch has a rate, shared/pace), so that its next delivery
	// runs at that start instead of leasing again (unless the lease is
	// stale, pace.LeaseGrace). 0: none.
	RateAtUs int64 `json:"rate_at_us,omitempty"`
	// RatePos is, for a lease of a batch with no rate (an adaptive
	// lease, docs/adr/0036), the lease's first position in its key's line
	// (pace.Adapt.Booked): when the message comes back, its start is
	// worked out again from the key's row as it is then (pace.Adapt.Due),
	// so that a cut made while it waited delays it. 0: none (RateAtUs is
	// then a rate's lease).
	RatePos float64 `json:"rate_pos,omitempty"`
	// RateLeadMs is how long before RateAtUs the message was sent to
	// come back (pacer.Lead), so that its next delivery learns how late
	// the queue hands messages over (pacer.Arrived). 0: none, or
	// pace.LeaseSleep/2.
	RateLeadMs int64 `json:"rate_lead_ms,omitempty"`
	// TokensAtUs is the start (epoch microseconds) of the token booking
	// the message carries, TokensBookedUs the time it booked at its key's
	// budget and TokensDriftUs the key's drift when it was booked
	// (pace.TokenGrant.Drift), so that its next delivery runs at that
	// start moved by the debts settled since, and settles against what it
	// booked (docs/adr/0035). 0: none.
	TokensAtUs     int64 `json:"tokens_at_us,omitempty"`
	TokensBookedUs int64 `json:"tokens_booked_us,omitempty"`
	TokensDriftUs  int64 `json:"tokens_drift_us,omitempty"`
	// Priority is the batch's priority (api.Plan.Priority) when above 1:
	// the message is sent in one of that many message groups
	// (MessageGroup). 0: 1.
	Priority int `json:"priority,omitempty"`
	// Sample marks a unit of its batch's sample (api.Plan.Sample): it runs
	// while the batch holds the items outside the sample
	// (api.Approval.Holds). Set by the fan-out (Packer.SetSample).
	Sample bool `json:"sample,omitempty"`
	// Track makes a fan-out message a track of a batch with
	// max_concurrency (see Track): its units run in place, one at a time.
	Track *Track `json:"track,omitempty"`
	// TrackUnit: the message's unit was made by a track of its run (see
	// TrackUnit); nil otherwise.
	TrackUnit *TrackUnit `json:"track_unit,omitempty"`
	// HopAtMs is, on a timer hop of a unit a track made (its suspended
	// items' next wake, epoch milliseconds), when the hop is due: one
	// delivered before it only sends the next hop (0: not a hop).
	HopAtMs int64 `json:"hop_at_ms,omitempty"`
	// Sent is, on a fan-out message sent again because the queue did not
	// take all of its chunk's messages, which of them the queue has
	// already ("sent"): the fan-out sends only the others. nil: none (a
	// release that does not know the field sends them all, and the items'
	// reservations absorb the copies).
	Sent *SentMark `json:"sent,omitempty"`
}

// SentMark records which of a fan-out chunk's item or pack messages, in
// the order the fan-out makes them (0, 1, …: message n starts at item
// n × items per message of the chunk), are on the queue: every one before
// Upto ("upto") but those listed in Unsent ("unsent", ascending).
type SentMark struct {
	Upto   int64   `json:"upto"`
	Unsent []int64 `json:"unsent,omitempty"`
}

// Has reports whether message n of the chunk is on the queue already.
func (s *SentMark) Has(n int64) bool {
	if s == nil || n >= s.Upto {
		return false
	}
	_, found := slices.BinarySearch(s.Unsent, n)
	return !found
}

// After is the mark once a fan-out that made messages 0 … made−1 under s
// (s may be nil) failed to send those of unsent (their numbers): the ones
// it had made are on the queue but unsent, and s's unsent ones it had not
// reached yet are still to send.
func (s *SentMark) After(made int64, unsent []int64) *SentMark {
	next := &SentMark{Upto: made}
	if s != nil {
		next.Upto = max(s.Upto, made)
		for _, n := range s.Unsent {
			if n >= made {
				unsent = append(unsent, n)
			}
		}
	}
	slices.Sort(unsent)
	next.Unsent = slices.Compact(unsent)
	return next
}

// MaxResends bounds the chain of one message the item worker sends again
// to its own queue (Requeued, SlotWaits): the item function may run in a
// recursive loop with its queue (the stack sets its RecursiveLoop to
// Allow, since Lambda's own detection would stop an item after about 16
// waits), and this is the loop's own bound. 10,000 sends are ≈ 7 hours of
// slot waits (1–4 s each) or ≈ 2 weeks of AWS unavailability (back-off up
// to 2 minutes); past it the message is no longer sent again but delayed
// on the queue (ChangeMessageVisibility), so each further wait is a
// receive and the queue's redrive ends the chain in the dead-letter queue,
// where the item is recorded failed (dead-lettered).
const MaxResends = 10000

// Validate reports a malformed message (a poison message is acknowledged
// and logged, never retried forever).
func (m Message) Validate() error {
	switch {
	case !api.ValidBatchID(m.BatchID):
		return fmt.Errorf("message: bad batch_id %q", m.BatchID)
	case m.Run < 1:
		return fmt.Errorf("message: bad run %d", m.Run)
	}
	switch m.Kind {
	case KindItem:
		if r := api.CheckKey(m.Key); r != "" {
			return fmt.Errorf("message: %s", r)
		}
		if m.Input == nil && m.InputRef == nil {
			return fmt.Errorf("message: item %q has neither input nor input_ref", m.Key)
		}
		if m.InputRef != nil && m.ManifestKey == "" {
			return fmt.Errorf("message: item %q has input_ref without manifest_key", m.Key)
		}
	case KindFanout:
		if m.Chunk == nil || m.ManifestKey == "" {
			return fmt.Errorf("message: fanout without chunk or manifest_key")
		}
		if m.Track != nil {
			if err := m.Track.Validate(); err != nil {
				return fmt.Errorf("message: %w", err)
			}
		}
		if s := m.Sent; s != nil && (s.Upto < 0 || !slices.IsSorted(s.Unsent) || len(s.Unsent) > 0 && (s.Unsent[0] < 0 || s.Unsent[len(s.Unsent)-1] >= s.Upto)) {
			return fmt.Errorf("message: fanout's sent mark %+v: want unsent ascending within [0, upto)", *s)
		}
	default:
		return fmt.Errorf("message: unknown kind %q", m.Kind)
	}
	return nil
}

// MaxMessageBytes is the largest message body bulkrun sends: under SQS's
// older 256 KiB limit with room to spare.
const MaxMessageBytes = 240 << 10

// ItemMessageBody encodes the message of one manifest line (JSON without
// HTML escaping, which would grow "<", ">" and "&" sixfold): the input
// inline when the body fits MaxMessageBytes, else a pointer to the line.
func ItemMessageBody(batchID string, run int, manifestKey string, chunk source.Chunk, line source.ManifestLine, offset, length int64) ([]byte, error) {
	return itemMessageBody(ItemMessage(batchID, run, manifestKey, chunk, line, offset, length), offset, length, manifestKey)
}

// itemMessageBody is ItemMessageBody of m, the message ItemMessage made
// (with its Priority set).
func itemMessageBody(m Message, offset, length int64, manifestKey string) ([]byte, error) {
	body, err := m.Body()
	if err != nil || len(body) <= MaxMessageBytes || m.InputRef != nil {
		return body, err
	}
	m.Input, m.InputRef, m.ManifestKey = nil, &source.Chunk{Offset: offset, Length: length, Count: 1}, manifestKey
	return m.Body()
}

// Body encodes the message as JSON without HTML escaping, with every
// character SQS refuses in a message written as a JSON \uXXXX escape (see
// SQSSafe): the body always travels, and decodes to the same message.
func (m Message) Body() ([]byte, error) {
	m.Format = FormatVersion
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return SQSSafe(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

// MessageGroup is the message group an items-queue message is sent in
// (SQS's MessageGroupId): its batch's ID, read from the body's
// "batch_id"; "" when the body has none or is not a JSON object (the
// message is then sent with no group). On a standard queue a message
// group makes SQS's fair queues treat each batch as a tenant ("In
// standard queues, using MessageGroupId enables fair queues"; "Amazon
// SQS fair queues", SQS developer guide): when one batch holds a
// disproportionate share of the messages in flight, the other batches'
// messages are delivered first, so that a small batch does not wait
// behind a large one's backlog. Messages of one group are still taken
// in parallel, in no order (unlike a FIFO queue's). A batch ID, 1–128
// of [A-Za-z0-9_-] (api.ValidBatchID), is a valid MessageGroupId (1–128
// alphanumeric and punctuation characters; SQS API reference,
// "SendMessage").
//
// A message of a batch of priority p > 1 (its "priority",
// api.SubmitRequest.Priority) is sent in one of p groups, the batch's
// ID and ".0" … ".{p−1}", picked by its unit (the item's key, the
// pack's first index, the fan-out chunk's first index, the track's
// number), so that the same unit is always sent in the same group and
// the batch's units spread evenly: the batch counts as p tenants, and
// gets about p shares of the consumers while the queue is backlogged
// (docs/adr/0037). A batch ID too long for the suffix is replaced by
// "h" and its 64-bit FNV-1a hash in hex.
func MessageGroup(body []byte) string {
	var m struct {
		BatchID   string        `json:"batch_id"`
		Priority  int           `json:"priority"`
		Key       string        `json:"key"`
		PackFirst int64         `json:"pack_first"`
		Chunk     *source.Chunk `json:"chunk"`
		Track     *Track        `json:"track"`
	}
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	if m.Priority <= 1 || m.BatchID == "" {
		return m.BatchID
	}
	h := fnv.New64a()
	switch {
	case m.Key != "":
		h.Write([]byte("k" + m.Key))
	case m.Track != nil:
		h.Write([]byte("t" + strconv.Itoa(m.Track.Index)))
	case m.Chunk != nil:
		h.Write([]byte("c" + strconv.FormatInt(m.Chunk.FirstIndex, 10)))
	default:
		h.Write([]byte("p" + strconv.FormatInt(m.PackFirst, 10)))
	}
	suffix := "." + strconv.FormatUint(h.Sum64()%uint64(min(m.Priority, api.MaxPriority)), 10)
	id := m.BatchID
	if len(id)+len(suffix) > 128 {
		b := fnv.New64a()
		b.Write([]byte(id))
		id = "h" + strconv.FormatUint(b.Sum64(), 16)
	}
	return id + suffix
}

// SQSAllowed reports whether SQS accepts r in a message body. The SQS API
// reference, "SendMessage" (MessageBody;
// https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html),
// allows only #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD |
// #x10000 to #x10FFFF and rejects the rest: a batch entry holding one fails
// with SenderFault. Valid UTF-8 JSON can still hold U+FFFE and U+FFFF, raw
// in a string (or decoded from "\uffff" and encoded again).
func SQSAllowed(r rune) bool {
	switch {
	case r == 0x9 || r == 0xA || r == 0xD:
		return true
	case r >= 0x20 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD, r >= 0x10000 && r <= 0x10FFFF:
		return true
	}
	return false
}

// SQSSafe returns the JSON text js with every character outside SQS's
// allowed set (SQSAllowed) written as a \uXXXX escape, and invalid UTF-8
// bytes as \ufffd. In valid JSON such characters can only stand inside
// strings (the structure is ASCII), where the escape means the same
// character, so the result decodes to the same value. js is returned as
// is when nothing needs escaping.
func SQSSafe(js []byte) []byte {
	clean := true
	for i := 0; i < len(js); {
		r, n := utf8.DecodeRune(js[i:])
		if (r == utf8.RuneError && n == 1) || !SQSAllowed(r) {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return js
	}
	out := make([]byte, 0, len(js)+16)
	for i := 0; i < len(js); {
		r, n := utf8.DecodeRune(js[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = append(out, `\ufffd`...)
		case !SQSAllowed(r): // only BMP runes are refused: four hex digits
			const hexDigits = "0123456789abcdef"
			out = append(out, '\\', 'u', hexDigits[r>>12&0xF], hexDigits[r>>8&0xF], hexDigits[r>>4&0xF], hexDigits[r&0xF])
		default:
			out = append(out, js[i:i+n]...)
		}
		i += n
	}
	return out
}

// ItemMessage builds the message for one manifest line: the input inline
// when it is at most MaxInlineInputBytes, else a pointer to the line
// (offset, length) in manifestKey; the line of a bad row
// (ManifestLine.Invalid) always by pointer, so that the item function
// reads the reason with it and never runs it. ItemMessageBody also checks the encoded
// size. chunk is the fan-out chunk the line belongs to.
func ItemMessage(batchID string, run int, manifestKey string, chunk source.Chunk, line source.ManifestLine, offset, length int64) Message {
	m := Message{Kind: KindItem, BatchID: batchID, Run: run, Key: line.Key, ChunkFirst: chunk.FirstIndex, ChunkItems: chunk.Count}
	if len(line.Input) <= MaxInlineInputBytes && line.Invalid == "" {
		m.Input = line.Input
	} else {
		m.InputRef = &source.Chunk{Offset: offset, Length: length, Count: 1}
		m.ManifestKey = manifestKey
	}
	return m
}
