//go:build integration

package integration

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/source"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bulkrun/bulkrun/shared/api"
)

func putObject(t *testing.T, key, body string) string {
	t.Helper()
	if _, err := env.s3.PutObject(context.Background(), &s3.PutObjectInput{Bucket: &env.bucket, Key: &key, Body: strings.NewReader(body)}); err != nil {
		t.Fatal(err)
	}
	return "s3://" + env.bucket + "/" + key
}

// JSON array and CSV objects, keyed by a field or column; headers reach the
// pipeline. (An empty source is refused: TestEmptySourceIsRefusedAndWritesNothing.)
func TestSourcesAndHeaders(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, object, body, keyField string
		want                         []string
	}{
		{"json array", "a.json", "\xEF\xBB\xBF[{\"sku\":\"b-2\"},\n{\"sku\":\"a-1\",\"qty\":3}]", "sku", []string{"a-1", "b-2"}},
		{"csv", "a.csv", "sku,qty\r\nx-9,1\r\n\r\n\"y,1\",2\r\n", "sku", []string{"x-9", "y,1"}},
		{"jsonl positional", "a.jsonl", "{\"v\":1}\r\n\r\n{\"v\":2}", "", []string{"item-0000000000", "item-0000000001"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := newID(t)
			url := env.hook.route(id, nil)
			uri := putObject(t, "it-sources/"+id+"/"+tc.object, tc.body)
			req := api.SubmitRequest{BatchID: id, Pipeline: "webhook", KeyField: tc.keyField, Source: api.SourceSpec{Object: uri},
				Headers: map[string]string{"X-Tenant": "acme"},
				Options: []byte(fmt.Sprintf(`{"url":%q}`, url))}
			if _, err := env.api.Submit(ctx, req); err != nil {
				t.Fatal(err)
			}
			v := wait(t, id)
			if v.Census.Succeeded != int64(len(tc.want)) {
				t.Fatalf("census %+v", v.Census)
			}
			calls := env.hook.counts(id)
			for _, k := range tc.want {
				if calls[k] != 1 {
					t.Errorf("key %q: %d calls (all: %v)", k, calls[k], calls)
				}
			}
			if got := env.hook.lastHeader(id).Get("X-Tenant"); got != "acme" {
				t.Errorf("header X-Tenant = %q, want acme", got)
			}
		})
	}
}

// A prefix listing covers every page (ListObjectsV2 returns 1,000 keys a
// page); the batch is then cancelled before its items run.
func TestPrefixListingEveryPage(t *testing.T) {
	t.Parallel() // its own batch and source prefix: beside the other parallel tests
	ctx := context.Background()
	id := newID(t)
	prefix := "it-sources/" + id + "/"
	const n = 1005
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			key := fmt.Sprintf("%sobj-%05d.txt", prefix, i)
			if _, err := env.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &env.bucket, Key: &key, Body: strings.NewReader("x")}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "webhook", Source: api.SourceSpec{Prefix: "s3://" + env.bucket + "/" + prefix},
		Options: []byte(`{"url":"http://127.0.0.1:9/unused"}`)}); err != nil {
		t.Fatal(err)
	}
	v, err := env.api.Submitted(ctx, id, 300*time.Millisecond)
	if err != nil || v.ItemCount != n {
		t.Fatalf("submit: item_count %d, %v", v.ItemCount, err)
	}
	if _, err := env.api.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	v = wait(t, id)
	if v.Status != api.StatusCancelled || v.Census.Total != n || v.Census.Cancelled+v.Census.Failed != n {
		t.Fatalf("%s %+v", v.Status, v.Census)
	}
	if err := env.api.Forget(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// Prefix listing with unusual keys: object keys holding a control character
// (U+0001, a tab), a space, "+", "%" or non-ASCII are listed as stored by
// the prefix source (one item each, every key reaching the pipeline as it
// is) and by forget, which must delete such objects under batches/{id}/.
// Guards the prefix source and forget (docs/api.md "Using it"; the sweep forgets
// through the same listing): without EncodingType=url S3's XML answer
// cannot carry U+0001 and submit answered 500.
func TestPrefixListingUnusualKeys(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	prefix := "it-sources/" + id + "/"
	names := []string{"ctl\x01char.txt", "tab\there.txt", "space name.txt", "plus+sign.txt", "a+b c.txt", "pct%41.txt", "pct%2Fslash.txt", "naïve 日本.txt"}
	put := func(key string) {
		t.Helper()
		if _, err := env.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &env.bucket, Key: &key, Body: strings.NewReader(`{"x":1}`)}); err != nil {
			t.Fatalf("put %q: %v", key, err)
		}
	}
	want := map[string]int{}
	for _, n := range names {
		put(prefix + n)
		want[prefix+n] = 1
	}
	t.Cleanup(func() { _, _ = env.blobs.DeletePrefix(context.Background(), prefix) })
	hook := env.hook.route(id, nil)
	if _, err := env.api.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "webhook", Source: api.SourceSpec{Prefix: "s3://" + env.bucket + "/" + prefix},
		Options: []byte(`{"url":"` + hook + `"}`)}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	v, err := env.api.Submitted(ctx, id, 300*time.Millisecond)
	if err != nil || v.ItemCount != int64(len(names)) {
		t.Fatalf("submit: item_count %d, %v", v.ItemCount, err)
	}
	v = wait(t, id)
	if v.Status != api.StatusCompleted || v.Census.Succeeded != int64(len(names)) {
		t.Fatalf("%s %+v", v.Status, v.Census)
	}
	if got := env.hook.counts(id); !reflect.DeepEqual(got, want) {
		t.Fatalf("calls by key %v, want %v", got, want)
	}
	// Forget lists batches/{id}/ too: an object there with such a key must go.
	odd := api.BatchesPrefix(id) + "outputs/ctl\x01" + names[4]
	put(odd)
	if err := env.api.Forget(ctx, id); err != nil {
		t.Fatalf("forget: %v", err)
	}
	var left []string
	if err := env.blobs.List(ctx, env.bucket, api.BatchesPrefix(id), func(o source.ObjectInfo) error {
		left = append(left, o.Key)
		return nil
	}); err != nil || len(left) != 0 {
		t.Fatalf("after forget, under %s: %q %v", api.BatchesPrefix(id), left, err)
	}
}
