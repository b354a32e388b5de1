package submit

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// regionsOf answers bucket Regions from a map, counting the calls.
type regionsOf struct {
	m     map[string]string
	calls atomic.Int64
}

func (r *regionsOf) BucketRegion(_ context.Context, bucket string) (string, error) {
	r.calls.Add(1)
	if region, ok := r.m[bucket]; ok {
		return region, nil
	}
	return "", errors.New("AccessDenied")
}

// Product line: a source in a bucket of another Region is refused at
// submit (the API's 400, before a batch row exists), naming the field,
// the bucket's Region and the stack's; the stack's own bucket, a bucket of
// its Region and one whose Region cannot be read pass; each bucket's
// Region is read once.
func TestSourceInAnotherRegionRefused(t *testing.T) {
	regions := &regionsOf{m: map[string]string{"src-eu": "eu-west-1", "src-us": "us-east-1"}} // names no other test uses: the Regions are cached per process
	blobs := &memBlobs{objects: map[string][]byte{"a.jsonl": []byte("{\"k\":1}\n")}}
	s := &Submitter{Store: noStore{}, Blobs: blobs, Clock: ledger.SystemClock{}, Log: slog.New(slog.DiscardHandler), Handoff: noHandoff{t},
		Regions: regions, Region: "us-east-1"}
	for _, tt := range []struct {
		spec  api.SourceSpec
		field string
	}{
		{api.SourceSpec{Object: "s3://src-eu/a.jsonl"}, "source.object"},
		{api.SourceSpec{Prefix: "s3://src-eu/exports/"}, "source.prefix"},
	} {
		_, err := s.Accept(context.Background(), api.SubmitRequest{BatchID: "b1", Pipeline: "p", Source: tt.spec})
		var ie *api.InputError
		if !errors.As(err, &ie) || ie.Field != tt.field || !strings.Contains(ie.Reason, "bucket src-eu is in Region eu-west-1, this stack in us-east-1") ||
			!strings.Contains(ie.Reason, "301") || blobs.created != 0 {
			t.Fatalf("%+v: err = %v, want a refusal of %s naming both Regions, nothing created", tt.spec, err, tt.field)
		}
	}
	if n := regions.calls.Load(); n != 1 {
		t.Errorf("%d GetBucketLocation calls for one bucket, want 1 (cached)", n)
	}
	for _, uri := range []string{"s3://batches/incoming/a.jsonl", "s3://src-us/a.jsonl", "s3://src-unknown/a.jsonl"} {
		if err := s.checkSourceRegion(context.Background(), api.SourceSpec{Object: uri}); err != nil {
			t.Errorf("%s: %v, want it to pass", uri, err)
		}
	}
	if n := regions.calls.Load(); n != 3 {
		t.Errorf("%d calls, want 3: the stack's own bucket is never asked", n)
	}
}
