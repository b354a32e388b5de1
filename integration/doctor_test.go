//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/bulkrun/bulkrun/cmd/bulkrun/doctor"
	"github.com/bulkrun/bulkrun/shared/config"
)

// TestDoctor runs `bulkrun doctor` against the emulator's APIs: it says
// it talks to the emulator (AWS_ENDPOINT_URL, account 000000000000); on
// the deployed stack every check answers (the concurrency quota the
// emulator reports, informational there: only an AWS account can change
// it; the API Gateway CloudWatch role the stack set; the bucket, the
// source buckets, the alarm topic, the alarms, the queues, the batches)
// and the exit status follows the checks; a parked dead letter is a fix
// naming the runbook; and for a stack about to be deployed, event sources
// the account cannot run (a fix with --target aws, informational on the
// emulator), a bucket name that is taken and item's reservation below its
// event sources (the stack's own settings) are fixes naming what to do.
// Exit status 1 whenever a check says fix. (The preflight against varied
// accounts: TestPreflight.)
func TestDoctor(t *testing.T) {
	ctx := context.Background()
	bin := filepath.Join(t.TempDir(), "bulkrun")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/bulkrun").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	runDoctor := func(args ...string) (map[string]doctor.Check, int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"doctor", "-o", "json"}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		var checks []doctor.Check
		if err := json.Unmarshal(stdout.Bytes(), &checks); err != nil {
			t.Fatalf("doctor %v: %v\n%s\n%s", args, err, stdout.String(), stderr.String())
		}
		byName := map[string]doctor.Check{}
		for _, c := range checks {
			byName[c.Check] = c
			t.Logf("doctor %v: %-4s %-20s %s %s", args, c.Status, c.Check, c.Detail, c.Fix)
		}
		return byName, code
	}

	got, code := runDoctor()
	for _, name := range []string{"target", "concurrency", "api-gateway-logging", "bucket", "source-buckets", "alarm-topic", "alarms", "queues", "batches"} {
		if _, ok := got[name]; !ok {
			t.Errorf("deployed stack: no %s check", name)
		}
	}
	if c := got["target"]; c.Status != doctor.OK || !strings.Contains(c.Detail, "the emulator") || !strings.Contains(c.Detail, "000000000000") {
		t.Errorf("target: %+v, want it to say the emulator and its account", c)
	}
	if c := got["concurrency"]; c.Status == doctor.Fix || c.Status == doctor.Warn || !strings.Contains(c.Detail, "account quota") {
		t.Errorf("concurrency (informational on the emulator): %+v", c)
	}
	if c := got["api-gateway-logging"]; c.Status != doctor.OK || !strings.Contains(c.Detail, "ApiGatewayCloudWatchRole") {
		t.Errorf("api-gateway-logging, the role the stack set: %+v", c)
	}
	if c := got["bucket"]; c.Status != doctor.OK || !strings.Contains(c.Detail, env.bucket) {
		t.Errorf("bucket: %+v", c)
	}
	// The stack is shared with the suite's other tests, whose injected
	// failures may set some of its alarms off: the check must count them
	// and say what to do whenever one is in ALARM.
	m := alarmsDetail.FindStringSubmatch(got["alarms"].Detail)
	if m == nil {
		t.Errorf("alarms: %+v, want \"N alarms, M in ALARM\"", got["alarms"])
	} else if total, _ := strconv.Atoi(m[1]); total < 10 {
		t.Errorf("alarms: %+v, want the stack's alarms counted", got["alarms"])
	} else if c := got["alarms"]; (m[2] == "0") != (c.Status == doctor.OK) || (c.Status != doctor.OK && !strings.Contains(c.Fix, "docs/operations.md")) {
		t.Errorf("alarms: %+v, want ok with 0 in ALARM, else fix naming the runbook", c)
	}
	// The exit status follows the checks: 1 exactly when one says fix
	// (an alarm another test set off may). What only an AWS account can
	// fix is informational on the emulator, never a fix: with none in
	// ALARM, a healthy stack exits 0.
	if want := exitFor(got); code != want {
		t.Errorf("exit status %d, want %d (1 exactly when a check says fix)", code, want)
	}
	for _, name := range []string{"target", "concurrency", "api-gateway-logging", "bucket"} {
		if c := got[name]; c.Status == doctor.Fix {
			t.Errorf("%s says fix on the emulator's healthy stack: %+v", name, c)
		}
	}

	// Flags on a deployed stack (a change about to be deployed) apply over
	// what the stack asks: the pollers given are checked, and what no flag
	// says is still read from the stack (its source buckets known, not
	// "unknown: pass --template").
	got, _ = runDoctor("--items-minimum-pollers", "2", "--items-maximum-pollers", "20")
	if c := got["concurrency"]; !strings.Contains(c.Detail, "ItemsMaximumPollers 20") {
		t.Errorf("concurrency with --items-maximum-pollers 20: %+v, want the pollers given counted", c)
	}
	if c := got["source-buckets"]; c.Status != doctor.OK || strings.Contains(c.Detail, "unknown") {
		t.Errorf("source-buckets with plan flags on a deployed stack: %+v, want the stack's own read", c)
	}

	// A parked dead letter: the queues check says what to do.
	parking, err := env.stack.Get(config.OutputParkingQueueURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &parking, MessageBody: aws.String(`{"doctor":"parked"}`)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.sqs.PurgeQueue(context.Background(), &sqs.PurgeQueueInput{QueueUrl: &parking}) })
	got, _ = runDoctor()
	if c := got["queues"]; c.Status != doctor.Fix || !parkedDetail.MatchString(c.Detail) || !strings.Contains(c.Fix, "Parked dead letters") {
		t.Errorf("queues with a parked dead letter: %+v", c)
	}

	// About to deploy: event sources the account cannot run, a taken name
	// (the AWS target: the account's findings count).
	got, code = runDoctor("--target", "aws", "--stack", "bulkrun-not-deployed", "--items-max-concurrency", "1000", "--bucket-name", env.bucket, "--api-gateway-account")
	if c := got["concurrency"]; c.Status != doctor.Fix || !strings.Contains(c.Fix, "event-sources-fit-unreserved") {
		t.Errorf("concurrency of 2 × 1000 event sources: %+v", c)
	}
	if c, _ := runDoctor("--stack", "bulkrun-not-deployed", "--items-max-concurrency", "1000"); c["concurrency"].Status != doctor.Info || !strings.Contains(c["concurrency"].Fix, "event-sources-fit-unreserved") {
		t.Errorf("concurrency of 2 × 1000 event sources on the emulator: %+v, want informational (the account's quota), naming the rule", c["concurrency"])
	}
	if c := got["bucket"]; c.Status != doctor.Fix || !strings.Contains(c.Detail, "already exists") {
		t.Errorf("a fixed name that exists: %+v", c)
	}
	if c := got["api-gateway-logging"]; c.Status != doctor.OK {
		t.Errorf("api-gateway-logging with ApiGatewayAccount: %+v", c)
	}
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	got, _ = runDoctor("--target", "aws", "--stack", "bulkrun-not-deployed", "--items-max-concurrency", "100", "--reserved-concurrency", "item=100")
	if c := got["concurrency"]; c.Status != doctor.Fix || !strings.Contains(c.Fix, "reserved-covers-event-sources") {
		t.Errorf("item reserved for one event source of two: %+v", c)
	}
}

var (
	alarmsDetail = regexp.MustCompile(`^(\d+) alarms, (\d+) in ALARM`)
	parkedDetail = regexp.MustCompile(`parking [1-9]\d* visible`)
)

// exitFor is the exit status doctor owes for its checks: 1 when any says
// fix, else 0.
func exitFor(checks map[string]doctor.Check) int {
	for _, c := range checks {
		if c.Status == doctor.Fix {
			return 1
		}
	}
	return 0
}
