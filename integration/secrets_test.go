//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/bulkrun/bulkrun/internal/secret"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
)

// TestSecretsNeverEchoedAndReferencesResolved guards the product lines "views,
// 409s and reports never show a header value" and "a header may reference
// an SSM SecureString parameter or a Secrets Manager secret, resolved by the
// item function at run time": the receiver gets the resolved values, while
// GET /batches/{id} and the 409 of a conflicting resubmit hold neither the
// stored bearer token nor the resolved values.
func TestSecretsNeverEchoedAndReferencesResolved(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	token := "Bearer it-s3cr3t-" + id
	paramName, paramValue := "/bulkrun/"+id, "ssm-value-"+id
	ssmc := ssm.NewFromConfig(env.aws)
	if _, err := ssmc.PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(paramName), Value: aws.String(paramValue), Type: ssmtypes.ParameterTypeSecureString}); err != nil {
		t.Fatalf("put parameter: %v", err)
	}
	t.Cleanup(func() {
		_, _ = ssmc.DeleteParameter(context.Background(), &ssm.DeleteParameterInput{Name: aws.String(paramName)})
	})
	smc := secretsmanager.NewFromConfig(env.aws)
	secretValue := "sm-value-" + id
	sec, err := smc.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String("bulkrun/" + id), SecretString: aws.String(secretValue)})
	if err != nil {
		t.Fatalf("create secret: %v", err)
	}
	t.Cleanup(func() {
		_, _ = smc.DeleteSecret(context.Background(), &secretsmanager.DeleteSecretInput{SecretId: sec.ARN, ForceDeleteWithoutRecovery: aws.Bool(true)})
	})

	route := env.hook.route(id, nil)
	opts, _ := json.Marshal(map[string]string{"url": route})
	headers := map[string]string{
		"Authorization": token,
		"X-Ssm":         "secret:arn:aws:ssm:us-east-1:000000000000:parameter" + paramName,
		"X-Sm":          "secret:" + *sec.ARN,
	}
	req := api.SubmitRequest{BatchID: id, Pipeline: "webhook", Options: opts, Headers: headers, Source: api.SourceSpec{Items: inlineItems(1)}}
	created, err := env.api.Submit(ctx, req)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	v := wait(t, id)
	if v.Census == nil || v.Census.Succeeded != 1 {
		t.Fatalf("census %+v, want 1 succeeded", v.Census)
	}
	got := env.hook.lastHeader(id)
	if got.Get("Authorization") != token || got.Get("X-Ssm") != paramValue || got.Get("X-Sm") != secretValue {
		t.Errorf("receiver got Authorization %q, X-Ssm %q, X-Sm %q; want the token and both resolved values",
			got.Get("Authorization"), got.Get("X-Ssm"), got.Get("X-Sm"))
	}

	view, _ := json.Marshal(v)
	answer, _ := json.Marshal(created)
	req.Headers = map[string]string{"Authorization": "Bearer other-" + id}
	_, err = env.api.Submit(ctx, req)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 409 || ae.Body.Field != "headers" {
		t.Fatalf("resubmit with another header: err = %v, want 409 on headers", err)
	}
	t.Logf("409: %s", ae.Body.Message)
	for what, text := range map[string]string{"GET /batches/{id}": string(view), "submit answer": string(answer), "409": ae.Body.Message} {
		for _, secret := range []string{"it-s3cr3t", "other-" + id, paramValue, secretValue} {
			if strings.Contains(text, secret) {
				t.Errorf("%s holds %q: %s", what, secret, text)
			}
		}
		if !strings.Contains(text, "sha256:") {
			t.Errorf("%s shows no digest: %s", what, text)
		}
	}
}

// TestSecretReadByItsARN guards "a reference is the parameter its ARN
// names": two parameters of one name, one in the stack's Region and one
// in another (the emulator keeps parameters per Region, as SSM does), and
// the item function's secret store reads each ARN's own, not the local
// one of the same name.
func TestSecretReadByItsARN(t *testing.T) {
	ctx := context.Background()
	name := "/bulkrun/" + newID(t)
	values := map[string]string{"us-east-1": "local-" + name, "us-west-2": "west-" + name}
	for region, value := range values {
		c := ssm.NewFromConfig(env.aws, func(o *ssm.Options) { o.Region = region })
		if _, err := c.PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(name), Value: aws.String(value), Type: ssmtypes.ParameterTypeSecureString}); err != nil {
			t.Fatalf("put %s in %s: %v", name, region, err)
		}
		t.Cleanup(func() {
			_, _ = c.DeleteParameter(context.Background(), &ssm.DeleteParameterInput{Name: aws.String(name)})
		})
	}
	store := secret.New(env.aws, time.Minute)
	for region, want := range values {
		arn := "arn:aws:ssm:" + region + ":000000000000:parameter" + name
		got, err := store.Resolve(ctx, arn)
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", arn, got, err, want)
		}
	}
}
