package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/awsfault"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// TestAPIErrorsAsTheTableSays holds the client to the rows of
// awsfault.Table for bulkrun's REST API (service execute-api,
// docs/design/errors.md): each error, answered by the API every time in
// API Gateway's shape, is sent again up to MaxAttempts tries when its
// row's class is retry or backoff, and is tried once otherwise; a
// signature refused for its time is signed again once at the API's clock
// and answered (TestClockSkewCorrected, TestClockErrorNamesTheClock for
// the rest). A row added to the table is checked here.
func TestAPIErrorsAsTheTableSays(t *testing.T) {
	rows := 0
	for _, r := range awsfault.Table {
		if r.Service != "execute-api" {
			continue
		}
		rows++
		name := r.Code + " " + r.Message
		switch {
		case r.Status == 0:
			name = "no answer"
		case r.Code == "":
			name = "status " + strconv.Itoa(r.Status)
		}
		t.Run(strings.TrimSpace(name), func(t *testing.T) {
			again := r.Class == ledger.FaultRetry || r.Class == ledger.FaultBackoff
			if r.Code == "InvalidSignatureException" {
				// Refused for its signing time: once, at a clock 6 minutes off.
				offset := 6 * time.Minute
				if strings.HasPrefix(r.Message, "Signature not yet current") {
					offset = -offset
				}
				g := &skewedGateway{offset: offset}
				srv := httptest.NewServer(g)
				defer srv.Close()
				if _, err := testClient(t, srv).Status(context.Background(), "b"); err != nil || g.tries != 2 || !again {
					t.Fatalf("%v after %d tries (class %s); want answered on the second", err, g.tries, r.Class)
				}
				return
			}
			var tries atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				tries.Add(1)
				if r.Status == 0 {
					conn, _, _ := w.(http.Hijacker).Hijack()
					conn.Close()
					return
				}
				gatewayError(w, r.Status, r.Code, r.Message+" (injected)")
			}))
			defer srv.Close()
			_, err := testClient(t, srv).Status(context.Background(), "b")
			want := int32(1)
			if again {
				want = MaxAttempts
			}
			if err == nil || tries.Load() != want || Retryable(err) != again {
				t.Fatalf("class %s: %d tries, Retryable %v, err %v; want %d tries", r.Class, tries.Load(), Retryable(err), err, want)
			}
			var ae *APIError
			if r.Status != 0 && (!errors.As(err, &ae) || ae.Status != r.Status || ae.ErrorCode() != r.Code && r.Code != "") {
				t.Fatalf("err %v; want the API's %d %s", err, r.Status, r.Code)
			}
		})
	}
	if rows == 0 {
		t.Fatal("awsfault.Table has no rows for execute-api")
	}
}

// TestAPIErrorSaysItsCodeOnce: the server's message ends with the
// domain's sentinel ("…: conflict"), which the error's text, led by the
// code, does not say twice.
func TestAPIErrorSaysItsCodeOnce(t *testing.T) {
	for _, tc := range []struct {
		e    APIError
		want string
	}{
		{APIError{Status: 409, Body: wire.ErrorBody{Code: "conflict", Message: "approve b1: rejected already: conflict"}}, "HTTP 409 conflict: approve b1: rejected already"},
		{APIError{Status: 404, Body: wire.ErrorBody{Code: "not_found", Message: "batch b2: not found"}}, "HTTP 404 not_found: batch b2"},
		{APIError{Status: 409, Body: wire.ErrorBody{Code: "batch_mismatch", Message: "batch b3 exists with other settings: pipeline"}}, "HTTP 409 batch_mismatch: batch b3 exists with other settings: pipeline"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got  %q\nwant %q", got, tc.want)
		}
	}
}
