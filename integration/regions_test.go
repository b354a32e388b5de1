//go:build integration

package integration

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/submit"
)

// TestSourceInAnotherRegion guards "a source bucket's Region is checked at
// submit": the emulator answers a read of a bucket of another Region with
// S3's 301 PermanentRedirect, as S3 does (MiniStack enforces a bucket's
// home Region), which the SDK does not follow; submit, with the S3
// adapter's BucketRegion (GetBucketLocation), refuses such a source before
// reading it, naming the field and both Regions. Without the check the
// same submit fails on the read with the 301 and no Region named.
func TestSourceInAnotherRegion(t *testing.T) {
	ctx := context.Background()
	bucket := strings.ToLower(newID(t))
	if len(bucket) > 63 {
		bucket = bucket[:63]
	}
	inEU := func(o *s3.Options) { o.Region = "eu-west-1" }
	if _, err := env.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket),
		CreateBucketConfiguration: &s3types.CreateBucketConfiguration{LocationConstraint: s3types.BucketLocationConstraintEuWest1}}, inEU); err != nil {
		t.Fatal(err)
	}
	if _, err := env.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("a.jsonl"), Body: strings.NewReader("{\"k\":\"a\"}\n")}, inEU); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = env.s3.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String("a.jsonl")}, inEU)
		_, _ = env.s3.DeleteBucket(context.Background(), &s3.DeleteBucketInput{Bucket: aws.String(bucket)}, inEU)
	})
	req := api.SubmitRequest{BatchID: newID(t), Pipeline: "webhook", KeyField: "k", Source: api.SourceSpec{Object: "s3://" + bucket + "/a.jsonl"}}
	newSubmitter := func(checked bool) *submit.Submitter {
		s := &submit.Submitter{Store: env.store, Blobs: env.blobs, Clock: ledger.SystemClock{}, Log: slog.New(slog.DiscardHandler)}
		if checked {
			s.Regions, s.Region = env.blobs, env.aws.Region
		}
		return s
	}

	_, err := newSubmitter(true).Accept(ctx, req)
	var ie *api.InputError
	if !errors.As(err, &ie) || ie.Field != "source.object" || !strings.Contains(ie.Reason, "is in Region eu-west-1, this stack in "+env.aws.Region) {
		t.Fatalf("checked: %v, want a refusal of source.object naming eu-west-1 and %s", err, env.aws.Region)
	}
	t.Logf("refused: %v", err)

	_, err = newSubmitter(false).Accept(ctx, req)
	if err == nil || !strings.Contains(err.Error(), "301") || errors.As(err, &ie) {
		t.Fatalf("unchecked: %v, want the read's 301 PermanentRedirect (the emulator applies S3's rule)", err)
	}
	t.Logf("unchecked, the read fails: %v", err)
}
