package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
)

// pagedItems serves GET /batches/b/items in pages of one item (a, b, c,
// d, e: cursors "1" to "4"); the page at cursor throttled is answered 429
// by the stage's throttle the first twice it is asked, and the page at
// cursor broken is refused (400) every time ("-": none of them).
func pagedItems(t *testing.T, throttled, broken string) *client.Client {
	t.Helper()
	keys := []string{"a", "b", "c", "d", "e"}
	var mu sync.Mutex
	asked := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cursor := r.URL.Query().Get("cursor")
		mu.Lock()
		asked[cursor]++
		n := asked[cursor]
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case cursor == throttled && n <= 2:
			w.Header().Set("X-Amzn-Errortype", "TooManyRequestsException")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"message":"Too Many Requests"}`))
			return
		case cursor == broken:
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"code":"invalid_request","field":"cursor","message":"bad cursor"}`))
			return
		}
		i := 0
		if cursor != "" {
			i = int(cursor[0] - '0')
		}
		p := api.ItemPage{Items: []api.Item{{Key: keys[i], Outcome: api.OutcomeFailed}}}
		if i+1 < len(keys) {
			p.NextCursor = string(rune('0' + i + 1))
		}
		_ = json.NewEncoder(w).Encode(p)
	}))
	t.Cleanup(srv.Close)
	t.Setenv(client.EnvAPIURL, srv.URL)
	c, err := client.New(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")}, client.Stack{})
	if err != nil {
		t.Fatal(err)
	}
	c.Retryer = func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts, o.RateLimiter = client.MaxAttempts, ratelimit.None
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
		})
	}
	return c
}

// `items --all` over five pages completes when a later page is throttled
// (the page is asked again, the listing goes on where it stopped), and
// when a later page fails for good it shows the items read so far and
// the cursor to go on with instead of printing nothing. Guards docs/cli.md
// "Reading a batch".
func TestItemsAllGoesOnWhereItStopped(t *testing.T) {
	run := func(c *client.Client) (string, error) {
		var out, errw bytes.Buffer
		a := &app{out: &out, errw: &errw, output: "text", api: c, loaded: true}
		cmd := a.itemsCmd()
		cmd.SetArgs([]string{"b", "--all", "--limit", "1"})
		cmd.SetOut(&out)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.Execute()
		return out.String(), err
	}
	out, err := run(pagedItems(t, "3", "-"))
	if err != nil || strings.Count(out, "failed") != 5 || !strings.Contains(out, "\ne ") {
		t.Fatalf("throttled page: %v\n%s\nwant the 5 items", err, out)
	}
	out, err = run(pagedItems(t, "-", "3"))
	if err == nil || !strings.Contains(err.Error(), "--cursor 3 --all") || strings.Count(out, "failed") != 3 || !strings.Contains(out, "\nc ") {
		t.Fatalf("broken page: %v\n%s\nwant items a, b, c shown and the cursor to go on with", err, out)
	}
}
