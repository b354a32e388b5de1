package webhook_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/pipeline/webhook"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestSuspendAnswer guards the webhook's form of pipeline.Suspend: a 202
// with Bulkrun-Suspend suspends the item (its wake time and token read
// from their headers), a 202 without it is a success, a wake time that
// is not RFC 3339 fails the item permanently naming the header, and the
// attempt after a signal carries its payload in Bulkrun-Signal.
func TestSuspendAnswer(t *testing.T) {
	var gotSignal string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotSignal = r.Header.Get(webhook.HeaderSignal)
		switch r.URL.Query().Get("as") {
		case "suspend":
			w.Header().Set(webhook.HeaderSuspend, "awaiting approval")
			w.Header().Set(webhook.HeaderWakeAt, "2026-12-03T10:00:00Z")
			w.Header().Set(webhook.HeaderToken, "t-7")
		case "bad-wake":
			w.Header().Set(webhook.HeaderSuspend, "awaiting approval")
			w.Header().Set(webhook.HeaderWakeAt, "tomorrow")
		case "ok-header":
			w.Header().Set(webhook.HeaderSuspend, "ignored on a 200")
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	run := func(as string, signal json.RawMessage) (pipeline.Result, error) {
		req := request(options(srv.URL+"/hook?as="+as, 0))
		req.Signal = signal
		return webhook.New(nil, testAllow).Run(context.Background(), req)
	}

	res, err := run("suspend", nil)
	s, ok := pipeline.SuspendOf(err)
	if !ok || s.Reason != "awaiting approval" || s.Token != "t-7" || !s.WakeAt.Equal(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)) || res.Cost["calls"] != 1 {
		t.Fatalf("202 with Bulkrun-Suspend: %+v %v (%+v); want a suspension with its wake time and token, one call", res, err, s)
	}
	if gotSignal != "" {
		t.Errorf("a first attempt sent Bulkrun-Signal %q", gotSignal)
	}
	// A batch's own header of that name does not pose as a signal.
	spoof := request(options(srv.URL+"/hook?as=plain", 0))
	spoof.Headers = map[string]string{webhook.HeaderSignal: base64.RawURLEncoding.EncodeToString([]byte(`{"approved":true}`))}
	if _, err := webhook.New(nil, testAllow).Run(context.Background(), spoof); err != nil || gotSignal != "" {
		t.Errorf("a batch header %s: %v, the receiver got %q; want none without a signal", webhook.HeaderSignal, err, gotSignal)
	}
	if _, err := run("plain", nil); err != nil {
		t.Errorf("202 without Bulkrun-Suspend: %v, want a success", err)
	}
	if _, err := run("ok-header", nil); err != nil {
		t.Errorf("200 with Bulkrun-Suspend: %v, want a success", err)
	}
	_, err = run("bad-wake", nil)
	var perm *pipeline.PermanentError
	if !errors.As(err, &perm) || pipeline.Classify(err) != pipeline.ClassPermanent {
		t.Errorf("bad Bulkrun-Wake-At: %v, want a permanent error naming it", err)
	}
	if _, err := run("plain", json.RawMessage(`{"approved":true}`)); err != nil {
		t.Fatal(err)
	}
	if b, err := base64.RawURLEncoding.DecodeString(gotSignal); err != nil || string(b) != `{"approved":true}` {
		t.Errorf("Bulkrun-Signal %q (%v), want the payload in base64url", gotSignal, err)
	}
}
