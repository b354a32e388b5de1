package iamlane

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
)

// AWS rules the emulator does not apply, which the lane applies to every
// call it sees (MiniStack 1.5.33 checks none of them):
//
//   - EventBridge PutEvents: the entries of one request are at most
//     PutEventsMaxBytes, sized as EventBridge sizes them ("Calculating
//     Amazon EventBridge PutEvents event entry size"); more is a 400
//     ValidationException and nothing is put.
//   - Lambda Invoke: a synchronous request or response of at most
//     LambdaSyncPayloadBytes, an asynchronous (Event) request of at most
//     LambdaAsyncPayloadBytes ("Lambda quotas"): a larger request is a 413
//     RequestEntityTooLargeException, a larger response a function error
//     Function.ResponseSizeTooLarge.
//   - Recursive loop detection ("Use Lambda recursive loop detection to
//     prevent infinite loops", AWS Lambda developer guide): Lambda counts
//     the invocations of one chain of events in the X-Ray trace header's
//     Lineage, which the SDK carries from an invocation into the messages
//     it sends, and stops the next invocation of a function past
//     LoopLimit, moving an SQS message to the queue's dead-letter queue.
//     MiniStack passes no trace header into the functions, so the lane
//     counts the chain itself: a message a function sends to a queue that
//     invokes that very function continues the chain of the message of
//     the same identity (bulkrun's Message: kind, batch, run, key or
//     chunk) it sent before; past LoopLimit the send goes to the queue's
//     dead-letter queue instead (or, without one, nowhere), unless the
//     function's RecursiveLoop is Allow.
const (
	PutEventsMaxBytes       = 256 * 1024
	LambdaSyncPayloadBytes  = 6 * 1024 * 1024
	LambdaAsyncPayloadBytes = 1024 * 1024
	LoopLimit               = 16
)

// LoopStop is one message the lane stopped as Lambda's recursive loop
// detection would.
type LoopStop struct {
	Time     time.Time `json:"time"`
	Function string    `json:"function"`
	Queue    string    `json:"queue"`
	Message  string    `json:"message"` // the chain's identity
	Hops     int       `json:"hops"`
	To       string    `json:"to"` // the dead-letter queue's URL, "" when dropped
	Tests    []string  `json:"tests,omitempty"`
	// Expected marks a stop its binding asked for (Binding.Expect holds
	// ExpectLoop): a test showing what the detection does.
	Expected bool `json:"expected,omitempty"`
}

// ExpectLoop in Binding.Expect marks the binding's loop stops expected.
const ExpectLoop = "recursive-loop"

// limit applies the size limits to any signed call.
func limit(r *http.Request, c faultproxy.Call, body []byte) *faultproxy.Refusal {
	switch c.String() {
	case "events.PutEvents":
		if n := putEventsSize(body); n > PutEventsMaxBytes {
			return &faultproxy.Refusal{Status: http.StatusBadRequest, Code: "ValidationException",
				Message: fmt.Sprintf("Total size of the entries in the request is over the limit (%d bytes, at most %d).", n, PutEventsMaxBytes)}
		}
	case "lambda.Invoke":
		max := LambdaSyncPayloadBytes
		if strings.EqualFold(r.Header.Get("X-Amz-Invocation-Type"), "Event") {
			max = LambdaAsyncPayloadBytes
		}
		if len(body) > max {
			return &faultproxy.Refusal{Status: http.StatusRequestEntityTooLarge, Code: "RequestEntityTooLargeException",
				Message: fmt.Sprintf("%d byte payload is too large for the Invoke operation (%d bytes)", len(body), max)}
		}
	}
	return nil
}

// putEventsSize sizes a PutEvents request's entries as EventBridge does:
// 14 bytes for a Time, and the UTF-8 bytes of Source, DetailType, Detail
// and each of Resources.
func putEventsSize(body []byte) int {
	var in struct {
		Entries []struct {
			Time                       *json.RawMessage
			Source, DetailType, Detail string
			Resources                  []string
		}
	}
	if json.Unmarshal(body, &in) != nil {
		return 0
	}
	n := 0
	for _, e := range in.Entries {
		if e.Time != nil {
			n += 14
		}
		n += len(e.Source) + len(e.DetailType) + len(e.Detail)
		for _, r := range e.Resources {
			n += len(r)
		}
	}
	return n
}

