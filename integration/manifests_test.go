//go:build integration

package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/internal/handler"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
)

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// nothingUnder fails the test when the batch exists or left any object or
// multipart upload under batches/{id}/.
func nothingUnder(t *testing.T, id string) {
	t.Helper()
	if _, err := env.api.Status(context.Background(), id); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("status after a refused submit: %v, want not found", err)
	}
	noManifest(t, id)
}

// Product line: an empty source is refused with code empty_source, and
// nothing is created. Empty before any read (no items inline, an object of
// 0 bytes, a prefix without objects): 400 at submit, no batch row. Blank
// lines only, found by the background read of an S3 object: the batch is
// refused with code empty_source, no manifest, no item; a repeat gets 400.
func TestEmptySourceIsRefusedAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	hook := json.RawMessage(`{"url":"http://127.0.0.1:9/unused"}`)
	for _, tc := range []struct {
		name       string
		src        func(id string) api.SourceSpec
		field      string
		background bool
	}{
		{"inline empty array", func(string) api.SourceSpec { return api.SourceSpec{Items: json.RawMessage(`[]`)} }, "source.items", false},
		{"object of 0 bytes", func(id string) api.SourceSpec {
			return api.SourceSpec{Object: putObject(t, "it-sources/"+id+"/empty.jsonl", "")}
		}, "source.object", false},
		{"prefix without objects", func(id string) api.SourceSpec {
			return api.SourceSpec{Prefix: "s3://" + env.bucket + "/it-sources/" + id + "/none/"}
		}, "source.prefix", false},
		{"blank jsonl", func(id string) api.SourceSpec {
			return api.SourceSpec{Object: putObject(t, "it-sources/"+id+"/blank.jsonl", "\n  \r\n\t\n")}
		}, "source.object", true},
		{"csv with a sep line and a header only", func(id string) api.SourceSpec {
			return api.SourceSpec{Object: putObject(t, "it-sources/"+id+"/empty.csv", "sep=;\r\nid;name\r\n")}
		}, "source.object", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := newID(t)
			req := api.SubmitRequest{BatchID: id, Pipeline: "webhook", Options: hook, Source: tc.src(id)}
			_, err := env.api.Submit(ctx, req)
			var ae *client.APIError
			if !tc.background {
				if !errors.As(err, &ae) || ae.Status != 400 || ae.Body.Code != "empty_source" || ae.Body.Field != tc.field {
					t.Fatalf("err = %v (%+v), want 400 empty_source on %s", err, ae, tc.field)
				}
				nothingUnder(t, id)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			v, err := env.api.Submitted(ctx, id, 300*time.Millisecond)
			if err != nil || v.Status != api.StatusRefused || v.Refusal == nil || v.Refusal.Code != "empty_source" || v.Refusal.Field != tc.field || v.ItemCount != 0 {
				t.Fatalf("batch %s: %s %+v %v, want refused empty_source on %s", id, v.Status, v.Refusal, err, tc.field)
			}
			// A refused batch does not hold its id: the repeat is read
			// afresh and refused again.
			if v, err := env.api.Submit(ctx, req); err != nil || v.Status != api.StatusSubmitting {
				t.Fatalf("repeat: %s %v, want accepted (submitting)", v.Status, err)
			}
			if v, err = env.api.Submitted(ctx, id, 300*time.Millisecond); err != nil || v.Status != api.StatusRefused || v.Refusal == nil || v.Refusal.Code != "empty_source" {
				t.Fatalf("repeat: batch %s: %s %+v %v, want refused empty_source", id, v.Status, v.Refusal, err)
			}
			noManifest(t, id)
		})
	}
}

// noManifest fails the test when any object or multipart upload is left
// under batches/{id}/ (a refused batch keeps only its row).
func noManifest(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	out, err := env.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &env.bucket, Prefix: aws.String("batches/" + id + "/")})
	if err != nil || len(out.Contents) != 0 {
		t.Fatalf("objects left under the batch: %d (%v)", len(out.Contents), err)
	}
	uploads, err := env.s3.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &env.bucket, Prefix: aws.String("batches/" + id + "/")})
	if err == nil && len(uploads.Uploads) != 0 {
		t.Fatalf("multipart uploads left: %d", len(uploads.Uploads))
	}
}

