package ledgertest

import (
	"bytes"
	"fmt"
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
