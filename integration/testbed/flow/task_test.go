package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/finalize"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// stepFunctions stands in for Step Functions' task tokens as
// SendTaskSuccess and SendTaskFailure treat them: a token is answered
// once, any answer after that is TaskTimedOut (ledger.ErrTaskGone). lose
// makes the next n answers be taken but their replies lost (the caller
// sees an error, as after a reset connection); refuse makes the next n
// fail before reaching it (throttled).
type stepFunctions struct {
	mu       sync.Mutex
	answers  map[string]taskAnswer // by token: the one answer taken
	attempts int
	lose     int
	refuse   int
	// beats counts the heartbeats taken by token, beatCalls every
	// SendTaskHeartbeat; a token in timedOut (its task's HeartbeatSeconds
	// passed) or answered is TaskTimedOut; beatRefuse throttles the next
	// n heartbeats.
	beats, beatCalls map[string]int
	timedOut         map[string]bool
	beatRefuse       int
}

type taskAnswer struct {
	name   string // "" for SendTaskSuccess
	cause  string
	output api.TaskOutput
}

func (s *stepFunctions) answer(token string, a taskAnswer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts++
	if s.refuse > 0 {
		s.refuse--
		return errors.New("ThrottlingException: rate exceeded")
	}
	if _, ok := s.answers[token]; ok {
		return fmt.Errorf("TaskTimedOut: %w", ledger.ErrTaskGone)
	}
	if s.answers == nil {
		s.answers = map[string]taskAnswer{}
	}
	s.answers[token] = a
	if s.lose > 0 {
		s.lose--
		return errors.New("read: connection reset by peer")
	}
	return nil
}

func (s *stepFunctions) Succeed(_ context.Context, token string, output []byte) error {
	var out api.TaskOutput
	if err := json.Unmarshal(output, &out); err != nil {
		return err
	}
	return s.answer(token, taskAnswer{output: out})
}

func (s *stepFunctions) Fail(_ context.Context, token, name, cause string) error {
	return s.answer(token, taskAnswer{name: name, cause: cause})
}

func (s *stepFunctions) Heartbeat(_ context.Context, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.beats == nil {
		s.beats, s.beatCalls = map[string]int{}, map[string]int{}
	}
	s.beatCalls[token]++
	if s.beatRefuse > 0 {
		s.beatRefuse--
		return errors.New("ThrottlingException: rate exceeded")
	}
	if _, ok := s.answers[token]; ok || s.timedOut[token] {
		return fmt.Errorf("TaskTimedOut: %w", ledger.ErrTaskGone)
	}
	s.beats[token]++
	return nil
}

func (s *stepFunctions) beatsOf(token string) (taken, calls int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.beats[token], s.beatCalls[token]
}

func (s *stepFunctions) get(token string) (taskAnswer, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.answers[token]
	return a, ok
}

