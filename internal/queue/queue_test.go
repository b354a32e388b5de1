package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/bulkrun/bulkrun/internal/queue"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// fakeSQS answers SendMessageBatch (AWS JSON 1.0 protocol) from a script:
// answer decides each entry's fate by its body. It records every call's
// entry bodies.
type fakeSQS struct {
	mu     sync.Mutex
	calls  [][]string
	answer func(call int, body string) (ok bool, senderFault bool)
	// latency is each call's time before its answer (0: none); inFlight
	// and maxInFlight count the calls being answered.
	latency               time.Duration
	inFlight, maxInFlight int
	// groups is each body's MessageGroupId as sent (nil: none).
	groups map[string]*string
}

func (f *fakeSQS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Amz-Target") != "AmazonSQS.SendMessageBatch" {
		http.Error(w, "unexpected "+r.Header.Get("X-Amz-Target"), 400)
		return
	}
	var in struct {
		Entries []struct {
			Id, MessageBody string
			MessageGroupId  *string
		}
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
		if f.groups == nil {
			f.groups = map[string]*string{}
		}
		f.groups[e.MessageBody] = e.MessageGroupId
	}
	f.calls = append(f.calls, bodies)
	f.inFlight++
	f.maxInFlight = max(f.maxInFlight, f.inFlight)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
	}()
	time.Sleep(f.latency)
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

func newQueue(t testing.TB, f *fakeSQS) *queue.Queue {
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
	var re *ledger.RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("Send = %v, want a *ledger.RefusedError", err)
	}
	var idx []int
	for _, r := range re.Refused {
		idx = append(idx, r.Index)
	}
	if !slices.Equal(idx, []int{1, 5}) || re.Refused[0].Code != "InvalidMessageContents" || re.Refused[1].Code != "MessageTooLong" {
		t.Fatalf("refused %+v, want messages 1 (sender fault) and 5 (too long)", re.Refused)
	}
	if errors.Is(err, ledger.ErrUnavailable) {
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
	var sizes []int
	for _, c := range f.calls {
		sizes = append(sizes, len(c))
	}
	if slices.Sort(sizes); !slices.Equal(sizes, []int{3, 10, 10}) {
		t.Fatalf("calls of %v entries; want 10, 10 and 3", sizes)
	}
}

// Send has at most SendConcurrency calls in flight, more than one when
// there is more than one call to make, and sends every body exactly once.
func TestSendConcurrentCallsEachBodyOnce(t *testing.T) {
	f := &fakeSQS{latency: 50 * time.Millisecond, answer: func(int, string) (bool, bool) { return true, false }}
	q := newQueue(t, f)
	q.SendConcurrency = 4
	var bodies [][]byte
	for i := range 95 {
		bodies = append(bodies, []byte(strconv.Itoa(i)))
	}
	if err := q.Send(context.Background(), bodies); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) != 10 || f.maxInFlight > 4 || f.maxInFlight < 2 {
		t.Fatalf("%d calls, at most %d in flight; want 10 calls, 2 to 4 in flight", len(f.calls), f.maxInFlight)
	}
	seen := map[string]int{}
	for _, c := range f.calls {
		for _, b := range c {
			seen[b]++
		}
	}
	for i := range 95 {
		if n := seen[strconv.Itoa(i)]; n != 1 {
			t.Errorf("body %d sent %d times, want 1", i, n)
		}
	}
}

// A call whose entries stay failed makes Send an error wrapping
// ErrUnavailable, whatever the other calls did: a caller that sends
// again loses nothing. A refusal among the other calls' entries does not
// hide it.
func TestSendConcurrentUnavailableIsAnError(t *testing.T) {
	defer queue.SetResendInterval(time.Millisecond)()
	f := &fakeSQS{answer: func(_ int, body string) (bool, bool) {
		return !strings.HasPrefix(body, "down") && !strings.HasPrefix(body, "refused"), strings.HasPrefix(body, "refused")
	}}
	q := newQueue(t, f)
	var bodies [][]byte
	for i := range 60 {
		switch i {
		case 3:
			bodies = append(bodies, []byte("refused-3"))
		case 47:
			bodies = append(bodies, []byte("down-47"))
		default:
			bodies = append(bodies, []byte(strconv.Itoa(i)))
		}
	}
	err := q.Send(context.Background(), bodies)
	if !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Send = %v, want an error wrapping ErrUnavailable", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var downs int
	for _, c := range f.calls {
		for _, b := range c {
			if b == "down-47" {
				downs++
			}
		}
	}
	if downs != queue.MaxSendTries {
		t.Fatalf("the failing entry was sent %d times, want %d", downs, queue.MaxSendTries)
	}
}

