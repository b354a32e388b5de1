package thumbnail_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/internal/pipeline/thumbnail"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// png16 returns a real w×h 16-bit RGBA PNG of transparent black, written
// row by row (never held decoded): 7000×7000 is ≈ 0.4 MB on disk and
// 392 MB decoded.
func png16(t testing.TB, w, h int) []byte {
	t.Helper()
	var out bytes.Buffer
	out.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, data []byte) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(data)))
		out.Write(n[:])
		c := crc32.NewIEEE()
		c.Write([]byte(typ))
		c.Write(data)
		out.WriteString(typ)
		out.Write(data)
		binary.BigEndian.PutUint32(n[:], c.Sum32())
		out.Write(n[:])
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = 16, 6 // bit depth, colour type RGBA
	chunk("IHDR", ihdr)
	var idat bytes.Buffer
	z, err := zlib.NewWriterLevel(&idat, zlib.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	row := make([]byte, 1+w*8) // filter byte 0, then the pixels
	for range h {
		if _, err := z.Write(row); err != nil {
			t.Fatal(err)
		}
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	chunk("IDAT", idat.Bytes())
	chunk("IEND", nil)
	return out.Bytes()
}

// TestMemoryBudget guards the product line "decoding is bounded by a
// budget derived from the function's memory; an image that alone exceeds
// it fails permanently with 'image too large for the configured memory'"
// (an item function of 512 MB decoding a 7000×7000 16-bit PNG would need
// 392 MB for that image alone, and ten at once ≈ 4 GB).
func TestMemoryBudget(t *testing.T) {
	big := png16(t, 7000, 7000)
	if len(big) > 2<<20 {
		t.Fatalf("the generated PNG is %d bytes; want a small file that decodes large", len(big))
	}
	small := encodePNG(t, gradient(640, 480))
	src := &memSource{objects: map[string][]byte{"photos/big.png": big, "photos/small.png": small}}
	budget512 := int64(512<<20) * thumbnail.BudgetPercent / 100 // a 512 MB function

	tests := []struct {
		name    string
		budget  int64
		key     string
		wantErr error // nil: a thumbnail
		wantMsg string
	}{
		{name: "7000x7000 16-bit PNG on a 512 MB function", budget: budget512, key: "big.png", wantErr: thumbnail.ErrOverBudget,
			wantMsg: "thumbnail: big.png: image too large for the configured memory: 7000x7000 png decodes to 428147200 bytes, over the budget of 268435456 bytes (50% of the function's memory)"},
		{name: "small image on a 512 MB function", budget: budget512, key: "small.png"},
		{name: "small image over a tiny budget", budget: 1 << 20, key: "small.png", wantErr: thumbnail.ErrOverBudget},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := thumbnail.NewBudgeted(src, tt.budget)
			out := &memOutputs{}
			_, err := p.Run(context.Background(), pipeline.Request{Key: tt.key, Input: input(tt.key), Outputs: out})
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || pipeline.Classify(err) != pipeline.ClassPermanent {
				t.Fatalf("Run: %v (class %v), want permanent %v", err, pipeline.Classify(err), tt.wantErr)
			}
			if tt.wantMsg != "" && err.Error() != tt.wantMsg {
				t.Fatalf("Run:\n got %s\nwant %s", err, tt.wantMsg)
			}
			if len(out.objects) != 0 {
				t.Fatalf("an output was written: %v", out.objects)
			}
		})
	}
}

// TestBudgetFromEnv guards the product line "the decode budget is derived
// from the function's memory (AWS_LAMBDA_FUNCTION_MEMORY_SIZE)".
func TestBudgetFromEnv(t *testing.T) {
	tests := []struct {
		env  string
		want int64
	}{
		{"512", 256 << 20},
		{"10240", 5120 << 20},
		{"", thumbnail.DefaultBudgetBytes},
		{"-1", thumbnail.DefaultBudgetBytes},
		{"lots", thumbnail.DefaultBudgetBytes},
	}
	for _, tt := range tests {
		t.Run("memory="+strings.TrimSpace(tt.env), func(t *testing.T) {
			t.Setenv(thumbnail.EnvFunctionMemory, tt.env)
			if got := thumbnail.BudgetFromEnv(); got != tt.want {
				t.Fatalf("BudgetFromEnv() = %d, want %d", got, tt.want)
			}
		})
	}
}