// A batch's task token is answered once, when its first run ends:
// SendTaskSuccess with the census, status and results of a completed run
// and of one that exceeded its threshold, SendTaskFailure bulkrun.Cancelled
// for a cancelled one; finalize called again, the tick, and a resumed run
// answer nothing more. An answer refused by Step Functions (throttled) is
// sent again by the tick; one whose reply was lost is sent again and met
// with TaskTimedOut, and the run is marked announced: one answer per run.
func TestTaskTokenAnsweredOnceWhenTheFirstRunEnds(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, failOn3)
	sfn := &stepFunctions{}
	r.sub.Tasks, r.fin.Tasks = sfn, sfn
	zero := int64(0)
	submit := func(id string, th api.Threshold) {
		t.Helper()
		req := api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: items(10)}, Threshold: th, TaskToken: "token-" + id}
		for range 2 { // a repeated submit is the same batch
			if _, err := r.sub.Submit(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
	}
	finalizeTwice := func(id string, run int) {
		t.Helper()
		for range 2 {
			if _, err := r.fin.Finalize(ctx, id, run); err != nil {
				t.Fatal(err)
			}
		}
	}

	submit("done", api.Threshold{})
	r.drain(t, ctx, 1)
	finalizeTwice("done", 1)
	a, ok := sfn.get("token-done")
	switch {
	case !ok || a.name != "":
		t.Fatalf("completed run: answer %+v (%v), want SendTaskSuccess", a, ok)
	case a.output.BatchID != "done" || a.output.Run != 1 || a.output.Status != api.StatusCompleted ||
		a.output.Census.Total != 10 || a.output.Census.Failed != 1 || a.output.Verdict.Exceeded:
		t.Errorf("completed run's output %+v: want run 1 completed, 10 items, 1 failed, not exceeded", a.output)
	case a.output.Report != "s3://"+r.blobs.Bucket()+"/"+api.ReportKey("done", 1) || !strings.HasPrefix(a.output.Results.Manifest, "s3://") ||
		len(a.output.Results.Files) == 0:
		t.Errorf("completed run's output names report %q, results %+v", a.output.Report, a.output.Results)
	}

	submit("over", api.Threshold{FailureCount: &zero})
	r.drain(t, ctx, 1)
	finalizeTwice("over", 1)
	if a, ok := sfn.get("token-over"); !ok || a.name != "" || a.output.Status != api.StatusThresholdExceeded || !a.output.Verdict.Exceeded {
		t.Errorf("run over its threshold: answer %+v (%v), want SendTaskSuccess with status threshold_exceeded", a, ok)
	}

	submit("stopped", api.Threshold{})
	if _, err := r.ctl.Cancel(ctx, "stopped"); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	finalizeTwice("stopped", 1)
	if a, ok := sfn.get("token-stopped"); !ok || a.name != api.TaskErrorCancelled || a.cause == "" {
		t.Errorf("cancelled run: answer %+v (%v), want SendTaskFailure %s with a cause", a, ok, api.TaskErrorCancelled)
	}
	if sfn.attempts != 3 {
		t.Errorf("%d answers sent for 3 runs, want 3", sfn.attempts)
	}

	// A resumed run carries no token: nothing more is sent.
	if _, err := r.sub.Resume(ctx, "done"); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	finalizeTwice("done", 2)
	if _, err := r.fin.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if sfn.attempts != 3 {
		t.Errorf("%d answers sent after run 2 and a tick, want still 3", sfn.attempts)
	}

	// Throttled, then the reply lost: the tick sends again until it is
	// marked, and Step Functions took exactly one answer.
	sfn.refuse = 1
	submit("flaky", api.Threshold{})
	r.drain(t, ctx, 1)
	if _, err := r.fin.Finalize(ctx, "flaky", 1); err != nil {
		t.Fatal(err)
	}
	if _, ok := sfn.get("token-flaky"); ok {
		t.Fatal("a throttled answer was taken")
	}
	sfn.lose = 1
	for range 2 {
		if _, err := r.fin.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if a, ok := sfn.get("token-flaky"); !ok || a.output.Status != api.StatusCompleted {
		t.Errorf("flaky run: answer %+v (%v), want SendTaskSuccess completed", a, ok)
	}
	b, err := r.store.GetBatch(ctx, "flaky")
	if err != nil || b.PublishedRun != 1 {
		t.Errorf("flaky run: published run %d (%v), want 1", b.PublishedRun, err)
	}
	if sfn.attempts != 6 { // throttled, lost reply, TaskTimedOut
		t.Errorf("%d answers sent, want 6 (3 before, then throttled, lost, TaskTimedOut)", sfn.attempts)
	}
}

// A first run that cannot be finished answers bulkrun.FinalizeFailed
// once, with the reason; a batch refused by its background read answers
// bulkrun.Refused, naming the line.
func TestTaskTokenOfARunThatCannotEnd(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, failOn3)
	sfn := &stepFunctions{}
	r.sub.Tasks, r.fin.Tasks = sfn, sfn
	r.sub.Handoff = nopHandoff{}
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: "stuck", Pipeline: "counted", Source: api.SourceSpec{Items: items(5)}, TaskToken: "token-stuck"}); err != nil {
		t.Fatal(err)
	}
	r.drain(t, ctx, 1)
	r.fin.Blobs = reportRefused{r.blobs}
	for range finalize.FinalizeFailureLimit + 1 {
		if _, err := r.fin.Finalize(ctx, "stuck", 1); err == nil {
			t.Fatal("finalize with the report refused: no error")
		}
	}
	if a, ok := sfn.get("token-stuck"); !ok || a.name != api.TaskErrorFinalizeFailed || !strings.Contains(a.cause, "AccessDenied") {
		t.Errorf("finalize_failed: answer %+v (%v), want SendTaskFailure %s naming the error", a, ok, api.TaskErrorFinalizeFailed)
	}

	if err := r.blobs.Put(ctx, "in/bad.jsonl", "", []byte("{\"k\":\"a\"}\n{\"k\":\"a\"}\n")); err != nil {
		t.Fatal(err)
	}
	req := api.SubmitRequest{BatchID: "bad", Pipeline: "counted", KeyField: "k", TaskToken: "token-bad",
		Source: api.SourceSpec{Object: "s3://" + r.blobs.Bucket() + "/in/bad.jsonl"}}
	if _, err := r.sub.Accept(ctx, req); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if b, err := r.sub.Complete(ctx, "bad"); err != nil || b.Status != api.StatusRefused {
			t.Fatalf("bad source: %s %v, want refused", b.Status, err)
		}
	}
	if a, ok := sfn.get("token-bad"); !ok || a.name != api.TaskErrorRefused || !strings.Contains(a.cause, "line 2") {
		t.Errorf("refused: answer %+v (%v), want SendTaskFailure %s naming line 2", a, ok, api.TaskErrorRefused)
	}
	if sfn.attempts != 2 {
		t.Errorf("%d answers sent for 2 batches, want 2", sfn.attempts)
	}
}

