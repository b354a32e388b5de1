//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"testing"

	"github.com/bulkrun/bulkrun/shared/batch"
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
	ctx := context.Background()
	keys := []string{"a/b", "a%2Fb", "100%", "%", "a+b", "a b", "naïve/日本語", "émoji 🎉", "?x#y", ".", "..", "release", "x/release", "items/y", "report"}
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{}, pipeline.Quarantine(errors.New("set aside"))
	})
	h.submitter.Store, h.submitter.Blobs = env.store, env.blobs
	h.worker.Store, h.worker.Blobs = env.store, env.blobs
	h.finalizer.Store, h.finalizer.Blobs = env.store, env.blobs
	id := newID(t)
	items := make([]map[string]string, len(keys))
	for i, k := range keys {
		items[i] = map[string]string{"k": k}
	}
	src, _ := json.Marshal(items)
	if _, err := h.submitter.Submit(ctx, batch.SubmitRequest{BatchID: id, Pipeline: "counted", KeyField: "k", Source: batch.SourceSpec{Items: src}}); err != nil {
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
	rep, err := h.finalizer.Finalize(ctx, id, 1)
	if err != nil || rep.Report.Census.Quarantined != int64(len(keys)) {
		t.Fatalf("finalize: %+v %v", rep.Report.Census, err)
	}
	released := func() []string {
		t.Helper()
		var out []string
		cursor := ""
		for {
			p, err := env.api.Items(ctx, id, batch.OutcomeQuarantined, cursor, 100)
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
	if err := env.api.Release(ctx, id, "a/b/c"); !errors.Is(err, batch.ErrNotFound) {
		t.Errorf("release of a key the batch does not hold: %v, want not_found", err)
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
