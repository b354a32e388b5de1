//go:build integration && template

package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	cfntypes "github.com/aws/aws-sdk-go-v2/service/cloudformation/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
)

// TestTemplateDeploysWithPlainCloudFormation is the deployment `make
// template` documents for teams not on CDK (infra/README.md, "Without
// CDK"), on the emulator: the five zips and the template put in a code
// bucket, CreateStack from the template's S3 URL with the parameters
// CodeBucket and CodeKeyPrefix (no CDK, no bootstrap), the stack
// complete with every output the clients read, a batch run through its
// API by the code from the zips, and the stack deleted.
func TestTemplateDeploysWithPlainCloudFormation(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join("..", "build", "template")
	body, err := os.ReadFile(filepath.Join(dir, "bulkrun.template.json"))
	if err != nil {
		t.Fatalf("%v (make template writes it)", err)
	}
	id := strings.ToLower(newID(t))
	codeBucket, prefix, stackName := "code-"+id, "bulkrun/test/", "tpl-"+id
	if len(codeBucket) > 63 {
		codeBucket = codeBucket[:63]
	}
	codeBucket = strings.TrimRight(codeBucket, "-")
	if _, err := env.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &codeBucket}); err != nil {
		t.Fatal(err)
	}
	put := func(key string, data []byte) {
		if _, err := env.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &codeBucket, Key: &key, Body: strings.NewReader(string(data))}); err != nil {
			t.Fatal(err)
		}
	}
	for _, fn := range []string{"submit", "item", "finalize", "sweep", "setup"} {
		zip, err := os.ReadFile(filepath.Join(dir, "functions", fn+".zip"))
		if err != nil {
			t.Fatal(err)
		}
		put(prefix+fn+".zip", zip)
	}
	put(prefix+"bulkrun.template.json", body)
	templateURL := strings.TrimRight(os.Getenv("AWS_ENDPOINT_URL"), "/") + "/" + codeBucket + "/" + prefix + "bulkrun.template.json"

	cfn := cloudformation.NewFromConfig(env.aws)
	if _, err := cfn.CreateStack(ctx, &cloudformation.CreateStackInput{
		StackName: &stackName, TemplateURL: &templateURL,
		Parameters: []cfntypes.Parameter{
			{ParameterKey: aws.String("CodeBucket"), ParameterValue: &codeBucket},
			{ParameterKey: aws.String("CodeKeyPrefix"), ParameterValue: &prefix},
		},
		Capabilities: []cfntypes.Capability{cfntypes.CapabilityCapabilityIam},
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if _, err := cfn.DeleteStack(ctx, &cloudformation.DeleteStackInput{StackName: &stackName}); err != nil {
			t.Logf("delete stack %s: %v", stackName, err)
		}
		w := cloudformation.NewStackDeleteCompleteWaiter(cfn)
		if err := w.Wait(ctx, &cloudformation.DescribeStacksInput{StackName: &stackName}, 5*time.Minute); err != nil {
			t.Logf("stack %s not deleted: %v", stackName, err)
		}
		emptyBucket(ctx, t, codeBucket)
	})
	w := cloudformation.NewStackCreateCompleteWaiter(cfn)
	out, err := w.WaitForOutput(ctx, &cloudformation.DescribeStacksInput{StackName: &stackName}, 8*time.Minute)
	if err != nil {
		events, _ := cfn.DescribeStackEvents(ctx, &cloudformation.DescribeStackEventsInput{StackName: &stackName})
		for _, e := range events.StackEvents {
			if strings.HasSuffix(string(e.ResourceStatus), "FAILED") {
				t.Logf("%s %s: %s", aws.ToString(e.LogicalResourceId), e.ResourceStatus, aws.ToString(e.ResourceStatusReason))
			}
		}
		t.Fatalf("stack %s: %v", stackName, err)
	}
	t.Logf("stack %s: %s, %d outputs", stackName, out.Stacks[0].StackStatus, len(out.Stacks[0].Outputs))

	// The stack's outputs are those the clients read: a batch through its API.
	outs, err := client.FindStack(ctx, env.aws, stackName)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.aws, outs)
	if err != nil {
		t.Fatal(err)
	}
	defer emptyBucket(context.Background(), t, outs["BucketName"])
	bid := "tpl-" + id
	url := env.hook.route(bid, func(key string, _ int) int {
		if key == api.PositionalKey(2) {
			return 400
		}
		return 200
	})
	if _, err := c.Submit(ctx, webhookRequest(bid, url, inlineItems(3))); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	v, err := c.Wait(wctx, bid, 500*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.Status != api.StatusCompleted || v.Census.Succeeded != 2 || v.Census.Failed != 1 {
		t.Fatalf("batch on the template's stack: %s %+v, want completed, 2 succeeded, 1 failed", v.Status, v.Census)
	}
	if calls := env.hook.counts(bid); len(calls) != 3 {
		t.Fatalf("pipeline calls %v, want one per item", calls)
	}
}

// emptyBucket deletes every object of bucket and the bucket (best effort).
func emptyBucket(ctx context.Context, t *testing.T, bucket string) {
	if bucket == "" {
		return
	}
	p := s3.NewListObjectsV2Paginator(env.s3, &s3.ListObjectsV2Input{Bucket: &bucket})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		var nb *s3types.NoSuchBucket
		if errors.As(err, &nb) {
			return
		} else if err != nil {
			t.Logf("list %s: %v", bucket, err)
			return
		}
		for _, o := range page.Contents {
			env.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: o.Key})
		}
	}
	env.s3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &bucket})
}
