package event

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/bulkrun/bulkrun/shared/ledger"
)

// Tasks sends SendTaskSuccess, SendTaskFailure and SendTaskHeartbeat as
// Step Functions takes them (JSON 1.0, the token, output, error and
// cause), and reads
// TaskTimedOut, TaskDoesNotExist and InvalidToken as ErrTaskGone, any
// other error as itself.
func TestTasksAnswersAndTokensGone(t *testing.T) {
	var got []map[string]string
	answer := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var m map[string]string
		if err := json.Unmarshal(body, &m); err != nil {
			t.Errorf("body %s: %v", body, err)
		}
		m["target"] = r.Header.Get("X-Amz-Target")
		got = append(got, m)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		if answer != "" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"__type":"com.amazonaws.swf.service.v2.model#`+answer+`","message":"no"}`)
			return
		}
		_, _ = io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	client := sfn.NewFromConfig(aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")})
	tasks := NewTasks(client)
	ctx := context.Background()
	if err := tasks.Succeed(ctx, "tok-1", []byte(`{"status":"completed"}`)); err != nil {
		t.Fatal(err)
	}
	if err := tasks.Fail(ctx, "tok-2", "bulkrun.Cancelled", "cancelled by a caller"); err != nil {
		t.Fatal(err)
	}
	if err := tasks.Heartbeat(ctx, "tok-3"); err != nil {
		t.Fatal(err)
	}
	want := []map[string]string{
		{"target": "AWSStepFunctions.SendTaskSuccess", "taskToken": "tok-1", "output": `{"status":"completed"}`},
		{"target": "AWSStepFunctions.SendTaskFailure", "taskToken": "tok-2", "error": "bulkrun.Cancelled", "cause": "cancelled by a caller"},
		{"target": "AWSStepFunctions.SendTaskHeartbeat", "taskToken": "tok-3"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d calls, want %d", len(got), len(want))
	}
	for i, w := range want {
		for k, v := range w {
			if got[i][k] != v {
				t.Errorf("call %d: %s = %q, want %q", i, k, got[i][k], v)
			}
		}
	}
	for _, name := range []string{"TaskTimedOut", "TaskDoesNotExist", "InvalidToken"} {
		answer = name
		if err := tasks.Succeed(ctx, "tok", []byte(`{}`)); !errors.Is(err, ledger.ErrTaskGone) {
			t.Errorf("%s: %v, want ErrTaskGone", name, err)
		}
		if err := tasks.Heartbeat(ctx, "tok"); !errors.Is(err, ledger.ErrTaskGone) {
			t.Errorf("heartbeat %s: %v, want ErrTaskGone", name, err)
		}
	}
	answer = "InvalidOutput"
	if err := tasks.Succeed(ctx, "tok", []byte(`{}`)); err == nil || errors.Is(err, ledger.ErrTaskGone) {
		t.Errorf("InvalidOutput: %v, want an error other than ErrTaskGone", err)
	}
}
