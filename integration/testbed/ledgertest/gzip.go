package ledgertest

import (
	"bytes"
	"compress/gzip"
	"testing"
)

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