// A send whose entries stay failed past the tries names exactly the
// bodies the queue did not take (an *UnsentError, unavailable), with the
// refused ones: every other body was taken once, so a caller sending
// again sends only the unsent — never the ten accepted entries of the
// failing call again. The calls in flight when one fails finish; the
// calls not started yet are unsent.
func TestSendNamesTheUnsentBodies(t *testing.T) {
	defer queue.SetResendInterval(time.Millisecond)()
	f := &fakeSQS{answer: func(_ int, body string) (bool, bool) {
		return !strings.HasPrefix(body, "down") && !strings.HasPrefix(body, "refused"), strings.HasPrefix(body, "refused")
	}}
	q := newQueue(t, f)
	q.SendConcurrency = 1 // one call after another: the calls after the failing one are not made
	var bodies [][]byte
	for i := range 40 {
		switch i {
		case 3:
			bodies = append(bodies, []byte("refused-3"))
		case 12, 17:
			bodies = append(bodies, []byte("down-"+strconv.Itoa(i)))
		default:
			bodies = append(bodies, []byte(strconv.Itoa(i)))
		}
	}
	err := q.Send(context.Background(), bodies)
	var ue *ledger.UnsentError
	if !errors.As(err, &ue) || !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Send = %v, want an unavailable *UnsentError", err)
	}
	want := []int{12, 17}
	for i := 20; i < 40; i++ {
		want = append(want, i) // the calls after the failing one
	}
	if !slices.Equal(ue.Unsent, want) || len(ue.Refused) != 1 || ue.Refused[0].Index != 3 {
		t.Fatalf("unsent %v, refused %+v; want %v and body 3 refused", ue.Unsent, ue.Refused, want)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sent := map[string]int{}
	for _, c := range f.calls {
		for _, b := range c {
			sent[b]++
		}
	}
	for i := range 20 {
		n := sent[string(bodies[i])]
		switch {
		case slices.Contains(want, i):
			if n != queue.MaxSendTries {
				t.Errorf("body %d (unsent) sent %d times, want %d", i, n, queue.MaxSendTries)
			}
		case i == 3:
		default:
			if n != 1 {
				t.Errorf("body %d sent %d times, want 1", i, n)
			}
		}
	}
}

// A send cut short (its context ended, as a submit whose invocation ends)
// is an error, never success, whatever calls were already answered: the
// caller does not mark the fan-out sent and sends it again.
func TestSendCutShortIsAnError(t *testing.T) {
	f := &fakeSQS{latency: 50 * time.Millisecond, answer: func(int, string) (bool, bool) { return true, false }}
	q := newQueue(t, f)
	q.SendConcurrency = 2
	var bodies [][]byte
	for i := range 100 {
		bodies = append(bodies, []byte(strconv.Itoa(i)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
	defer cancel()
	if err := q.Send(ctx, bodies); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send = %v, want an error wrapping the context's end", err)
	}
}

// BenchmarkSendFanout sends the fan-out of 10^6 items (200 messages of
// 5,000 items each, 20 calls) to an endpoint that answers every
// SendMessageBatch after 20 ms, one call after another and
// DefaultSendConcurrency calls at a time, and
// reports the wall time the fan-out of 10^8 items (20,000 messages, 2,000
// calls) takes at that rate.
//
//	go test -run '^$' -bench SendFanout -benchtime 5x ./internal/queue/
func BenchmarkSendFanout(b *testing.B) {
	const messages, itemsPerMessage = 200, 5000
	body := []byte(strings.Repeat("m", 300)) // a fan-out message's size
	bodies := make([][]byte, messages)
	for i := range bodies {
		bodies[i] = body
	}
	for _, n := range []int{1, queue.DefaultSendConcurrency} {
		b.Run(fmt.Sprintf("in-flight=%d", n), func(b *testing.B) {
			f := &fakeSQS{latency: 20 * time.Millisecond, answer: func(int, string) (bool, bool) { return true, false }}
			q := newQueue(b, f)
			q.SendConcurrency = n
			for b.Loop() {
				if err := q.Send(context.Background(), bodies); err != nil {
					b.Fatal(err)
				}
			}
			perMessage := b.Elapsed().Seconds() / float64(b.N) / messages
			b.ReportMetric(perMessage*1e8/itemsPerMessage, "s/1e8-items")
		})
	}
}

// TestSendGroupsByBatch guards the fair queue's tenants: every message
// that names its batch is sent in the batch's message group (SQS's
// MessageGroupId on a standard queue), and a body naming none is sent
// with no group rather than refused.
func TestSendGroupsByBatch(t *testing.T) {
	f := &fakeSQS{answer: func(int, string) (bool, bool) { return true, false }}
	q := newQueue(t, f)
	bodies := [][]byte{
		[]byte(`{"kind":"item","batch_id":"settle-2026-12","key":"a"}`),
		[]byte(`{"kind":"pack","batch_id":"small_batch-1","items":[]}`),
		[]byte(`{"kind":"item","key":"b"}`),
		[]byte(`not json`),
	}
	if err := q.Send(context.Background(), bodies); err != nil {
		t.Fatal(err)
	}
	want := []string{"settle-2026-12", "small_batch-1", "", ""}
	for i, b := range bodies {
		got, ok := f.groups[string(b)]
		if !ok {
			t.Fatalf("body %d not sent", i)
		}
		switch {
		case want[i] == "" && got != nil:
			t.Errorf("body %d (%s) sent in group %q, want none", i, b, *got)
		case want[i] != "" && (got == nil || *got != want[i]):
			t.Errorf("body %d (%s) sent in group %v, want %q", i, b, got, want[i])
		}
	}
}