// Rewrite implements faultproxy.ResponseRewriter: a synchronous Invoke
// answer over LambdaSyncPayloadBytes becomes the function error Lambda
// answers instead.
func (l *Lane) Rewrite(resp *http.Response, c faultproxy.Call) {
	if c.String() != "lambda.Invoke" || resp.StatusCode != http.StatusOK || resp.ContentLength >= 0 && resp.ContentLength <= LambdaSyncPayloadBytes {
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, LambdaSyncPayloadBytes+1))
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err == nil && len(body) <= LambdaSyncPayloadBytes {
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return
	}
	out := fmt.Appendf(nil, `{"errorMessage":"Response payload size exceeded maximum allowed payload size (%d bytes).","errorType":"Function.ResponseSizeTooLarge"}`, LambdaSyncPayloadBytes)
	resp.Header.Set("X-Amz-Function-Error", "Unhandled")
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	resp.ContentLength = int64(len(out))
	resp.Body = io.NopCloser(bytes.NewReader(out))
}

// identity names a bulkrun message's chain: the same item (or pack, or
// chunk) of the same run.
func identity(body string) string {
	var m struct {
		Kind       string `json:"kind"`
		BatchID    string `json:"batch_id"`
		Run        int    `json:"run"`
		Key        string `json:"key"`
		ChunkFirst int64  `json:"chunk_first"`
		Chunk      *struct {
			FirstIndex int64 `json:"first_index"`
		} `json:"chunk"`
		Pack *struct {
			First int64 `json:"first"`
		} `json:"pack"`
	}
	if json.Unmarshal([]byte(body), &m) != nil || m.BatchID == "" {
		return ""
	}
	id := fmt.Sprintf("%s|%s|%d|%s|%d", m.Kind, m.BatchID, m.Run, m.Key, m.ChunkFirst)
	if m.Chunk != nil {
		id += fmt.Sprintf("|c%d", m.Chunk.FirstIndex)
	}
	if m.Pack != nil {
		id += fmt.Sprintf("|p%d", m.Pack.First)
	}
	return id
}

// loop counts the chain of an SQS send by fn and, past LoopLimit, moves
// it where Lambda's recursive loop detection would: it returns the
// request to forward (with QueueUrl rewritten to the dead-letter queue)
// or a refusal-free drop (answered without the emulator).
func (l *Lane) loop(r *http.Request, c faultproxy.Call, body []byte, fn, binding string) (drop bool) {
	if c.String() != "sqs.SendMessage" {
		return false
	}
	var in map[string]any
	if json.Unmarshal(body, &in) != nil {
		return false
	}
	url, _ := in["QueueUrl"].(string)
	msg, _ := in["MessageBody"].(string)
	id := identity(msg)
	if url == "" || id == "" {
		return false
	}
	d, err := l.load()
	if err != nil {
		return false
	}
	queueARN := queueARNOf(url, l.opts.Region)
	l.mu.Lock()
	b := l.bindings[binding]
	l.mu.Unlock()
	swap := substitution(d.Names, b.Names)
	trigger, dlq := "", ""
	for arn, f := range d.Triggers {
		if swapString(arn, swap) == queueARN {
			trigger, dlq = f, d.DeadLetterURLs[arn]
			if binding != "" {
				dlq = "" // the harness's queue has no dead-letter queue
			}
		}
	}
	if trigger != fn || d.RecursiveLoop[fn] == "Allow" {
		return false
	}
	key := binding + "\x00" + id
	l.mu.Lock()
	l.hops[key]++
	hops := l.hops[key]
	l.mu.Unlock()
	if hops < LoopLimit {
		return false
	}
	stop := LoopStop{Time: time.Now().UTC(), Function: fn, Queue: url, Message: id, Hops: hops, To: dlq, Tests: l.testsOf(r, body, binding),
		Expected: slices.Contains(b.Expect, ExpectLoop)}
	l.mu.Lock()
	l.loops = append(l.loops, stop)
	l.mu.Unlock()
	l.opts.Log.Warn("recursive loop stopped", "function", fn, "message", id, "hops", hops, "to", dlq)
	if dlq == "" {
		return true
	}
	in["QueueUrl"] = dlq
	out, _ := json.Marshal(in)
	r.Body = io.NopCloser(bytes.NewReader(out))
	r.ContentLength = int64(len(out))
	r.Header.Set("Content-Length", strconv.Itoa(len(out)))
	return false
}

// queueARNOf is the ARN of the queue at url (…/ACCOUNT/NAME).
func queueARNOf(url, region string) string {
	parts := strings.Split(strings.TrimRight(mustPath(url), "/"), "/")
	if len(parts) < 2 {
		return ""
	}
	return fmt.Sprintf("arn:aws:sqs:%s:%s:%s", region, parts[len(parts)-2], parts[len(parts)-1])
}