// Product line: stop_on_threshold false runs every item once and judges
// the threshold at the end: no item cancelled, the run threshold_exceeded.
// The same batch with the default early stop cancels items
// (TestThresholdStopsTheRun: 300 slow failing items, threshold 2).
func TestStopOnThresholdFalseRunsEveryItem(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	const n = 300
	url := env.hook.route(id, func(key string, _ int) int {
		time.Sleep(10 * time.Millisecond)
		if key == "item-0000000007" {
			return 200
		}
		return 422
	})
	req := webhookRequest(id, url, inlineItems(n))
	two, no := int64(2), false
	req.Threshold.FailureCount = &two
	req.StopOnThreshold = &no
	if _, err := env.api.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	v := wait(t, id)
	if v.EarlyStop() || v.StopOnThreshold == nil {
		t.Fatalf("batch row: stop_on_threshold %v, want false stored", v.StopOnThreshold)
	}
	rep, err := env.api.Report(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Census
	if rep.Status != api.StatusThresholdExceeded || c.Failed != n-1 || c.Succeeded != 1 || c.Cancelled != 0 || !rep.Verdict.Exceeded {
		t.Fatalf("status %s census %+v verdict %+v", rep.Status, c, rep.Verdict)
	}
	calls := env.hook.counts(id)
	for i := range n {
		if k := api.PositionalKey(int64(i)); calls[k] != 1 {
			t.Errorf("%s: %d calls, want 1", k, calls[k])
		}
	}
	if rows := rowsCensus(t, id); !sameCounts(rows, c) {
		t.Fatalf("rows %+v, report %+v", rows, c)
	}
}

// Product line: sources as people export them run end to end — gzip by
// Content-Encoding or by name (also from the CLI), a semicolon CSV with
// Excel's sep= line, integer keys — and an encoding other than UTF-8 or a
// corrupt gzip is refused naming it (the background read refuses the
// batch), writing no manifest.
func TestSpreadsheetAndGzipSourcesRun(t *testing.T) {
	ctx := context.Background()
	put := func(t *testing.T, key string, body []byte, encoding string) string {
		t.Helper()
		in := &s3.PutObjectInput{Bucket: &env.bucket, Key: &key, Body: bytes.NewReader(body)}
		if encoding != "" {
			in.ContentEncoding = &encoding
		}
		if _, err := env.s3.PutObject(ctx, in); err != nil {
			t.Fatal(err)
		}
		return "s3://" + env.bucket + "/" + key
	}
	for _, tc := range []struct {
		name, object string
		body         []byte
		encoding     string
		keyField     string
		want         []string
	}{
		{"jsonl stored with Content-Encoding gzip and integer keys", "orders.jsonl", gzipped(t, "{\"order_id\":1001}\n \n{\"order_id\":1002,\"note\":\"x\"}\n"), "gzip", "order_id", []string{"1001", "1002"}},
		{"semicolon csv gz with a sep line", "export.CSV.GZ", gzipped(t, "\xEF\xBB\xBFsep=;\r\nsku;name;qty\r\nA1;Widget, large;12\r\n   \r\nB2;Nut;3\r\n"), "", "sku", []string{"A1", "B2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := newID(t)
			url := env.hook.route(id, nil)
			uri := put(t, "it-sources/"+id+"/"+tc.object, tc.body, tc.encoding)
			req := api.SubmitRequest{BatchID: id, Pipeline: "webhook", KeyField: tc.keyField, Source: api.SourceSpec{Object: uri},
				Options: []byte(fmt.Sprintf(`{"url":%q}`, url))}
			if _, err := env.api.Submit(ctx, req); err != nil {
				t.Fatal(err)
			}
			if v := wait(t, id); v.Census.Succeeded != int64(len(tc.want)) || v.ItemCount != int64(len(tc.want)) {
				t.Fatalf("census %+v", v.Census)
			}
			calls := env.hook.counts(id)
			for _, k := range tc.want {
				if calls[k] != 1 {
					t.Errorf("key %q: %d calls (all: %v)", k, calls[k], calls)
				}
			}
		})
	}

	for _, tc := range []struct {
		name, object string
		body         []byte
		want         string
	}{
		{"utf-16 csv", "unicode.csv", append([]byte{0xFF, 0xFE}, 'i', 0, 'd', 0, '\n', 0), "UTF-16"},
		{"corrupt gzip", "orders.jsonl.gz", append(gzipped(t, "{\"a\":1}\n")[:14], 0xFF, 0xFF), "gzip"},
		{"comma given semicolon header", "orders.csv", []byte("id;name\nA;x\n"), "looks separated by ';'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := newID(t)
			uri := put(t, "it-sources/"+id+"/"+tc.object, tc.body, "")
			spec := api.SourceSpec{Object: uri}
			if strings.HasSuffix(tc.object, ".csv") {
				spec.CSVDelimiter = ","
			}
			if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "webhook", Source: spec, Options: json.RawMessage(`{"url":"http://127.0.0.1:9/x"}`)}); err != nil {
				t.Fatal(err)
			}
			v, err := env.api.Submitted(ctx, id, 300*time.Millisecond)
			if err != nil || v.Status != api.StatusRefused || v.Refusal == nil || v.Refusal.Code != "invalid_request" || v.Refusal.Field != "source.object" || !strings.Contains(v.Refusal.Message, tc.want) {
				t.Fatalf("batch %s: %s %+v %v, want refused on source.object saying %q", id, v.Status, v.Refusal, err, tc.want)
			}
			noManifest(t, id)
		})
	}

	t.Run("cli local csv gz with csv-delimiter and no early stop", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "bulkrun")
		if out, err := exec.Command("go", "build", "-o", bin, "../cmd/bulkrun").CombinedOutput(); err != nil {
			t.Fatalf("build: %v\n%s", err, out)
		}
		id := newID(t)
		url := env.hook.route(id, func(key string, _ int) int {
			if key == "k1" {
				return 200
			}
			return 422
		})
		src := filepath.Join(t.TempDir(), "orders.csv.gz")
		if err := os.WriteFile(src, gzipped(t, "k|qty\nk1|1\nk2|2\nk3|3\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "submit", src, "--pipeline", "webhook", "--id", id, "--key-field", "k", "--csv-delimiter", "pipe",
			"--stop-on-threshold=false", "--tolerated-failure-count", "0", "--options", fmt.Sprintf(`{"url":%q}`, url), "--watch", "--output", "json")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		_ = cmd.Run()
		var v handler.BatchView
		if err := json.Unmarshal(stdout.Bytes(), &v); err != nil {
			t.Fatalf("submit printed %q (%s): %v", stdout.String(), stderr.String(), err)
		}
		if v.Status != api.StatusThresholdExceeded || v.Census == nil || v.Census.Failed != 2 || v.Census.Succeeded != 1 || v.Census.Cancelled != 0 {
			t.Fatalf("view %s %+v", v.Status, v.Census)
		}
		if calls := env.hook.counts(id); calls["k1"]+calls["k2"]+calls["k3"] != 3 {
			t.Fatalf("calls %v, want one per item", calls)
		}
	})
}

// TestMissingSourceObjectIsRefusedAtOnce submits, through the deployed
// API and under the IAM lane, an object source whose key is not there: the
// answer is 400 invalid_request naming source.object and saying the
// object does not exist (the API's role may list the source prefix, so S3
// answers 404, not 403), and nothing is written under the batch.
func TestMissingSourceObjectIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	id := newID(t)
	missing := "s3://" + env.bucket + "/it-sources/" + id + "/missing.jsonl"
	_, err := env.api.Submit(context.Background(), api.SubmitRequest{BatchID: id, Pipeline: "webhook",
		Options: json.RawMessage(`{"url":"http://127.0.0.1:9/unused"}`), Source: api.SourceSpec{Object: missing}})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Body.Code != "invalid_request" || ae.Body.Field != "source.object" ||
		!strings.Contains(ae.Body.Message, missing+" does not exist") {
		t.Fatalf("err = %v (%+v), want 400 invalid_request on source.object: %s does not exist", err, ae, missing)
	}
	nothingUnder(t, id)
}
