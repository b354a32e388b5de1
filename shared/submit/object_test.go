package submit

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
	"github.com/bulkrun/bulkrun/shared/ledger"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/source"
)

// collected gathers the items a read emits.
type collected struct{ items []source.SourceItem }

func (c *collected) emit(it source.SourceItem) error { c.items = append(c.items, it); return nil }

// objects is an in-memory Blobs for object sources: only OpenMatch (and
// Open) read; every other method is unused by ReadSource and Digest.
type objects struct {
	ledger.Blobs                   // nil: unused methods panic
	body         map[string][]byte // "bucket/key" → bytes
	etag         map[string]string
}

func (o *objects) Open(ctx context.Context, bucket, key string) (io.ReadCloser, error) {
	return o.OpenMatch(ctx, bucket, key, "")
}

func (o *objects) OpenMatch(_ context.Context, bucket, key, etag string) (io.ReadCloser, error) {
	b, ok := o.body[bucket+"/"+key]
	if !ok {
		return nil, api.ErrNotFound
	}
	if etag != "" && strings.Trim(etag, `"`) != o.etag[bucket+"/"+key] {
		return nil, api.ErrConflict
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// S3 uploads, formats: the format of a key is recognised in any case and
// before a .gz suffix, as the CLI accepts the same files.
func TestUploadFormatsByNameInAnyCase(t *testing.T) {
	tests := []struct{ key, format string }{
		{"incoming/orders.jsonl", api.FormatJSONL},
		{"incoming/orders.JSONL", api.FormatJSONL},
		{"incoming/orders.ndjson", api.FormatJSONL},
		{"incoming/orders.NDJSON", api.FormatJSONL},
		{"incoming/orders.CSV", api.FormatCSV},
		{"incoming/orders.Json", api.FormatJSON},
		{"incoming/orders.jsonl.gz", api.FormatJSONL},
		{"incoming/orders.ndjson.gz", api.FormatJSONL},
		{"incoming/orders.CSV.GZ", api.FormatCSV},
		{"incoming/orders.json.gz", api.FormatJSON},
		{"incoming/orders.txt", ""},
		{"incoming/orders.gz", ""},
		{"incoming/orders", ""},
	}
	for _, tt := range tests {
		if f := api.FormatOf(tt.key); f != tt.format {
			t.Errorf("%s: format %q, want %q", tt.key, f, tt.format)
		}
	}
}

// S3 uploads, gzip: a gzip object (whatever its name says) is read
// decompressed and gives the same manifest as the plain file; a corrupt or
// truncated gzip stream is refused with an error that says gzip.
func TestReadSourceGzip(t *testing.T) {
	plain := "{\"id\":\"a\"}\n{\"id\":\"b\"}\n"
	csv := "id,qty\na,1\nb,2\n"
	z := memstore.Gzip(t, plain)
	corrupt := append([]byte{}, z...)
	corrupt[len(corrupt)-6] ^= 0xff // the CRC-32 of the member
	o := &objects{body: map[string][]byte{
		"b/plain.jsonl":     []byte(plain),
		"b/z.jsonl.gz":      z,
		"b/z-encoded.jsonl": z, // Content-Encoding: gzip, plain name
		"b/z.CSV.gz":        memstore.Gzip(t, csv),
		"b/crc.jsonl.gz":    corrupt,
		"b/cut.jsonl.gz":    z[:20],
	}}
	s := &Submitter{Blobs: o}
	digest := func(object string) (string, error) {
		return s.Digest(context.Background(), api.SubmitRequest{Source: api.SourceSpec{Object: object}, KeyField: "id"})
	}
	want, err := digest("s3://b/plain.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for _, object := range []string{"s3://b/z.jsonl.gz", "s3://b/z-encoded.jsonl"} {
		if got, err := digest(object); err != nil || got != want {
			t.Errorf("%s: digest %s, %v; want the plain file's %s", object, got, err, want)
		}
	}
	var items collected
	if err := source.ReadSource(context.Background(), o, api.SourceSpec{Object: "s3://b/z.CSV.gz"}, "id", items.emit); err != nil || len(items.items) != 2 || items.items[1].Key != "b" {
		t.Errorf("csv.gz: %v %+v", err, items.items)
	}
	for _, object := range []string{"s3://b/crc.jsonl.gz", "s3://b/cut.jsonl.gz"} {
		_, err := digest(object)
		var ie *api.InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), "gzip") {
			t.Errorf("%s: %v, want an input error that says gzip", object, err)
		}
	}
}

