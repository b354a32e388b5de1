package batch

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// KindPack is the kind of a pack message: several consecutive manifest
// items of one fan-out chunk in one items-queue message (see PackMessage).
// The item function does not take pack messages yet: Message.Validate
// refuses the kind, and nothing sends one.
const KindPack = "pack"

// MaxItemsPerMessage is the most items one pack message carries (1–100).
const MaxItemsPerMessage = 100

// PackMessage is the body of a pack message (JSON): the items of manifest
// indexes PackFirst .. PackFirst+len(Items)-1, all of the fan-out chunk
// (ChunkFirst, ChunkItems). Pack boundaries depend only on the chunk and
// the items per message K (see PackFirst), never on sizes or on which
// delivery expanded the chunk, so a chunk expanded twice yields the same
// packs with the same PackFirst: the pack's name in the ledger.
type PackMessage struct {
	Kind    string `json:"kind"` // KindPack
	BatchID string `json:"batch_id"`
	Run     int    `json:"run"`
	// ManifestKey is the manifest the items' InputRef point into (always
	// set).
	ManifestKey string       `json:"manifest_key"`
	ChunkFirst  int64        `json:"chunk_first"`
	ChunkItems  int64        `json:"chunk_items"`
	PackFirst   int64        `json:"pack_first"`
	Items       []PackedItem `json:"items"`
}

// PackedItem is one item of a pack message: its key and either its input
// inline or a pointer to its manifest line (Offset, Length; Count 1).
type PackedItem struct {
	Key      string          `json:"key"`
	Input    json.RawMessage `json:"input,omitempty"`
	InputRef *Chunk          `json:"input_ref,omitempty"`
}

// PackFirst is the manifest index of the first item of the pack that
// holds manifest index i of chunk, with k items per message: packs start
// at chunk.FirstIndex and every k items after it, so the last pack of a
// chunk may hold fewer (packs never cross chunks: each chunk has its own
// counter).
func PackFirst(chunk Chunk, k int, i int64) int64 {
	return chunk.FirstIndex + (i-chunk.FirstIndex)/int64(k)*int64(k)
}

// Packer turns the manifest lines of one fan-out chunk, in manifest order,
// into message bodies of up to K items each. With K = 1 every body is the
// item message of today (ItemMessageBody), byte for byte. With K > 1 a
// body is a PackMessage of at most MaxMessageBytes: an input larger than
// MaxInlineInputBytes travels by pointer as in an item message, and while
// the pack is still too large its largest inline input goes by pointer
// too (the first of equal ones), so the pack keeps its K items whatever
// their sizes.
type Packer struct {
	batchID     string
	run         int
	manifestKey string
	chunk       Chunk
	k           int
	emit        func(body []byte, keys []string) error
	added       int64
	lines       []packLine
}

type packLine struct {
	line           ManifestLine
	offset, length int64
}

// NewPacker returns a Packer for chunk of manifestKey that gives each
// body, with the keys of its items in order, to emit. k outside 1–
// MaxItemsPerMessage is an *InputError naming items_per_message.
func NewPacker(batchID string, run int, manifestKey string, chunk Chunk, k int, emit func(body []byte, keys []string) error) (*Packer, error) {
	if k < 1 || k > MaxItemsPerMessage {
		return nil, &InputError{Field: "items_per_message", Reason: fmt.Sprintf("%d is not within 1–%d", k, MaxItemsPerMessage)}
	}
	return &Packer{batchID: batchID, run: run, manifestKey: manifestKey, chunk: chunk, k: k, emit: emit}, nil
}

// Add takes the chunk's next manifest line (at offset, length bytes, as
// ReadManifestLines gives it) and emits a body once K lines are held.
func (p *Packer) Add(line ManifestLine, offset, length int64) error {
	if p.added >= p.chunk.Count {
		return fmt.Errorf("pack: chunk at %d holds %d items, got more", p.chunk.FirstIndex, p.chunk.Count)
	}
	p.added++
	if p.k == 1 {
		body, err := ItemMessageBody(p.batchID, p.run, p.manifestKey, p.chunk, line, offset, length)
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
	m := PackMessage{Kind: KindPack, BatchID: p.batchID, Run: p.run, ManifestKey: p.manifestKey,
		ChunkFirst: p.chunk.FirstIndex, ChunkItems: p.chunk.Count, PackFirst: first, Items: []PackedItem{}}
	env, err := encodeSafe(m)
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
		items[i] = PackedItem{Key: l.line.Key, InputRef: &Chunk{Offset: l.offset, Length: l.length, Count: 1}}
		b, err := encodeSafe(items[i])
		if err != nil {
			return nil, nil, err
		}
		ref[i] = len(b)
		if len(l.line.Input) <= MaxInlineInputBytes {
			in := PackedItem{Key: l.line.Key, Input: l.line.Input}
			b, err := encodeSafe(in)
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
		items[big] = PackedItem{Key: l.line.Key, InputRef: &Chunk{Offset: l.offset, Length: l.length, Count: 1}}
		inline[big] = 0
		size -= gain
	}
	m.Items = items
	body, err := encodeSafe(m)
	if err != nil {
		return nil, nil, err
	}
	if len(body) != size {
		return nil, nil, fmt.Errorf("pack at %d: encoded %d bytes, sized %d", first, len(body), size)
	}
	return body, keys, nil
}

// encodeSafe encodes v as Message.Body does: JSON without HTML escaping,
// SQS-safe.
func encodeSafe(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return SQSSafe(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}