// A task token is checked at submit: at most 2,048 bytes, one line, not
// with rerun; a repeated submit with another token is another plan (409),
// which names neither token.
func TestTaskTokenAtSubmit(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, failOn3)
	req := api.SubmitRequest{BatchID: "tok", Pipeline: "counted", Source: api.SourceSpec{Items: items(2)}}
	for _, bad := range []api.SubmitRequest{
		func() api.SubmitRequest {
			q := req
			q.TaskToken = strings.Repeat("t", api.MaxTaskTokenBytes+1)
			return q
		}(),
		func() api.SubmitRequest { q := req; q.TaskToken = "a\nb"; return q }(),
		func() api.SubmitRequest { q := req; q.TaskToken, q.Rerun = "t", true; return q }(),
	} {
		var ie *api.InputError
		if _, err := r.sub.Submit(ctx, bad); !errors.As(err, &ie) || ie.Field != "task_token" {
			t.Errorf("token of %d bytes, rerun %v: %v, want an input error naming task_token", len(bad.TaskToken), bad.Rerun, err)
		}
	}
	req.TaskToken = strings.Repeat("s", api.MaxTaskTokenBytes)
	if _, err := r.sub.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	b, err := r.store.GetBatch(ctx, "tok")
	if err != nil || b.TaskToken != req.TaskToken {
		t.Fatalf("stored token of %d bytes (%v), want %d", len(b.TaskToken), err, len(req.TaskToken))
	}
	if body, _ := json.Marshal(b.Batch); strings.Contains(string(body), "sss") {
		t.Errorf("the API's batch shows the token: %s", body)
	}
	other := req
	other.TaskToken = "another-token"
	_, err = r.sub.Submit(ctx, other)
	var me *api.MismatchError
	if !errors.As(err, &me) || me.Field != "task_token" {
		t.Fatalf("another token: %v, want batch_mismatch on task_token", err)
	}
	if msg := err.Error(); strings.Contains(msg, "another-token") || strings.Contains(msg, "sss") {
		t.Errorf("the mismatch echoes a token: %s", msg)
	}
	if got := []string{me.Stored, me.Given}; !slices.Equal(got, []string{"(a task token)", "(a task token)"}) {
		t.Errorf("mismatch shows %q", got)
	}
}

