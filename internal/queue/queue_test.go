package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/bulkrun/bulkrun/internal/queue"
	"github.com/bulkrun/bulkrun/shared/batch"
)

// fakeSQS answers SendMessageBatch (AWS JSON 1.0 protocol) from a script:
// answer decides each entry's fate by its body. It records every call's
// entry bodies.
type fakeSQS struct {
	mu     sync.Mutex
	calls  [][]string
	answer func(call int, body string) (ok bool, senderFault bool)
}

func (f *fakeSQS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Amz-Target") != "AmazonSQS.SendMessageBatch" {
		http.Error(w, "unexpected "+r.Header.Get("X-Amz-Target"), 400)
		return
	}
	var in struct {
		Entries []struct{ Id, MessageBody string }
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	f.mu.Lock()
	call := len(f.calls)
	var bodies []string
	for _, e := range in.Entries {
		bodies = append(bodies, e.MessageBody)
	}
	f.calls = append(f.calls, bodies)
	f.mu.Unlock()
	type ok struct{ Id, MessageId string }
	type failed struct {
		Id, Code, Message string
		SenderFault       bool
	}
	out := struct {
		Successful []ok
		Failed     []failed
	}{Successful: []ok{}, Failed: []failed{}}
	for _, e := range in.Entries {
		good, sender := f.answer(call, e.MessageBody)
		switch {
		case good:
			out.Successful = append(out.Successful, ok{Id: e.Id, MessageId: "m-" + e.Id})
		case sender:
			out.Failed = append(out.Failed, failed{Id: e.Id, Code: "InvalidMessageContents", Message: "Invalid characters found.", SenderFault: true})
		default:
			out.Failed = append(out.Failed, failed{Id: e.Id, Code: "InternalError", Message: "try again", SenderFault: false})
		}
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(out)
}

func newQueue(t *testing.T, f *fakeSQS) *queue.Queue {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	client := sqs.New(sqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.AnonymousCredentials{},
	})
	return queue.New(client, srv.URL+"/000000000000/items")
}

// TestSendRetriesOnlyFailedEntriesAndNeverSenderFaults guards the
// characters-SQS-refuses product line at the adapter: a retried
// SendMessageBatch re-sends only the entries that failed on SQS's side,
// never those SQS accepted, and an entry refused as the sender's fault is
// not retried but reported (the other bodies are sent). The emulator
// cannot fail a single entry transiently, hence the fake endpoint.
func TestSendRetriesOnlyFailedEntriesAndNeverSenderFaults(t *testing.T) {
	f := &fakeSQS{answer: func(call int, body string) (bool, bool) {
		switch {
		case strings.HasPrefix(body, "refused"):
			return false, true
		case strings.HasPrefix(body, "flaky") && call == 0:
			return false, false
		}
		return true, false
	}}
	q := newQueue(t, f)
	bodies := [][]byte{[]byte("a"), []byte("refused-1"), []byte("b"), []byte("flaky-3"), []byte("c"),
		[]byte(strings.Repeat("x", queue.MaxBatchBytes+1)), []byte("d")}
	err := q.Send(context.Background(), bodies)
	var re *batch.RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("Send = %v, want a *batch.RefusedError", err)
	}
	var idx []int
	for _, r := range re.Refused {
		idx = append(idx, r.Index)
	}
	if !slices.Equal(idx, []int{1, 5}) || re.Refused[0].Code != "InvalidMessageContents" || re.Refused[1].Code != "MessageTooLong" {
		t.Fatalf("refused %+v, want messages 1 (sender fault) and 5 (too long)", re.Refused)
	}
	if errors.Is(err, batch.ErrUnavailable) {
		t.Fatal("a sender fault must not be reported as a transient fault")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) != 2 {
		t.Fatalf("%d SendMessageBatch calls, want 2: %q", len(f.calls), f.calls)
	}
	if !slices.Equal(f.calls[0], []string{"a", "refused-1", "b", "flaky-3", "c", "d"}) {
		t.Fatalf("first call sent %q", f.calls[0])
	}
	if !slices.Equal(f.calls[1], []string{"flaky-3"}) {
		t.Fatalf("the retry sent %q, want only the entry that failed transiently", f.calls[1])
	}
}

// A fully accepted send makes one call and returns nil.
func TestSendAllAccepted(t *testing.T) {
	f := &fakeSQS{answer: func(int, string) (bool, bool) { return true, false }}
	q := newQueue(t, f)
	var bodies [][]byte
	for range 23 {
		bodies = append(bodies, []byte("ok"))
	}
	if err := q.Send(context.Background(), bodies); err != nil {
		t.Fatal(err)
	}
	if len(f.calls) != 3 || len(f.calls[0]) != 10 || len(f.calls[2]) != 3 {
		t.Fatalf("calls of %d, %d, … entries; want 10, 10, 3", len(f.calls[0]), len(f.calls[1]))
	}
}
