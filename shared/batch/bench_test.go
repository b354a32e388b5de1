package batch

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

// jsonlSource returns n JSONL lines of about 120 bytes, keyed by "id".
func jsonlSource(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "{\"id\":\"order-%09d\",\"customer\":\"c-%06d\",\"amount_cents\":%d,\"currency\":\"EUR\",\"note\":\"settlement line\"}\n", i, i%7919, i*37%100000)
	}
	return b.Bytes()
}

// BenchmarkSubmitManifest measures submit's streaming path without I/O to
// S3: parse JSONL, check keys, detect duplicates, write and hash the
// manifest, cut chunks. Reports items/s and bytes of source per second.
func BenchmarkSubmitManifest(b *testing.B) {
	const n = 100_000
	src := jsonlSource(n)
	b.ReportAllocs()
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		mw := NewManifestWriter(io.Discard, 0, b.TempDir())
		if err := ReadJSONL(bytes.NewReader(src), "id", mw.Add); err != nil {
			b.Fatal(err)
		}
		sum, err := mw.Finish()
		if err != nil || sum.Count != n {
			b.Fatal(sum.Count, err)
		}
		mw.Close()
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
}

// BenchmarkReadManifestLines measures the fan-out's parse of one chunk.
func BenchmarkReadManifestLines(b *testing.B) {
	var manifest bytes.Buffer
	mw := NewManifestWriter(&manifest, 0, b.TempDir())
	if err := ReadJSONL(bytes.NewReader(jsonlSource(DefaultChunkItems)), "id", mw.Add); err != nil {
		b.Fatal(err)
	}
	if _, err := mw.Finish(); err != nil {
		b.Fatal(err)
	}
	mw.Close()
	b.ReportAllocs()
	b.SetBytes(int64(manifest.Len()))
	for b.Loop() {
		n := 0
		if err := ReadManifestLines(bytes.NewReader(manifest.Bytes()), 0, func(ManifestLine, int64, int64) error { n++; return nil }); err != nil || n != DefaultChunkItems {
			b.Fatal(n, err)
		}
	}
}
