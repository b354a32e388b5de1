package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/bulkrun/bulkrun/internal/egress"
	"github.com/bulkrun/bulkrun/internal/pipeline/webhook"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

func Example() {
	// A receiver that acknowledges items and refuses the one with n = 13.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ N int }
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &in)
		if in.N == 13 {
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprint(w, `{"error":"unlucky"}`)
			return
		}
		fmt.Fprintf(w, `{"received": %q, "attempt": %s}`, r.Header.Get("Bulkrun-Item-Key"), r.Header.Get("Bulkrun-Attempt"))
	}))
	defer srv.Close()

	// The receiver listens on 127.0.0.1, which the allow-list must name.
	p := webhook.New(nil, egress.MustParse("127.0.0.1"))
	opts := json.RawMessage(fmt.Sprintf(`{"url": %q, "timeout_ms": 2000}`, srv.URL))
	for _, n := range []int{12, 13} {
		res, err := p.Run(context.Background(), pipeline.Request{
			BatchID: "b1",
			Key:     fmt.Sprintf("item-%010d", n),
			RunID:   "run-id",
			Attempt: 1,
			Input:   json.RawMessage(fmt.Sprintf(`{"n": %d}`, n)),
			Options: opts,
		})
		if err != nil {
			fmt.Println(pipeline.Classify(err), err)
			continue
		}
		fmt.Println(string(res.Output), res.Cost)
	}
	// Output:
	// {"received":"item-0000000012","attempt":1} map[calls:1]
	// permanent webhook: item-0000000013: HTTP 422: {"error":"unlucky"}
}
