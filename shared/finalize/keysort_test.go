package finalize

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// TestKeySortRunsMergeAcrossCalls guards the external sort of a pack
// batch's results: lines of every size (some longer than a ranged read)
// sorted into runs of random sizes, merged in ranged reads of 7 bytes by
// calls that each stop after a few lines and hand on only the
// checkpoint's runs and offsets, come out in key order, each once, with
// their outcomes.
func TestKeySortRunsMergeAcrossCalls(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type rec struct {
		key  string
		o    api.Outcome
		line string
	}
	var recs []rec
	for i := range 500 {
		key := fmt.Sprintf("k%x", rng.Uint64()%(1<<40))
		if i%50 == 0 {
			key = strings.Repeat("é", 130) + key // a key of more than 128 bytes: two-byte length
		}
		line := fmt.Sprintf(`{"key":%q,"pad":%q}`+"\n", key, strings.Repeat("x", rng.IntN(300)))
		recs = append(recs, rec{key, api.TerminalOutcomes()[rng.IntN(4)], line})
	}
	blobs := memblobs.New()
	ctx := context.Background()
	cp := newCheckpoint(0, ledger.SystemClock{}.Now())
	s := &keySorter{limit: 1 << 20}
	for i, r := range recs {
		if err := s.add(r.key, r.o, []byte(r.line)); err != nil {
			t.Fatal(err)
		}
		if s.size() > 2000+rng.IntN(6000) || i == len(recs)-1 {
			key := sortRunKey("b", 1, 1, "t", len(cp.Runs))
			n, err := s.writeRun(ctx, blobs, key)
			if err != nil {
				t.Fatal(err)
			}
			cp.Runs = append(cp.Runs, sortRun{Key: key, Bytes: n})
		}
	}
	if len(cp.Runs) < 10 {
		t.Fatalf("%d runs, want many", len(cp.Runs))
	}
	var got []rec
	for calls := 1; ; calls++ {
		if calls > len(recs) {
			t.Fatal("the merge does not end")
		}
		n := 0
		done, err := mergeRuns(ctx, blobs, cp.Runs, 7, func(_ []byte, o api.Outcome, line []byte) error {
			key := strings.TrimSuffix(strings.TrimPrefix(strings.SplitN(string(line), `","pad"`, 2)[0], `{"key":"`), `"`)
			got = append(got, rec{key, o, string(line)})
			return nil
		}, func() bool {
			n++
			return n > 1+calls%37
		})
		if err != nil {
			t.Fatal(err)
		}
		if done {
			break
		}
	}
	want := slices.Clone(recs)
	slices.SortFunc(want, func(a, b rec) int { return ledger.KeyOrder(a.key, b.key) })
	if len(got) != len(want) {
		t.Fatalf("%d lines merged, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].o != want[i].o || got[i].line != want[i].line {
			t.Fatalf("line %d: %s %q, want %s %q", i, got[i].o, got[i].line, want[i].o, want[i].line)
		}
	}
}

// TestKeySortRefusesAMalformedRun: a run cut short is an error, not a
// silently shorter results file.
func TestKeySortRefusesAMalformedRun(t *testing.T) {
	s := &keySorter{limit: 1 << 20}
	_ = s.add("a", api.OutcomeSucceeded, []byte("{\"key\":\"a\"}\n"))
	_ = s.add("b", api.OutcomeFailed, []byte("{\"key\":\"b\"}\n"))
	blobs := memblobs.New()
	ctx := context.Background()
	n, _ := s.writeRun(ctx, blobs, "whole")
	body, _ := blobs.Get(ctx, "whole")
	if int64(len(body)) != n {
		t.Fatalf("run of %d bytes, written %d", n, len(body))
	}
	_ = blobs.Put(ctx, "run", "", body[:len(body)-3])
	cp := &checkpoint{Runs: []sortRun{{Key: "run", Bytes: int64(len(body) - 3)}}}
	_, err := mergeRuns(ctx, blobs, cp.Runs, 64, func([]byte, api.Outcome, []byte) error { return nil }, func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("merge of a cut run: %v, want malformed", err)
	}
}
