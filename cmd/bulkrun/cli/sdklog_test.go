package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bulkrun/bulkrun/internal/blob"
)

// Guards the CLI's output against the SDK's own log lines: a response
// whose body breaks off makes the SDK log "WARN failed to discard
// remaining HTTP response body" with its default logger; the
// configuration every command loads (sdkConfig) logs nothing on stderr.
func TestSDKWritesNothingOnStderr(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		// A body announced longer than it is: the SDK's discard of the
		// rest of it fails.
		hj, ok := w.(http.Hijacker)
		if !ok {
			return
		}
		c, buf, _ := hj.Hijack()
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nContent-Type: application/xml\r\n\r\n<x>")
		_ = buf.Flush()
		c.Close()
	}))
	defer srv.Close()
	t.Setenv("AWS_ENDPOINT_URL", srv.URL)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_MAX_ATTEMPTS", "1")

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	defer func() { os.Stderr = stderr }()
	cfg, err := sdkConfig(context.Background(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, _ = blob.NewS3(cfg).DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String("bkt"), Key: aws.String("k")})
	}
	os.Stderr = stderr
	w.Close()
	got, _ := io.ReadAll(r)
	if s := strings.TrimSpace(string(got)); s != "" {
		t.Errorf("the SDK wrote on stderr:\n%s", s)
	}
}
