//go:build integration

package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/bulkrun/bulkrun/integration/testbed/apigw"
	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Item keys in paths: each awkward key released through the deployed REST
// API (shared/client, as the CLI sends it) releases exactly that item, and
// no other. Guards "POST /batches/{id}/items/{key}/release" (docs/api.md "Using
// it"): releasing a/b must never release a%2Fb. The items are quarantined
// in this process on the stack's own table, so the API reads them. Keys
// with an empty path segment ("a//b", a leading or trailing "/") are left
// out: MiniStack drops empty segments from the path parameters (see
// localstack/README.md); the unit test TestItemKeysInPaths covers them.
func TestItemKeysInPathsRelease(t *testing.T) {
	t.Parallel() // its own batches and receiver route: beside the other parallel tests
	ctx := context.Background()
	keys := []string{"a/b", "a%2Fb", "100%", "%", "a+b", "a b", "naïve/日本語", "émoji 🎉", "?x#y", ".", "..", "release", "x/release", "items/y", "report"}
	id := quarantinedBatch(t, keys, func(string) bool { return true })
	released := func() []string {
		t.Helper()
		var out []string
		cursor := ""
		for {
			p, err := env.api.Items(ctx, id, api.OutcomeQuarantined, cursor, 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range p.Items {
				if it.Released {
					out = append(out, it.Key)
				}
			}
			if cursor = p.NextCursor; cursor == "" {
				sort.Strings(out)
				return out
			}
		}
	}
	var want []string
	for _, k := range keys {
		if err := env.api.Release(ctx, id, k); err != nil {
			t.Errorf("release %q: %v", k, err)
			continue
		}
		want = append(want, k)
		sort.Strings(want)
		if got := released(); !equalStrings(got, want) {
			t.Fatalf("after releasing %q the released items are %q, want %q", k, got, want)
		}
	}
	if err := env.api.Release(ctx, id, "a/b/c"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("release of a key the batch does not hold: %v, want not_found", err)
	}
}

// quarantinedBatch submits a batch of keys (field k) in this process on
// the stack's own table and bucket, so that the deployed API reads it,
// runs it with a pipeline that quarantines the items quarantine says and
// succeeds the others, finalizes it, and returns its id; the batch is
// forgotten when the test ends.
func quarantinedBatch(t *testing.T, keys []string, quarantine func(key string) bool) string {
	t.Helper()
	ctx := context.Background()
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		if quarantine(req.Key) {
			return pipeline.Result{}, pipeline.Quarantine(errors.New("set aside"))
		}
		return pipeline.Result{}, nil
	})
	h.submitter.Store, h.submitter.Blobs = env.store, env.blobs
	h.worker.Store, h.worker.Blobs = env.store, env.blobs
	h.finalizer.Store, h.finalizer.Blobs = env.store, env.blobs
	id := newID(t)
	items := make([]map[string]string, len(keys))
	var want int64
	for i, k := range keys {
		items[i] = map[string]string{"k": k}
		if quarantine(k) {
			want++
		}
	}
	src, _ := json.Marshal(items)
	if _, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", KeyField: "k", Source: api.SourceSpec{Items: src}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.api.Forget(context.Background(), id) })
	for {
		ds := h.receive(t, 10)
		if len(ds) == 0 {
			break
		}
		h.worker.Handle(ctx, ds)
	}
	rep, err := finalizeBeside(ctx, h.finalizer, id, 1) // the stack's tick may finalize it too
	if err != nil || rep.Report.Census.Quarantined != want || rep.Report.Census.Succeeded != int64(len(keys))-want {
		t.Fatalf("finalize: %+v %v, want %d quarantined", rep.Report.Census, err, want)
	}
	return id
}

