package source_test

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
	"github.com/bulkrun/bulkrun/shared/source"
)

// jsonlSource returns n JSONL lines of about 120 bytes, keyed by "id".

// BenchmarkSubmitManifest measures submit's streaming path without I/O to
// S3: parse JSONL, check keys, detect duplicates, write and hash the
// manifest, cut chunks. Reports items/s and bytes of source per second.
func BenchmarkSubmitManifest(b *testing.B) {
	const n = 100_000
	src := memstore.OrdersJSONL(n)
	b.ReportAllocs()
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		mw := source.NewManifestWriter(io.Discard, 0, b.TempDir())
		if err := source.ReadJSONL(bytes.NewReader(src), "id", mw.Add); err != nil {
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
	mw := source.NewManifestWriter(&manifest, 0, b.TempDir())
	if err := source.ReadJSONL(bytes.NewReader(memstore.OrdersJSONL(source.DefaultChunkItems)), "id", mw.Add); err != nil {
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
		if err := source.ReadManifestLines(bytes.NewReader(manifest.Bytes()), 0, func(source.ManifestLine, int64, int64) error { n++; return nil }); err != nil || n != source.DefaultChunkItems {
			b.Fatal(n, err)
		}
	}
}

// BenchmarkReadGzipSource measures reading a JSONL object (100,000 lines
// of about 120 bytes) through source.SourceText — decompression, parse, key check
// — stored plain and gzip-compressed: the difference is gzip's cost.
func BenchmarkReadGzipSource(b *testing.B) {
	const n = 100_000
	src := memstore.OrdersJSONL(n)
	for _, bc := range []struct {
		name string
		body []byte
	}{{"plain", src}, {"gzip", memstore.Gzip(b, string(src))}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				text, err := source.SourceText(bytes.NewReader(bc.body))
				if err != nil {
					b.Fatal(err)
				}
				count := 0
				if err := source.ReadJSONL(text, "id", func(source.SourceItem) error { count++; return nil }); err != nil || count != n {
					b.Fatal(count, err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
		})
	}
}

// BenchmarkReadCSV measures a semicolon CSV of 100,000 rows with the
// delimiter detected.
func BenchmarkReadCSV(b *testing.B) {
	const n = 100_000
	var src bytes.Buffer
	src.WriteString("id;customer;amount_cents;currency;note\r\n")
	for i := range n {
		fmt.Fprintf(&src, "order-%09d;c-%06d;%d;EUR;\"settlement; line\"\r\n", i, i%7919, i*37%100000)
	}
	b.ReportAllocs()
	b.SetBytes(int64(src.Len()))
	for b.Loop() {
		count := 0
		if err := source.ReadCSV(bytes.NewReader(src.Bytes()), "id", func(source.SourceItem) error { count++; return nil }); err != nil || count != n {
			b.Fatal(count, err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
}
