package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// Inline items whose request would make a Lambda event over the
// invocation payload limit are never sent inline: Submit puts them in the
// stack's bucket under uploads/ and submits that object, with the same
// bytes; a client without a bucket, and any call too large, refuses with
// a *TooLargeError naming the limit and sends nothing. Guards docs/api.md
// ("Limits").
func TestLargeInlineItemsGoThroughTheBucket(t *testing.T) {
	var mu sync.Mutex
	var puts map[string][]byte
	var posts []api.SubmitRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/bkt/"):
			puts[strings.TrimPrefix(r.URL.Path, "/bkt/")] = body
			w.Header().Set("ETag", `"e"`)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/batches"):
			var req api.SubmitRequest
			_ = json.Unmarshal(body, &req)
			posts = append(posts, req)
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, `{"batch_id": "b", "status": "submitting"}`)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	t.Setenv("AWS_ENDPOINT_URL", srv.URL)
	cfg := aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: credentials.NewStaticCredentialsProvider("id", "secret", "")}
	var items bytes.Buffer
	items.WriteString("[")
	for i := 0; items.Len() < 5_950_000; i++ {
		if i > 0 {
			items.WriteString(",")
		}
		fmt.Fprintf(&items, `{"key": "k%07d", "text": "a \"quoted\" word"}`, i)
	}
	items.WriteString("]")
	if n := wire.BodyEventBytes(items.Bytes()); n <= wire.MaxEventBytes {
		t.Fatalf("the items take %d bytes in an event, want more than the limit", n)
	}
	req := api.SubmitRequest{BatchID: "b", Pipeline: "webhook", Source: api.SourceSpec{Items: items.Bytes()}}
	for _, tt := range []struct {
		name   string
		bucket string
	}{{"with the stack's bucket", "bkt"}, {"without a bucket", ""}} {
		t.Run(tt.name, func(t *testing.T) {
			puts, posts = map[string][]byte{}, nil
			c, err := New(cfg, Stack{config.OutputAPIID: "api", config.OutputBucket: tt.bucket})
			if err != nil {
				t.Fatal(err)
			}
			c.Retryer = fastRetryer
			v, err := c.Submit(context.Background(), req)
			if tt.bucket == "" {
				var tl *TooLargeError
				if !errors.As(err, &tl) || !strings.Contains(err.Error(), "6 MB") || len(posts) != 0 || len(puts) != 0 {
					t.Fatalf("Submit = %v; %d posts, %d puts; want a *TooLargeError naming the limit and nothing sent", err, len(posts), len(puts))
				}
				return
			}
			if err != nil || v.ID != "b" || len(posts) != 1 || len(puts) != 1 {
				t.Fatalf("Submit = %+v, %v; %d posts, %d puts", v, err, len(posts), len(puts))
			}
			src := posts[0].Source
			key := strings.TrimPrefix(src.Object, "s3://bkt/")
			if src.Items != nil || src.Format != api.FormatJSON || !strings.HasPrefix(key, "uploads/") || !bytes.Equal(puts[key], items.Bytes()) {
				t.Fatalf("submitted source %+v (object %q); want the uploaded items as a json object under uploads/", src, key)
			}
		})
	}
	c, _ := New(cfg, Stack{config.OutputAPIID: "api"})
	posts = nil
	_, err := c.Do(context.Background(), http.MethodPost, "/batches", req, nil)
	var tl *TooLargeError
	if !errors.As(err, &tl) || len(posts) != 0 {
		t.Fatalf("Do = %v, %d posts; want a *TooLargeError and nothing sent", err, len(posts))
	}
}