// TestCLIReleaseAll runs `bulkrun release ID --all` (docs/operations.md)
// against the deployed stack: of a finished batch of 12 items, the 7 the
// pipeline quarantined (keys holding a slash and a space) are released
// and listed so, and the command names their count and every key, none
// of the 5 that succeeded.
func TestCLIReleaseAll(t *testing.T) {
	t.Parallel()
	run := cliRunner(t)
	var keys, quarantined []string
	for i := range 12 {
		k := fmt.Sprintf("ok-%d", i)
		if i%2 == 0 || i == 11 {
			k = fmt.Sprintf("q/%d x", i)
			quarantined = append(quarantined, k)
		}
		keys = append(keys, k)
	}
	id := quarantinedBatch(t, keys, func(k string) bool { return strings.HasPrefix(k, "q/") })

	out, _, code := run("release", id, "--all", "-o", "json")
	var got struct {
		BatchID  string   `json:"batch_id"`
		Released int      `json:"released"`
		Keys     []string `json:"keys"`
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
		t.Fatalf("release --all: exit %d, %s (%v)", code, out, err)
	}
	sort.Strings(got.Keys)
	sort.Strings(quarantined)
	if got.BatchID != id || got.Released != len(quarantined) || !equalStrings(got.Keys, quarantined) {
		t.Fatalf("release --all answered %+v, want the %d quarantined keys %q", got, len(quarantined), quarantined)
	}
	p, err := env.api.Items(context.Background(), id, api.OutcomeQuarantined, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, it := range p.Items {
		if !it.Released {
			t.Errorf("quarantined item %q not released", it.Key)
		}
		listed = append(listed, it.Key)
	}
	if sort.Strings(listed); !equalStrings(listed, quarantined) {
		t.Errorf("quarantined items %q, want %q", listed, quarantined)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCLIKeysSignedAsAPIGatewayVerifies: the CLI's release and quarantine
// calls with item keys of every character class pass a SigV4 check made
// as API Gateway makes it (integration/testbed/apigw: each path segment
// encoded twice, the query as sent), which MiniStack does not make: the
// CLI talks to a fault proxy of this test's own that verifies every
// execute-api call against the emulator's credentials (test/test) and
// answers a mismatch 403. A call signed with another secret is refused
// (the check is on); `bulkrun items ID --outcome quarantined --all`
// lists every key, `bulkrun release ID KEY` releases each, and
// `bulkrun list --source` finds a batch by a source with a space. Keys
// with an empty path segment are left out (MiniStack drops them; see
// TestItemKeysInPathsRelease).
func TestCLIKeysSignedAsAPIGatewayVerifies(t *testing.T) {
	t.Parallel()
	p, err := faultproxy.New(os.Getenv("AWS_ENDPOINT_URL"), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.SetGate(&apigw.Gate{Secrets: map[string]string{"test": "test"}})
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)

	// The check is on: a call signed with another secret is refused.
	u := srv.URL + strings.TrimPrefix(apiBase(t), strings.TrimRight(os.Getenv("AWS_ENDPOINT_URL"), "/")) + "/batches/any-batch"
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	sum := sha256.Sum256(nil)
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: "test", SecretAccessKey: "not-the-secret"}, req,
		hex.EncodeToString(sum[:]), apigw.Service, env.aws.Region, time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	refusal, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(refusal), "does not match") {
		t.Fatalf("a call signed with another secret: %d %.300s, want 403 from the signature check", resp.StatusCode, refusal)
	}

	keys := []string{"plain", "a/b", "a%2Fb", "100%", "%", "a+b", "a b", "a  b", "naïve/日本語", "émoji 🎉", "?x#y", "&=;:@$,!'()*",
		"~-_.", ".", "..", "x/release", `back\slash "q"`, "tab\there", "<tag>"}
	id := quarantinedBatch(t, keys, func(string) bool { return true })
	run := cliRunnerEnv(t, "AWS_ENDPOINT_URL="+srv.URL)
	run("list", "--limit", "1") // the CLI's first call, signed
	out, _, code := run("items", id, "--outcome", "quarantined", "--all", "--limit", "4", "-o", "json")
	if code != 0 {
		t.Fatalf("items --outcome quarantined --all: exit %d", code)
	}
	var all api.ItemPage
	if err := json.Unmarshal([]byte(out), &all); err != nil {
		t.Fatalf("items: %v\n%s", err, out)
	}
	var listed []string
	for _, it := range all.Items {
		listed = append(listed, it.Key)
	}
	want := append([]string(nil), keys...)
	if sort.Strings(listed); !equalStrings(listed, sortedCopy(want)) {
		t.Errorf("quarantined items listed %q, want %q", listed, sortedCopy(want))
	}
	for _, k := range keys {
		if _, _, code := run("release", id, k); code != 0 {
			t.Errorf("release %q: exit %d", k, code)
		}
	}
	page, err := env.api.Items(context.Background(), id, api.OutcomeQuarantined, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range page.Items {
		if !it.Released {
			t.Errorf("%q not released", it.Key)
		}
	}
	if _, _, code := run("list", "--source", "s3://"+env.bucket+"/incoming/"+id+" with a space.csv"); code != 0 {
		t.Errorf("list --source with a space: exit %d", code)
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