// S3 uploads, the object the event names: with an ETag the source reads
// only that object; replaced or deleted, it is refused naming the object.
func TestReadSourceExactObject(t *testing.T) {
	o := &objects{body: map[string][]byte{"b/in.jsonl": []byte("{\"k\":1}\n")}, etag: map[string]string{"b/in.jsonl": "v2"}}
	tests := []struct {
		name, object, etag string
		want               string // substring of the refusal; "" = read
	}{
		{"same etag", "s3://b/in.jsonl", "v2", ""},
		{"quoted etag", "s3://b/in.jsonl", `"v2"`, ""},
		{"no etag reads what is there", "s3://b/in.jsonl", "", ""},
		{"replaced", "s3://b/in.jsonl", "v1", "changed: its ETag is no longer v1"},
		{"deleted", "s3://b/gone.jsonl", "v1", "s3://b/gone.jsonl (ETag v1) does not exist any more"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var items collected
			err := source.ReadSource(context.Background(), o, api.SourceSpec{Object: tt.object, ETag: tt.etag}, "", items.emit)
			if tt.want == "" {
				if err != nil || len(items.items) != 1 {
					t.Fatalf("%v %+v", err, items.items)
				}
				return
			}
			var ie *api.InputError
			if !errors.As(err, &ie) || ie.Field != "source.object" || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%v, want an input error on source.object saying %q", err, tt.want)
			}
		})
	}
}

// S3 uploads, identity: the digest is the manifest's, so the same items
// give the same digest however the bytes were written (CRLF, BOM), and
// other items another.
func TestDigestIsTheManifests(t *testing.T) {
	o := &objects{body: map[string][]byte{
		"b/a.jsonl": []byte("{\"id\":\"a\", \"n\": 1}\n{\"id\":\"b\"}\n"),
		"b/b.jsonl": []byte("\xEF\xBB\xBF{\"id\":\"a\",\"n\":1}\r\n{\"id\":\"b\"}"),
		"b/c.jsonl": []byte("{\"id\":\"a\",\"n\":2}\n{\"id\":\"b\"}\n"),
	}}
	s := &Submitter{Blobs: o}
	d := map[string]string{}
	for _, k := range []string{"a", "b", "c"} {
		v, err := s.Digest(context.Background(), api.SubmitRequest{Source: api.SourceSpec{Object: "s3://b/" + k + ".jsonl"}, KeyField: "id"})
		if err != nil {
			t.Fatal(err)
		}
		d[k] = v
	}
	if d["a"] != d["b"] || d["a"] == d["c"] || len(d["a"]) != 64 {
		t.Fatalf("digests %v: want a = b ≠ c", d)
	}
}

// BenchmarkDigest measures the identity pass of an upload (read, normalize,
// check and hash the source; nothing written) for a plain and a gzip
// object of 100,000 JSONL items, from memory.
func BenchmarkDigest(b *testing.B) {
	const n = 100_000
	src := memstore.OrdersJSONL(n)
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	w.Write(src)
	w.Close()
	o := &objects{body: map[string][]byte{"b/plain.jsonl": src, "b/z.jsonl.gz": z.Bytes()}}
	for _, key := range []string{"plain.jsonl", "z.jsonl.gz"} {
		b.Run(key, func(b *testing.B) {
			s := &Submitter{Blobs: o, TempDir: b.TempDir()}
			b.ReportAllocs()
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				if _, err := s.Digest(context.Background(), api.SubmitRequest{Source: api.SourceSpec{Object: "s3://b/" + key}, KeyField: "id"}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
		})
	}
}
