package finalize

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
)

// TestComposeFileKeepsEveryPartAboveTheLeast guards composeFile, which
// writes a merge's results from its ranges' pieces: for pieces of every
// size around S3's 5 MiB least part (empty, a few bytes, just under and
// over 5 MiB, several parts' worth, more than one copy's most), the
// completed object is the pieces one after the other, every part but the
// last holds at least 5 MiB (the in-memory store refuses to complete
// otherwise, as S3 answers EntityTooSmall), pieces of 5 MiB or more are
// copied inside the store, and the parts never pass one copy's most.
func TestComposeFileKeepsEveryPartAboveTheLeast(t *testing.T) {
	defer func(v int64) { copyPartBytes = v }(copyPartBytes)
	copyPartBytes = 11 << 20 // a piece over 11 MiB is copied in several parts (S3's most, 5 GiB, is over twice its least too)
	const mib = 1 << 20
	sizes := []int64{0, 1, 100, 5*mib - 1, 5 * mib, 5*mib + 1, 7 * mib, 10*mib + 1, 11 * mib, 11*mib + 1, 16*mib - 1, 16 * mib, 23 * mib}
	rnd := rand.New(rand.NewPCG(1, 2))
	cases := [][]int64{{5 * mib}, {1}, {100, 100, 100}, {12 * mib, 1}, {1, 12 * mib}, {5*mib - 1, 5*mib - 1, 5*mib - 1}, {11*mib + 1}, {100, 16*mib - 1, 100}}
	for range 40 {
		var c []int64
		for range 1 + rnd.IntN(6) {
			c = append(c, sizes[rnd.IntN(len(sizes))])
		}
		cases = append(cases, c)
	}
	ctx := context.Background()
	copied := 0
	defer func() {
		if copied == 0 {
			t.Error("no piece was copied inside the store")
		}
	}()
	for i, c := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			blobs := memblobs.New()
			copies := 0
			memblobs.FailBlobs(blobs, func(op, key string) error {
				if op == "put_part" && key == "out" {
					copies++ // a PutPart or a CopyPart into the results
				}
				return nil
			})
			cb := &copyCounted{Blobs: blobs}
			f := &Finalizer{Blobs: cb, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			var want []byte
			var pieces []rangePiece
			for j, n := range c {
				body := make([]byte, n)
				for k := range body {
					body[k] = byte(j*31 + k%251)
				}
				key := fmt.Sprintf("piece-%d", j)
				if err := blobs.Put(ctx, key, "", body); err != nil {
					t.Fatal(err)
				}
				want = append(want, body...)
				if n > 0 {
					pieces = append(pieces, rangePiece{Key: key, Bytes: n})
				}
			}
			if len(pieces) == 0 {
				return
			}
			file, err := f.composeFile(ctx, "out", pieces)
			if err != nil {
				t.Fatal(err)
			}
			if file.Bytes != int64(len(want)) {
				t.Fatalf("%v: %d bytes counted, want %d", c, file.Bytes, len(want))
			}
			if err := blobs.CompleteParts(ctx, "out", file.UploadID, file.Parts, file.Bytes); err != nil {
				t.Fatalf("%v: %v", c, err)
			}
			got, _ := blobs.Object("out")
			if !bytes.Equal(got, want) {
				t.Fatalf("%v: %d bytes composed, not the pieces' %d", c, len(got), len(want))
			}
			if copies != file.Parts {
				t.Fatalf("%v: %d parts written, %d counted", c, copies, file.Parts)
			}
			if n := cb.copies.Load(); i == 6 && n != 2 { // one piece of 11 MiB + 1
				t.Fatalf("%v: %d copies, want 2", c, n)
			}
			copied += int(cb.copies.Load())
		})
	}
}

// copyCounted counts CopyPart calls.
type copyCounted struct {
	*memblobs.Blobs
	copies atomic.Int64
}

func (c *copyCounted) CopyPart(ctx context.Context, key, id string, n int, src string, offset, length int64) error {
	c.copies.Add(1)
	return c.Blobs.CopyPart(ctx, key, id, n, src, offset, length)
}
