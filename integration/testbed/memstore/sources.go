package memstore

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"testing"
)

// OrdersJSONL is a JSON Lines source of n orders of ≈ 110 bytes each,
// keyed by "id" (order-000000000 …): the source the submit benchmarks read.
func OrdersJSONL(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "{\"id\":\"order-%09d\",\"customer\":\"c-%06d\",\"amount_cents\":%d,\"currency\":\"EUR\",\"note\":\"settlement line\"}\n", i, i%7919, i*37%100000)
	}
	return b.Bytes()
}

// Gzip returns a gzip stream of one member per part (RFC 1952 §2.2: a
// stream may hold several members, read as their concatenation).
func Gzip(t testing.TB, parts ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, p := range parts {
		zw := gzip.NewWriter(&b)
		if _, err := zw.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}
