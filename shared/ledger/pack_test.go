package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/source"
)

// packLines makes n manifest lines with inputs of size(i) bytes (a JSON
// string), and their offsets and lengths as a manifest would hold them.
func packLines(n int, size func(i int) int) ([]source.ManifestLine, []int64, []int64) {
	lines := make([]source.ManifestLine, n)
	offs, lens := make([]int64, n), make([]int64, n)
	var off int64
	for i := range lines {
		in, _ := json.Marshal(strings.Repeat("x", size(i)))
		lines[i] = source.ManifestLine{Key: fmt.Sprintf("item-%010d", i), Input: in}
		b, _ := json.Marshal(lines[i])
		offs[i], lens[i] = off, int64(len(b)+1)
		off += lens[i]
	}
	return lines, offs, lens
}

func packAll(t *testing.T, chunk source.Chunk, k int, lines []source.ManifestLine, offs, lens []int64) ([][]byte, [][]string) {
	t.Helper()
	var bodies [][]byte
	var keys [][]string
	p, err := NewPacker("b1", 2, "batches/b1/manifests/m.jsonl", chunk, k, func(body []byte, ks []string) error {
		bodies, keys = append(bodies, body), append(keys, ks)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range lines {
		if err := p.Add(lines[i], offs[i], lens[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	return bodies, keys
}

// TestPackerKeepsItemMessagesAtOne guards the product line "with one item
// per message nothing changes": K = 1 gives, byte for byte, the item
// messages the fan-out sends today.
func TestPackerKeepsItemMessagesAtOne(t *testing.T) {
	lines, offs, lens := packLines(7, func(i int) int { return []int{10, 1024, MaxInlineInputBytes + 1, 0, 5, 300 << 10, 7}[i] })
	chunk := source.Chunk{FirstIndex: 5000, Count: 7}
	bodies, keys := packAll(t, chunk, 1, lines, offs, lens)
	if len(bodies) != len(lines) {
		t.Fatalf("%d bodies, want %d", len(bodies), len(lines))
	}
	for i := range lines {
		want, err := ItemMessageBody("b1", 2, "batches/b1/manifests/m.jsonl", chunk, lines[i], offs[i], lens[i])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(bodies[i], want) || len(keys[i]) != 1 || keys[i][0] != lines[i].Key {
			t.Fatalf("body %d differs from the item message:\n got %.200s\nwant %.200s", i, bodies[i], want)
		}
	}
}

// TestPackerPacksWithinMessageLimit guards the product line "the fan-out
// packs K consecutive manifest items into one message, within the message
// size limit; items too large travel by pointer": every body is at most
// MaxMessageBytes, holds its K consecutive items in manifest order (the
// chunk's last pack the rest), names its first index, and each item's
// input decodes to the manifest's or points at its manifest line.
func TestPackerPacksWithinMessageLimit(t *testing.T) {
	tests := []struct {
		name      string
		k, n      int
		size      func(i int) int
		wantPacks []int // items per pack
		wantRefs  int   // items by pointer, in all
	}{
		{"K=10, 1 KB inputs, short last pack", 10, 25, func(int) int { return 1024 }, []int{10, 10, 5}, 0},
		{"K=100, 1 KB inputs, all inline", 100, 100, func(int) int { return 1024 }, []int{100}, 0},
		{"K=10, an input over the inline limit", 10, 10, func(i int) int {
			if i == 3 {
				return MaxInlineInputBytes + 1
			}
			return 100
		}, []int{10}, 1},
		{"K=100, 10 KB inputs: the pack is too large, some go by pointer", 100, 100, func(int) int { return 10 << 10 }, []int{100}, 77},
		{"K=10, two 150 KB inputs: the larger goes by pointer", 10, 10, func(i int) int {
			switch i {
			case 2:
				return 150 << 10
			case 7:
				return 151 << 10
			}
			return 10
		}, []int{10}, 1},
		{"K=3, one item", 3, 1, func(int) int { return 1 }, []int{1}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines, offs, lens := packLines(tt.n, tt.size)
			chunk := source.Chunk{FirstIndex: 5000, Count: int64(tt.n)}
			bodies, keys := packAll(t, chunk, tt.k, lines, offs, lens)
			if len(bodies) != len(tt.wantPacks) {
				t.Fatalf("%d packs, want %d", len(bodies), len(tt.wantPacks))
			}
			next, refs := 0, 0
			for p, body := range bodies {
				if len(body) > MaxMessageBytes {
					t.Fatalf("pack %d is %d bytes, more than %d", p, len(body), MaxMessageBytes)
				}
				var m PackMessage
				if err := json.Unmarshal(body, &m); err != nil {
					t.Fatal(err)
				}
				if m.Kind != KindPack || m.BatchID != "b1" || m.Run != 2 || m.ChunkFirst != 5000 || m.ChunkItems != int64(tt.n) {
					t.Fatalf("pack %d envelope %+v", p, m)
				}
				if m.PackFirst != 5000+int64(next) || m.PackFirst != PackFirst(chunk, tt.k, 5000+int64(next)) {
					t.Fatalf("pack %d pack_first %d, want %d", p, m.PackFirst, 5000+next)
				}
				if len(m.Items) != tt.wantPacks[p] || len(keys[p]) != len(m.Items) {
					t.Fatalf("pack %d holds %d items (%d keys), want %d", p, len(m.Items), len(keys[p]), tt.wantPacks[p])
				}
				for j, it := range m.Items {
					i := next + j
					if it.Key != lines[i].Key || keys[p][j] != lines[i].Key {
						t.Fatalf("pack %d item %d key %q, want %q", p, j, it.Key, lines[i].Key)
					}
					switch {
					case it.InputRef != nil:
						refs++
						if it.Input != nil || *it.InputRef != (source.Chunk{Offset: offs[i], Length: lens[i], Count: 1}) {
							t.Fatalf("item %d pointer %+v, want offset %d length %d", i, it.InputRef, offs[i], lens[i])
						}
					case !bytes.Equal(it.Input, lines[i].Input):
						t.Fatalf("item %d input differs", i)
					}
				}
				next += len(m.Items)
			}
			if refs != tt.wantRefs {
				t.Fatalf("%d items by pointer, want %d", refs, tt.wantRefs)
			}
		})
	}
}

// TestPackerBoundariesAreFixed guards the product line "a chunk expanded
// twice sends the same packs" (a pack is named by its first index in the
// ledger): boundaries depend on the chunk and K only, not on sizes.
func TestPackerBoundariesAreFixed(t *testing.T) {
	chunk := source.Chunk{FirstIndex: 10000, Count: 23}
	small, so, sl := packLines(23, func(int) int { return 1 })
	large, lo, ll := packLines(23, func(i int) int { return (i % 5) * 60 << 10 })
	a, _ := packAll(t, chunk, 10, small, so, sl)
	b, _ := packAll(t, chunk, 10, large, lo, ll)
	if len(a) != 3 || len(b) != 3 {
		t.Fatalf("%d and %d packs, want 3", len(a), len(b))
	}
	for i := range a {
		var ma, mb PackMessage
		_ = json.Unmarshal(a[i], &ma)
		_ = json.Unmarshal(b[i], &mb)
		if ma.PackFirst != mb.PackFirst || len(ma.Items) != len(mb.Items) {
			t.Fatalf("pack %d: first %d/%d, %d/%d items", i, ma.PackFirst, mb.PackFirst, len(ma.Items), len(mb.Items))
		}
	}
	for _, tt := range []struct {
		i    int64
		k    int
		want int64
	}{{10000, 10, 10000}, {10009, 10, 10000}, {10010, 10, 10010}, {10022, 10, 10020}, {10022, 1, 10022}, {10022, 100, 10000}} {
		if got := PackFirst(chunk, tt.k, tt.i); got != tt.want {
			t.Errorf("PackFirst(%d, K=%d) = %d, want %d", tt.i, tt.k, got, tt.want)
		}
	}
}

// TestPackerRefusesBadInput guards the product line "bad input gets a
// clear error naming the field": K outside 1–100 names items_per_message,
// and a chunk fed more lines than it counts is an error.
func TestPackerRefusesBadInput(t *testing.T) {
	for _, k := range []int{0, -1, MaxItemsPerMessage + 1} {
		_, err := NewPacker("b1", 1, "m", source.Chunk{Count: 1}, k, func([]byte, []string) error { return nil })
		var ie *api.InputError
		if !errors.As(err, &ie) || ie.Field != "items_per_message" {
			t.Fatalf("K=%d: %v, want an InputError naming items_per_message", k, err)
		}
	}
	p, err := NewPacker("b1", 1, "m", source.Chunk{Count: 1}, 10, func([]byte, []string) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	l := source.ManifestLine{Key: "a", Input: json.RawMessage(`1`)}
	if err := p.Add(l, 0, 10); err != nil {
		t.Fatal(err)
	}
	if err := p.Add(l, 10, 10); err == nil {
		t.Fatal("a second line in a chunk of one: no error")
	}
}
