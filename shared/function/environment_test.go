package function

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/bulkrun/bulkrun/shared/config"
)

// A function whose environment names a settings parameter reads it once
// (ssm:GetParameter, with the function's application id) and config.Load
// sees its variables over the environment's; without one nothing is
// read; a parameter that is not a JSON object of strings is an error
// naming it. Guards infra/README.md, "Environment of the functions".
func TestEnvironmentReadsTheSettingsParameter(t *testing.T) {
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var in struct{ Name string }
		_ = json.Unmarshal(body, &in)
		calls = append(calls, r.Header.Get("X-Amz-Target")+" "+in.Name+" "+r.Header.Get("User-Agent"))
		value := `{"BULKRUN_WEBHOOK_ALLOW": "hooks.example.com", "BULKRUN_SOURCES": "s3://src/"}`
		if in.Name == "bad" {
			value = `["not", "an object"]`
		}
		out, _ := json.Marshal(map[string]any{"Parameter": map[string]string{"Name": in.Name, "Type": "String", "Value": value}})
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_, _ = w.Write(out)
	}))
	defer srv.Close()
	c := aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), AppID: config.AppID("submit"),
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")}
	env := map[string]string{config.EnvSettingsParameter: "CFN-submitsettings-abc", config.EnvWebhookAllow: "old.example.com", config.EnvTable: "t"}
	getenv, err := Environment(context.Background(), c, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if getenv(config.EnvWebhookAllow) != "hooks.example.com" || getenv(config.EnvSources) != "s3://src/" || getenv(config.EnvTable) != "t" {
		t.Fatalf("got %q %q %q", getenv(config.EnvWebhookAllow), getenv(config.EnvSources), getenv(config.EnvTable))
	}
	if len(calls) != 1 || !strings.HasPrefix(calls[0], "AmazonSSM.GetParameter CFN-submitsettings-abc ") || !strings.Contains(calls[0], "app/bulkrun-submit") {
		t.Fatalf("calls %q, want one GetParameter of the parameter with the function's application id", calls)
	}
	calls = nil
	if _, err := Environment(context.Background(), c, func(k string) string { return map[string]string{config.EnvTable: "t"}[k] }); err != nil || len(calls) != 0 {
		t.Fatalf("without a parameter: %v, %d calls", err, len(calls))
	}
	if _, err := Environment(context.Background(), c, func(k string) string { return map[string]string{config.EnvSettingsParameter: "bad"}[k] }); err == nil || !strings.Contains(err.Error(), "settings parameter bad") {
		t.Fatalf("a list: %v, want an error naming the parameter", err)
	}
}
