package flow

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/secretref"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// cancelDuringFirstCall runs one invocation of batch id's unit messages
// (its fan-out expanded first) whose first pipeline call blocks for
// hold; the batch is cancelled 0.2 s into it, while the unit's other
// calls wait for that call's answer. It returns the calls that started
// after the cancel, with how long after.
func cancelDuringFirstCall(t *testing.T, r *rig, id string, hold time.Duration, calls *afterCancel) {
	t.Helper()
	ctx := context.Background()
	for range 5 { // expand the fan-out: no pipeline call
		var fan, rest []worker.Delivery
		for _, d := range r.queue.take() {
			if strings.Contains(string(d.Body), `"kind":"fanout"`) {
				fan = append(fan, d)
			} else {
				rest = append(rest, d)
			}
		}
		r.queue.put(rest)
		if len(fan) == 0 {
			break
		}
		r.worker.Handle(ctx, fan)
	}
	ds := r.queue.take()
	done := make(chan struct{})
	go func() { defer close(done); r.worker.Handle(ctx, ds) }()
	select {
	case <-calls.started:
	case <-time.After(5 * time.Second):
		t.Fatal("no call started")
	}
	time.Sleep(200 * time.Millisecond) // the others wait for the first answer
	if _, err := r.ctl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	calls.cancelled(time.Now())
	time.Sleep(hold)
	close(calls.release)
	<-done
	r.drain(t, ctx, 1)
	res, err := r.fin.Finalize(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Report.Census; c.Succeeded != 1 || c.Cancelled != c.Total-1 {
		t.Errorf("census %+v; want the first call's item succeeded, every other cancelled", c)
	}
}

// afterCancel is a pipeline whose first call blocks until release, and
// which notes every call that starts after the cancel.
type afterCancel struct {
	started, release chan struct{}
	first            sync.Once
	mu               sync.Mutex
	at               time.Time // the cancel; zero before
	after            []string
}

func newAfterCancel() *afterCancel {
	return &afterCancel{started: make(chan struct{}), release: make(chan struct{})}
}

func (c *afterCancel) cancelled(at time.Time) {
	c.mu.Lock()
	c.at = at
	c.mu.Unlock()
}

func (c *afterCancel) run(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
	c.mu.Lock()
	if !c.at.IsZero() {
		c.after = append(c.after, fmt.Sprintf("%s at +%d ms", req.Key, time.Since(c.at).Milliseconds()))
	}
	c.mu.Unlock()
	first := false
	c.first.Do(func() { first = true })
	if first {
		close(c.started)
		<-c.release
	}
	return pipeline.Result{Output: []byte(`{"ok":true}`)}, nil
}

func (c *afterCancel) check(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.after) > 0 {
		t.Errorf("%d calls started after the cancel: %v", len(c.after), c.after)
	}
}

// TestCancelStopsCallsWaitingAtTheCredentialGate guards a cancel against
// the calls of a batch under a secret reference that wait at the
// credential gate for the process's first call under it (which runs 2 s
// here): a cancel recorded 0.2 s into the wait starts none of them once
// that call answers. Before, they started under the row read before the
// wait (stopcheck): 9 calls 5 s after the cancel with a first call of
// 5 s, at one item a message and ten.
func TestCancelStopsCallsWaitingAtTheCredentialGate(t *testing.T) {
	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			calls := newAfterCancel()
			r := newRig(t, calls.run)
			r.worker.Secrets = &rotatingSecrets{cached: "Bearer right", latest: "Bearer right"}
			r.sub.SecretPrefixes = []string{hookSecretARN}
			r.sub.ChunkItems = 30
			if _, err := r.sub.Submit(context.Background(), api.SubmitRequest{BatchID: "g", Pipeline: "counted", Source: api.SourceSpec{Items: items(30)}, ItemsPerMessage: k,
				Headers: map[string]string{"Authorization": secretref.Prefix + hookSecretARN}}); err != nil {
				t.Fatal(err)
			}
			cancelDuringFirstCall(t, r, "g", 2*time.Second, calls)
			calls.check(t)
		})
	}
}

// TestCancelStopsCallsWaitingForTheFirstAnswer guards a cancel against
// the calls of a batch with no rate that wait for the process's first
// answer from their downstream (pacer.First, up to 2 s; the first call
// runs 1.5 s here): a cancel recorded 0.2 s into the wait starts none of
// them. Before, they started under the row read before the wait: 9
// calls 1.5 s after the cancel.
func TestCancelStopsCallsWaitingForTheFirstAnswer(t *testing.T) {
	for _, k := range []int{1, 10} {
		t.Run(fmt.Sprintf("K%d", k), func(t *testing.T) {
			calls := newAfterCancel()
			r := newRig(t, calls.run)
			r.sub.ChunkItems = 30
			submitK(t, r, "f", k, 30, nil)
			cancelDuringFirstCall(t, r, "f", 1500*time.Millisecond, calls)
			calls.check(t)
		})
	}
}