// task_heartbeat_seconds is checked at submit: only with a task token,
// from api.MinTaskHeartbeatSeconds (twice the 5-minute tick that sends
// them) to api.MaxTaskHeartbeatSeconds; it is kept on the row and is part
// of the plan (a repeated submit with another interval is a 409).
func TestTaskHeartbeatSecondsAtSubmit(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, failOn3)
	req := api.SubmitRequest{BatchID: "hb", Pipeline: "counted", Source: api.SourceSpec{Items: items(2)}, TaskToken: "token-hb"}
	for _, bad := range []struct {
		token string
		secs  int
	}{
		{"", 600}, {"token-hb", 599}, {"token-hb", 1}, {"token-hb", -1}, {"token-hb", api.MaxTaskHeartbeatSeconds + 1},
	} {
		q := req
		q.TaskToken, q.TaskHeartbeatSeconds = bad.token, bad.secs
		var ie *api.InputError
		_, err := r.sub.Submit(ctx, q)
		if !errors.As(err, &ie) || ie.Field != "task_heartbeat_seconds" {
			t.Errorf("task_heartbeat_seconds %d with token %q: %v, want an input error naming task_heartbeat_seconds", bad.secs, bad.token, err)
		}
	}
	for _, secs := range []int{api.MinTaskHeartbeatSeconds, api.MaxTaskHeartbeatSeconds} {
		q := req
		q.BatchID, q.TaskHeartbeatSeconds = fmt.Sprintf("hb-%d", secs), secs
		if _, err := r.sub.Submit(ctx, q); err != nil {
			t.Fatalf("task_heartbeat_seconds %d: %v", secs, err)
		}
		if b, err := r.store.GetBatch(ctx, q.BatchID); err != nil || b.TaskHeartbeat != secs {
			t.Errorf("stored heartbeat %d (%v), want %d", b.TaskHeartbeat, err, secs)
		}
	}
	q := req
	q.BatchID, q.TaskHeartbeatSeconds = "hb-600", 900
	var me *api.MismatchError
	if _, err := r.sub.Submit(ctx, q); !errors.As(err, &me) || me.Field != "task_heartbeat_seconds" {
		t.Errorf("another interval: %v, want batch_mismatch on task_heartbeat_seconds", err)
	}
}

// A stack whose finalize tick is slower than 5 minutes (its
// FinalizeTickSchedule's period, config.EnvTickSeconds, as
// Submitter.TickPeriod) refuses a task_heartbeat_seconds shorter than
// twice that period — 400 naming the field and the tick's period — and
// takes twice the period; a faster tick keeps the least at
// api.MinTaskHeartbeatSeconds.
func TestTaskHeartbeatSecondsFollowTheTick(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, failOn3)
	req := api.SubmitRequest{Pipeline: "counted", Source: api.SourceSpec{Items: items(2)}, TaskToken: "token-tick"}
	r.sub.TickPeriod = 30 * time.Minute
	for _, secs := range []int{api.MinTaskHeartbeatSeconds, 3599} {
		q := req
		q.BatchID, q.TaskHeartbeatSeconds = fmt.Sprintf("tick-%d", secs), secs
		var ie *api.InputError
		_, err := r.sub.Submit(ctx, q)
		if !errors.As(err, &ie) || ie.Field != "task_heartbeat_seconds" || !strings.Contains(err.Error(), "3600 to") || !strings.Contains(err.Error(), "every 1800 seconds") {
			t.Errorf("task_heartbeat_seconds %d under a 30-minute tick: %v, want an input error naming task_heartbeat_seconds, its least 3600 and the tick's 1800 seconds", secs, err)
		}
		if _, err := r.store.GetBatch(ctx, q.BatchID); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("a refused heartbeat left batch %s: %v", q.BatchID, err)
		}
	}
	q := req
	q.BatchID, q.TaskHeartbeatSeconds = "tick-3600", 3600
	if _, err := r.sub.Submit(ctx, q); err != nil {
		t.Fatalf("task_heartbeat_seconds 3600 under a 30-minute tick: %v", err)
	}
	r.sub.TickPeriod = 2 * time.Minute
	q.BatchID, q.TaskHeartbeatSeconds = "tick-fast", api.MinTaskHeartbeatSeconds
	if _, err := r.sub.Submit(ctx, q); err != nil {
		t.Fatalf("task_heartbeat_seconds %d under a 2-minute tick: %v", api.MinTaskHeartbeatSeconds, err)
	}
	q.BatchID, q.TaskHeartbeatSeconds = "tick-fast-short", api.MinTaskHeartbeatSeconds-1
	if _, err := r.sub.Submit(ctx, q); err == nil {
		t.Error("a heartbeat under api.MinTaskHeartbeatSeconds was taken under a fast tick")
	}
}

