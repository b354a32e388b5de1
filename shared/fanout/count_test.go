package fanout

import (
	"strconv"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/ledger/fanrows"
)

// The live view's fan rows stay small at any size: a batch of up to
// 10^6 items (200 chunks over 4 partitions) keeps one row a partition
// (sort key FAN, as before rows were split); one of 10^8 items (20,000
// chunks) has 100 rows a partition, the busiest holding at most twice the
// planned 50 chunks (≈ 1 KB), where one row held 5,000 (≈ 40 KB, ≈ 40
// write units a write). A chunk goes to the same row whatever the call.
func TestFanRowsStaySmall(t *testing.T) {
	for _, c := range []struct {
		chunks, shards, rows int
	}{{0, 4, 1}, {200, 4, 1}, {201, 4, 2}, {2_000, 4, 10}, {20_000, 4, 100}, {20_000, 40, 10}} {
		if got := fanrows.Of(c.chunks, c.shards); got != c.rows {
			t.Errorf("fanrows.Of(%d, %d) = %d, want %d", c.chunks, c.shards, got, c.rows)
		}
	}
	now := time.Unix(1_800_000_000, 0)
	for _, n := range []int{200, 20_000} {
		b := ledger.Batch{Batch: api.Batch{ID: "b", Run: 1, CounterShards: 4}, Chunks: n, FanRows: fanrows.Of(n, 4)}
		// A batch frozen before fan rows (FanRows 0) counts every chunk
		// on row 0, as the release that froze it does.
		old := b
		old.FanRows = 0
		if c := CountOf(old, int64(n-1)*5000, 5000, now); c.Row != 0 {
			t.Fatalf("a batch frozen before fan rows put chunk %d in fan row %d, want row 0 (FAN)", n-1, c.Row)
		}
		rows := map[[2]int]int{}
		for i := range n {
			c := CountOf(b, int64(i)*5000, 5000, now)
			if again := CountOf(b, int64(i)*5000, 5000, now); again != c {
				t.Fatalf("chunk %d counted at %+v, then at %+v", i, c, again)
			}
			if want := ledger.Shard(strconv.Itoa(i*5000), 4); c.Lane != want {
				t.Fatalf("chunk %d in partition %d, want ledger.Shard's %d (as before rows were split)", i, c.Lane, want)
			}
			if n <= 200 && c.Row != 0 {
				t.Fatalf("a batch of %d chunks put chunk %d in fan row %d, want row 0 (FAN)", n, i, c.Row)
			}
			rows[[2]int{c.Lane, c.Row}]++
		}
		most := 0
		for _, k := range rows {
			most = max(most, k)
		}
		t.Logf("%d chunks over 4 partitions: %d fan rows, the fullest holding %d chunks", n, len(rows), most)
		if n > 200 && most > 2*fanrows.ChunksPerRow {
			t.Errorf("%d chunks: a fan row holds %d chunks, want ≤ %d", n, most, 2*fanrows.ChunksPerRow)
		}
	}
}
