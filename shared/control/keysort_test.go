package control

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/memblobs"
)

// TestSearchResultsFindsEveryKey: a binary search over a key-ordered
// results file finds every key it holds — lines short and longer than
// one ranged read, the first and the last, a last line without its
// newline — and none of the keys between, before or after them.
func TestSearchResultsFindsEveryKey(t *testing.T) {
	for _, n := range []int{1, 2, 3, 30} {
		var body []byte
		var keys []string
		for i := range n {
			key := fmt.Sprintf("k%03d", 2*i+1)
			keys = append(keys, key)
			pad := strings.Repeat("p", i%7*10)
			if i%9 == 4 {
				pad = strings.Repeat("p", 70<<10) // longer than a read
			}
			body = fmt.Appendf(body, `{"key":%q,"pad":%q}`+"\n", key, pad)
		}
		for _, cut := range []bool{false, true} {
			b := body
			if cut {
				b = b[:len(b)-1]
			}
			blobs := memblobs.New()
			ctx := context.Background()
			_ = blobs.Put(ctx, "results", "", b)
			for i, key := range keys {
				if ok, err := searchResults(ctx, blobs, "results", int64(len(b)), key); err != nil || !ok {
					t.Fatalf("%d lines: %s not found (%v)", n, key, err)
				}
				absent := fmt.Sprintf("k%03d", 2*i) // before each key
				if ok, err := searchResults(ctx, blobs, "results", int64(len(b)), absent); err != nil || ok {
					t.Fatalf("%d lines: %s found (%v)", n, absent, err)
				}
			}
			if ok, _ := searchResults(ctx, blobs, "results", int64(len(b)), "z"); ok {
				t.Fatalf("%d lines: a key after the last found", n)
			}
		}
	}
}
