package flow

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
)

// A gzip object or a JSON array whose text is more than one invocation
// reads is refused at once — by Accept (the API's 400) and by a read —
// naming its size and the way out, instead of timing out three times; a
// plain JSON Lines object of the same size is read in parts, and a gzip
// object within the limit is read whole.
func TestWholeReadTooLargeIsRefusedAtOnce(t *testing.T) {
	ctx := context.Background()
	text := partsSource(3000) // ≈ 540 KB
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	zw.Write(text)
	zw.Close()
	var arr bytes.Buffer
	arr.WriteString("[")
	for i, l := range bytes.Split(bytes.TrimSpace(text), []byte("\n")) {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		if i > 0 && arr.Len() > 1 {
			arr.WriteString(",\n")
		}
		arr.Write(bytes.TrimPrefix(bytes.TrimSpace(l), []byte("\xEF\xBB\xBF")))
	}
	arr.WriteString("]")
	cases := []struct {
		name, key string
		body      []byte
		limit     int64
		want      []string // in the refusal; none: accepted
	}{
		{"gzip past the limit", "in/big.jsonl.gz", gz.Bytes(), 200 << 10, []string{"a gzip stream of", "of text at the compression ratio", "cannot be read in parts", "store it uncompressed"}},
		{"JSON array past the limit", "in/big.json", arr.Bytes(), 200 << 10, []string{"a JSON array of", "convert it to JSON Lines"}},
		{"gzip within the limit", "in/big.jsonl.gz", gz.Bytes(), 1 << 20, nil},
		{"plain JSON Lines past the limit, read in parts", "in/big.jsonl", text, 200 << 10, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, steps := partsRig(t, 64<<10)
			r.sub.Parts.MaxWholeBytes = c.limit
			if err := r.blobs.Put(ctx, c.key, "", c.body); err != nil {
				t.Fatal(err)
			}
			req := api.SubmitRequest{BatchID: "w", Pipeline: "counted", KeyField: "id", Source: api.SourceSpec{Object: "s3://batches/" + c.key}}
			_, err := r.sub.Accept(ctx, req)
			if c.want == nil {
				if err != nil {
					t.Fatalf("Accept: %v", err)
				}
				b, err := r.sub.Complete(ctx, "w")
				if err != nil {
					t.Fatal(err)
				}
				if b.Status == api.StatusSubmitting {
					b = runParts(t, ctx, r, steps, false)
				}
				if b.Status != api.StatusRunning || b.ItemCount != 3000 {
					t.Fatalf("%s with %d items (refusal %+v), want running with 3000", b.Status, b.ItemCount, b.Refusal)
				}
				return
			}
			var ie *api.InputError
			if !errors.As(err, &ie) || ie.Field != "source.object" {
				t.Fatalf("Accept: %v, want an *InputError on source.object", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Accept: %v\nwant it to say %q", err, w)
				}
			}
			// A synchronous read (an upload) is refused the same way, before it reads.
			if _, err := r.sub.Submit(ctx, req); !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want[0]) {
				t.Fatalf("Submit: %v, want the same refusal", err)
			}
		})
	}
}
