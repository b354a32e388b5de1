package ledger

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/source"
)

// TestMessageGroupSpreadsAPriorityBatch guards the message groups of a
// batch's messages (MessageGroup): one group, its ID, at priority 0 and
// 1; at priority p every unit kind (item, pack, fan-out chunk, track)
// lands in one of the p groups ID.0 … ID.{p−1}, the same unit always in
// the same group, 1,000 items spread over all p with none holding more
// than twice its share; a batch ID too long for the suffix is hashed
// into a valid MessageGroupId (≤ 128 characters).
func TestMessageGroupSpreadsAPriorityBatch(t *testing.T) {
	body := func(m Message) []byte {
		t.Helper()
		b, err := m.Body()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, p := range []int{0, 1} {
		if g := MessageGroup(body(Message{Kind: KindItem, BatchID: "b1", Run: 1, Key: "k", Input: []byte(`{}`), Priority: p})); g != "b1" {
			t.Errorf("priority %d: group %q, want b1", p, g)
		}
	}
	const p, n = 4, 1000
	count := map[string]int{}
	for i := range n {
		m := Message{Kind: KindItem, BatchID: "b1", Run: 1, Key: fmt.Sprintf("item-%d", i), Input: []byte(`{}`), Priority: p}
		g := MessageGroup(body(m))
		m.Requeued = 3 // sent again: the same group
		if again := MessageGroup(body(m)); again != g {
			t.Fatalf("item %d: group %q, sent again %q", i, g, again)
		}
		count[g]++
	}
	for j := range p {
		g := fmt.Sprintf("b1.%d", j)
		if c := count[g]; c == 0 || c > 2*n/p {
			t.Errorf("group %s holds %d of %d items, want 1–%d", g, c, n, 2*n/p)
		}
		delete(count, g)
	}
	if len(count) > 0 {
		t.Errorf("groups outside b1.0 … b1.%d: %v", p-1, count)
	}
	pb, err := PackMessage{Kind: KindPack, BatchID: "b1", Run: 1, ManifestKey: "m", PackFirst: 40, Priority: p,
		Items: []PackedItem{{Key: "a", Input: []byte(`1`)}}}.Body()
	if err != nil {
		t.Fatal(err)
	}
	chunk := source.Chunk{FirstIndex: 1000, Count: 1000}
	for what, b := range map[string][]byte{
		"pack":    pb,
		"fan-out": body(Message{Kind: KindFanout, BatchID: "b1", Run: 1, ManifestKey: "m", Chunk: &chunk, Priority: p}),
		"track":   body(Message{Kind: KindFanout, BatchID: "b1", Run: 1, ManifestKey: "m", Chunk: &chunk, Priority: p, Track: &Track{Index: 3, Tracks: 5, Seq: 1}}),
	} {
		if g := MessageGroup(b); !strings.HasPrefix(g, "b1.") || len(g) != 4 || g[3] < '0' || g[3] >= '0'+p {
			t.Errorf("%s message of a priority-%d batch: group %q, want b1.0 … b1.%d", what, p, g, p-1)
		}
	}
	long := strings.Repeat("x", 128)
	g := MessageGroup(body(Message{Kind: KindItem, BatchID: long, Run: 1, Key: "k", Input: []byte(`{}`), Priority: api.MaxPriority}))
	if len(g) > 128 || !strings.HasPrefix(g, "h") || !strings.Contains(g, ".") {
		t.Errorf("128-character batch ID at priority %d: group %q (%d characters), want h{hash}.{n} within 128", api.MaxPriority, g, len(g))
	}
}

// TestPackerCarriesThePriority guards Packer.SetPriority: at one item a
// message and at ten, every body carries the batch's priority above 1,
// and none at 1.
func TestPackerCarriesThePriority(t *testing.T) {
	for _, k := range []int{1, 10} {
		for _, w := range []int{1, 3} {
			var bodies [][]byte
			chunk := source.Chunk{Count: 20}
			p, err := NewPacker("b1", 1, "m", chunk, k, func(b []byte, _ []string) error {
				bodies = append(bodies, b)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			p.SetPriority(w)
			for i := range 20 {
				if err := p.Add(source.ManifestLine{Key: fmt.Sprintf("k%d", i), Input: []byte(`{}`)}, int64(i*3), 3); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Flush(); err != nil {
				t.Fatal(err)
			}
			for _, b := range bodies {
				has := strings.Contains(string(b), `"priority":3`)
				if has != (w == 3) || strings.Contains(string(b), `"priority":1`) {
					t.Fatalf("K=%d priority %d: body %s", k, w, b)
				}
			}
		}
	}
}
