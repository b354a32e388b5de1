package stopcheck

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// TestBefore guards Reads.Before: a call of a batch whose calls are not
// known to be short reads the row; once they are known short, a row read
// less than Every ago serves the call without a read; a slow call makes
// every later call read; a failed read, or one that finds another run,
// leaves the row as last read.
func TestBefore(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	b := ledger.Batch{Batch: api.Batch{ID: "b", Run: 1}}
	var reads int
	var fail error
	stored := b
	get := func(context.Context, string) (ledger.Batch, error) {
		reads++
		return stored, fail
	}
	var r Reads
	var s Speeds
	stored.Stop = "cancel"
	if got := r.Before(ctx, b, start, start, 0, &s, get); reads != 1 || got.Stop != "cancel" {
		t.Fatalf("unknown speed: %d reads, stop %q; want the row read, its stop seen", reads, got.Stop)
	}
	s.Note("b", 10*time.Millisecond, 0)
	if got := r.Before(ctx, b, start, start.Add(500*time.Millisecond), 0, &s, get); reads != 1 || got.Stop != "cancel" {
		t.Fatalf("short calls within Every: %d reads, stop %q; want the last read to serve", reads, got.Stop)
	}
	stored.Stop = ""
	if r.Before(ctx, b, start, start.Add(Every+time.Millisecond), 0, &s, get); reads != 2 {
		t.Fatalf("short calls past Every: %d reads, want a new read", reads)
	}
	s.Note("b", Every, 0)
	if r.Before(ctx, b, start, start.Add(Every+2*time.Millisecond), 0, &s, get); reads != 3 {
		t.Fatalf("after a slow call: %d reads, want a read before every call", reads)
	}
	fail = errors.New("throttled")
	stored.Stop = "threshold"
	if got := r.Before(ctx, b, start, start.Add(2*Every), 0, &s, get); got.Stop != "" {
		t.Fatalf("a failed read gave stop %q, want the row as last read", got.Stop)
	}
	fail, stored.Run = nil, 2
	if got := r.Before(ctx, b, start, start.Add(3*Every), 0, &s, get); got.Run != 1 {
		t.Fatalf("a read of another run served the call (run %d), want the row as last read", got.Run)
	}
	var never Speeds
	never.Note("c", time.Millisecond, -1) // a negative bound: every call reads
	c := ledger.Batch{Batch: api.Batch{ID: "c", Run: 1}}
	n := reads
	r.Before(ctx, c, start, start, -1, &never, get)
	r.Before(ctx, c, start, start, -1, &never, get)
	if reads-n != 2 {
		t.Fatalf("a negative bound: %d reads for 2 calls, want one each", reads-n)
	}
}
