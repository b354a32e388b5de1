package faultproxy

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// denyGate refuses the calls and entries its functions say, and turns a
// GetObject's 404 into a 403.
type denyGate struct {
	http.Handler
	call  func(Call) bool
	entry func(i int) bool
}

func (g denyGate) Admit(r *http.Request, c Call, body []byte) *Refusal {
	if c.String() == "s3.DeleteObjects" && g.entry != nil {
		var entries []bool
		for i := range strings.Count(string(body), "<Object>") {
			entries = append(entries, g.entry(i))
		}
		return &Refusal{Status: 403, Code: "AccessDenied", Message: "not yours", Entries: entries}
	}
	if g.call != nil && g.call(c) {
		return &Refusal{Status: 400, Code: "AccessDeniedException", Message: "User: x is not authorized to perform: dynamodb:PutItem"}
	}
	return nil
}

func (g denyGate) Answered(r *http.Request, c Call, status int, _ http.Header) *Refusal {
	if c.String() == "s3.GetObject" && status == http.StatusNotFound {
		return &Refusal{Status: 403, Code: "AccessDenied", Message: "Access Denied"}
	}
	return nil
}

// TestGateRefusesInTheServicesShape: a gate's refusal reaches the SDK as
// the service's own error (DynamoDB AccessDeniedException, S3 per-key
// AccessDenied inside DeleteObjects' 200, S3 403 for a 404 the gate
// rewrites), and a refused call never reaches the emulator.
func TestGateRefusesInTheServicesShape(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, Config{})
	r.proxy.SetGate(denyGate{Handler: http.NotFoundHandler(),
		call: func(c Call) bool { return c.String() == "dynamodb.PutItem" }, entry: func(i int) bool { return i%2 == 1 }})
	_, err := r.ddb().PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: "a"}}})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "AccessDeniedException" {
		t.Fatalf("PutItem: %v, want AccessDeniedException", err)
	}
	keys := []string{"k0", "k1", "k2", "k3"}
	var ids []s3types.ObjectIdentifier
	for _, k := range keys {
		ids = append(ids, s3types.ObjectIdentifier{Key: aws.String(k)})
	}
	out, err := r.s3().DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("b"), Delete: &s3types.Delete{Objects: ids}})
	if err != nil {
		t.Fatal(err)
	}
	var refused []string
	for _, e := range out.Errors {
		if aws.ToString(e.Code) != "AccessDenied" {
			t.Errorf("entry %s: code %s", aws.ToString(e.Key), aws.ToString(e.Code))
		}
		refused = append(refused, aws.ToString(e.Key))
	}
	calls, entries := r.up.seen()
	if !slices.Equal(refused, []string{"k1", "k3"}) || !slices.Equal(entries, []string{"k0", "k2"}) {
		t.Errorf("refused %v, deleted upstream %v; want k1, k3 refused and only k0, k2 deleted", refused, entries)
	}
	if slices.Contains(calls, "dynamodb.PutItem") {
		t.Errorf("the refused PutItem reached the emulator: %v", calls)
	}
}
