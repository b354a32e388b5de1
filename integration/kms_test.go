//go:build integration

package integration

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/bulkrun/bulkrun/integration/testbed/iamlane"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// TestKMSSourceReadWithTheGrant guards "the functions decrypt with
// exactly the declared keys, and the IAM-checked lane sees the grant": a
// source object encrypted with a customer managed key (SSE-KMS) is read
// by submit's code (the harness's, attributed to submit) and the lane
// checks S3's kms:Decrypt on the key against the deployed statement of
// KMSKeys (the emulator's DefaultEmulatorKMSKeys, the test's own key in
// its place) with kms:ViaService s3.us-east-1.amazonaws.com: the read is
// allowed with the grant and, the grant taken away, refused as S3 refuses
// it (AccessDenied naming kms:Decrypt and the key).
func TestKMSSourceReadWithTheGrant(t *testing.T) {
	if !laneOn() {
		if os.Getenv("CI") == "true" {
			t.Fatal("the IAM-checked lane is off: start the emulator with BULKRUN_FAULT_PROXY=1 BULKRUN_IAM_LANE=1")
		}
		t.Skip("the IAM-checked lane is off")
	}
	ctx := context.Background()
	key, err := kms.NewFromConfig(env.aws).CreateKey(ctx, &kms.CreateKeyInput{Description: aws.String("bulkrun " + t.Name())})
	if err != nil {
		t.Fatal(err)
	}
	keyARN := aws.ToString(key.KeyMetadata.Arn)
	h := newHarness(t, func(ctx context.Context, req pipeline.Request) (pipeline.Result, error) {
		return pipeline.Result{}, nil
	})
	withKey := func(revoke bool) {
		laneRebind(t, h, func(b *iamlane.Binding) {
			b.Names["kms-key"] = keyARN
			if revoke {
				b.Revoke, b.Enforce, b.Expect = map[string][]string{"submit": {"kms:Decrypt"}}, true, []string{"kms:Decrypt"}
			}
		})
	}
	if _, err := env.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(h.table), Key: aws.String("sources/a.jsonl"), Body: strings.NewReader("{\"k\":\"a\"}\n"),
		ServerSideEncryption: s3types.ServerSideEncryptionAwsKms, SSEKMSKeyId: aws.String(keyARN)}); err != nil {
		t.Fatal(err)
	}
	submitIt := func() error {
		id := newID(t)
		laneTrack(t, id)
		_, err := h.submitter.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: "counted", KeyField: "k",
			Source: api.SourceSpec{Object: "s3://" + h.table + "/sources/a.jsonl"}})
		return err
	}

	withKey(false)
	if err := submitIt(); err != nil {
		t.Fatalf("with the grant: %v", err)
	}
	withKey(true)
	err = submitIt()
	if err == nil || !strings.Contains(err.Error(), "AccessDenied") || !strings.Contains(err.Error(), "kms:Decrypt") || !strings.Contains(err.Error(), keyARN) {
		t.Fatalf("without the grant: %v, want S3's AccessDenied naming kms:Decrypt on %s", err, keyARN)
	}
	rep, err := laneReport(t.Name())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range rep.Denials {
		found = found || (d.Action == "kms:Decrypt" && d.Resource == keyARN && d.Expected)
	}
	if !found {
		t.Errorf("the lane recorded no expected kms:Decrypt denial on %s: %+v", keyARN, rep.Denials)
	}
}