// A first run whose submit asked for heartbeats (task_heartbeat_seconds)
// sends its task one SendTaskHeartbeat on every finalize tick while it
// goes: submitting, running and paused; none
// for a batch without a token or an interval, none after its run ended.
// A throttled heartbeat is sent again next tick. A task gone
// (TaskTimedOut) stops the heartbeats, marked on the row, and the run
// goes on to the same outcomes as a run without heartbeats.
func TestTaskHeartbeatsWhileTheFirstRunGoes(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, failOn3)
	sfn := &stepFunctions{}
	r.sub.Tasks, r.fin.Tasks = sfn, sfn
	r.sub.Handoff = nopHandoff{}
	submit := func(id, token string, beat int) {
		t.Helper()
		req := api.SubmitRequest{BatchID: id, Pipeline: "counted", Source: api.SourceSpec{Items: items(10)}, TaskToken: token, TaskHeartbeatSeconds: beat}
		if _, err := r.sub.Submit(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	ticks := func(n int) {
		t.Helper()
		for range n {
			if _, err := r.sub.TickSubmitting(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := r.fin.Tick(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	submit("beat", "token-beat", api.MinTaskHeartbeatSeconds)
	submit("quiet", "token-quiet", 0) // a token, no heartbeats asked for
	submit("plain", "", 0)
	if err := r.blobs.Put(ctx, "in/slow.jsonl", "", []byte("{\"k\":\"a\"}\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.sub.Accept(ctx, api.SubmitRequest{BatchID: "slow", Pipeline: "counted", KeyField: "k", TaskToken: "token-slow",
		TaskHeartbeatSeconds: 900, Source: api.SourceSpec{Object: "s3://" + r.blobs.Bucket() + "/in/slow.jsonl"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ctl.Pause(ctx, "beat"); err != nil {
		t.Fatal(err)
	}
	ticks(1)
	if _, err := r.ctl.Unpause(ctx, "beat"); err != nil {
		t.Fatal(err)
	}
	ticks(1)
	if n, _ := sfn.beatsOf("token-beat"); n != 2 {
		t.Errorf("paused then running batch: %d heartbeats after 2 ticks, want 2", n)
	}
	if n, _ := sfn.beatsOf("token-slow"); n != 2 {
		t.Errorf("submitting batch: %d heartbeats after 2 ticks, want 2 (one per finalize tick)", n)
	}
	if _, calls := sfn.beatsOf("token-quiet"); calls != 0 {
		t.Errorf("batch without task_heartbeat_seconds: %d heartbeats, want none", calls)
	}
	if len(sfn.beatCalls) != 2 {
		t.Errorf("heartbeats sent to %v, want only token-beat and token-slow", sfn.beatCalls)
	}

	// Throttled: logged, and the next tick sends them.
	sfn.beatRefuse = 2
	if res, err := r.fin.Tick(ctx); err != nil || res.Beats != 0 {
		t.Fatalf("throttled heartbeats: tick %+v, %v; want no error, none sent", res, err)
	}
	if res, err := r.fin.Tick(ctx); err != nil || res.Beats != 2 {
		t.Fatalf("tick after throttled heartbeats: %+v, %v; want both sent", res, err)
	}

	// A tick left less than a minute does none of its other work, but
	// the heartbeats go first.
	short, cancel := context.WithTimeout(ctx, 30*time.Second)
	res, err := r.fin.Tick(short)
	cancel()
	if err != nil || res.Beats != 2 {
		t.Fatalf("tick short of time: %+v, %v; want both heartbeats sent", res, err)
	}

	// The task timed out: one TaskTimedOut stops the heartbeats for good;
	// the run is not touched and ends as any run does.
	sfn.mu.Lock()
	sfn.timedOut = map[string]bool{"token-beat": true}
	sfn.mu.Unlock()
	_, before := sfn.beatsOf("token-beat")
	ticks(3)
	if _, calls := sfn.beatsOf("token-beat"); calls != before+1 {
		t.Errorf("after TaskTimedOut: %d more heartbeats sent in 3 ticks, want 1 (the one told the task is gone)", calls-before)
	}
	b, err := r.store.GetBatch(ctx, "beat")
	if err != nil || !b.TaskGone || b.Status != api.StatusRunning {
		t.Fatalf("batch whose task is gone: %s, task gone %v (%v); want running, marked gone", b.Status, b.TaskGone, err)
	}
	// The resume put the downstream in slow start from
	// pace.AdaptResume (its units lease places in line, due as the
	// clock moves): this rig's clock stands still, so it moves past
	// the ramp's end (≈ 11 s) once.
	r.clock.T = r.clock.T.Add(15 * time.Second)
	r.drain(t, ctx, 1)
	for _, id := range []string{"beat", "plain"} {
		if _, err := r.fin.Finalize(ctx, id, 1); err != nil {
			t.Fatal(err)
		}
	}
	beat, _ := r.store.GetBatch(ctx, "beat")
	plain, _ := r.store.GetBatch(ctx, "plain")
	if beat.Status != api.StatusCompleted || beat.FinalCensus == nil || plain.FinalCensus == nil ||
		beat.FinalCensus.Succeeded != plain.FinalCensus.Succeeded || beat.FinalCensus.Failed != plain.FinalCensus.Failed || beat.FinalCensus.Failed != 1 {
		t.Errorf("run whose task is gone: %s %+v; want completed with the census of the same run without a task (%+v)", beat.Status, beat.FinalCensus, plain.FinalCensus)
	}

	// A run that ended sends no more heartbeats.
	submit("ends", "token-ends", 3600)
	ticks(1)
	r.drain(t, ctx, 1)
	if _, err := r.fin.Finalize(ctx, "ends", 1); err != nil {
		t.Fatal(err)
	}
	if a, ok := sfn.get("token-ends"); !ok || a.output.Status != api.StatusCompleted {
		t.Fatalf("ended run: answer %+v (%v), want SendTaskSuccess completed", a, ok)
	}
	ticks(2)
	if n, calls := sfn.beatsOf("token-ends"); n != 1 || calls != 1 {
		t.Errorf("ended run: %d heartbeats (%d sent), want the one of its running tick and none after its end", n, calls)
	}
	// A later run (resume) answers no task, so it sends no heartbeat.
	if _, err := r.sub.Resume(ctx, "ends"); err != nil {
		t.Fatal(err)
	}
	ticks(2)
	if _, calls := sfn.beatsOf("token-ends"); calls != 1 {
		t.Errorf("resumed run 2: %d heartbeats sent in all, want still 1", calls)
	}
}
