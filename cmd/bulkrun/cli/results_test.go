package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
)

// partialPages serves GET /batches/b/results/partial in pages of two
// lines (a … e, cursors "1" and "2"); the page at cursor broken is refused
// every time ("-": none). It records the queries asked.
func partialPages(t *testing.T, broken string, asked *[]string) *client.Client {
	return partialPagesIn(t, api.ResultOrderKey, broken, asked)
}

// partialPagesIn is partialPages answering in order; in manifest order
// the keys come e, d, c, b, a.
func partialPagesIn(t *testing.T, order, broken string, asked *[]string) *client.Client {
	t.Helper()
	lines := []api.ResultLine{
		{Key: "a", Outcome: api.OutcomeSucceeded, Run: 1, Revision: 1, Attempts: 1, Output: json.RawMessage(`{"n":1}`)},
		{Key: "b", Outcome: api.OutcomeFailed, Run: 1, Revision: 1, Attempts: 3, Error: "HTTP 400", Reason: api.ReasonPermanent},
		{Key: "c", Outcome: api.OutcomeSucceeded, Run: 1, Revision: 1, Attempts: 1},
		{Key: "d", Outcome: api.OutcomeCancelled, Run: 1, Revision: 1, Reason: api.ReasonCancel},
		{Key: "e", Outcome: api.OutcomeSucceeded, Run: 1, Revision: 1, Attempts: 2},
	}
	if order == api.ResultOrderManifest {
		slices.Reverse(lines)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/batches/b/results/partial" {
			http.NotFound(w, r)
			return
		}
		*asked = append(*asked, r.URL.RawQuery)
		cursor := r.URL.Query().Get("cursor")
		w.Header().Set("Content-Type", "application/json")
		if cursor == broken {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"code":"invalid_request","field":"cursor","message":"bad cursor"}`))
			return
		}
		i := 0
		if cursor != "" {
			i = int(cursor[0]-'0') * 2
		}
		p := api.ResultPage{BatchID: "b", Run: 1, Status: api.StatusRunning, Order: order, Lines: lines[i:min(i+2, len(lines))]}
		if i+2 < len(lines) {
			p.NextCursor = string(rune('0' + i/2 + 1))
		}
		_ = json.NewEncoder(w).Encode(p)
	}))
	t.Cleanup(srv.Close)
	t.Setenv(client.EnvAPIURL, srv.URL)
	c, err := client.New(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")}, client.Stack{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func runResults(c *client.Client, args ...string) (string, string, error) {
	var out, errw bytes.Buffer
	a := &app{out: &out, errw: &errw, output: "text", api: c, loaded: true}
	cmd := a.resultsCmd()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return out.String(), errw.String(), err
}

// `results ID --partial` follows every page and prints each line as JSON
// in the API's order, the summary on stderr; --outcome keeps those
// outcomes; --file writes the lines whole; a page that fails names the
// cursor to go on from; --run with --partial, and --limit or --cursor
// without it, are usage errors. Guards docs/cli.md "Results lines".
func TestResultsPartialStreamsEveryPage(t *testing.T) {
	var asked []string
	c := partialPages(t, "-", &asked)
	out, errOut, err := runResults(c, "b", "--partial", "--limit", "2")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var l api.ResultLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		keys = append(keys, l.Key+":"+string(l.Outcome))
	}
	if got := strings.Join(keys, " "); got != "a:succeeded b:failed c:succeeded d:cancelled e:succeeded" {
		t.Fatalf("lines %s", got)
	}
	if strings.Join(asked, " ") != "limit=2 cursor=1&limit=2 cursor=2&limit=2" {
		t.Fatalf("queries %q", asked)
	}
	if !strings.Contains(errOut, "batch b run 1 (running): 5 lines recorded so far, in key order, read in 3 pages") {
		t.Fatalf("summary %q", errOut)
	}

	out, _, err = runResults(c, "b", "--partial", "--outcome", "succeeded")
	if err != nil || strings.Count(out, "\n") != 3 || strings.Contains(out, `"failed"`) {
		t.Fatalf("--outcome succeeded: %v\n%s", err, out)
	}

	path := filepath.Join(t.TempDir(), "partial.jsonl")
	if _, _, err := runResults(c, "b", "--partial", "--file", path); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || strings.Count(string(b), "\n") != 5 {
		t.Fatalf("--file: %v\n%s", err, b)
	}

	// A pack batch's pages come in manifest order: printed sorted by key.
	out, errOut, err = runResults(partialPagesIn(t, api.ResultOrderManifest, "-", new([]string)), "b", "--partial", "--limit", "2")
	var sortedKeys []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var l api.ResultLine
		_ = json.Unmarshal([]byte(line), &l)
		sortedKeys = append(sortedKeys, l.Key)
	}
	if err != nil || strings.Join(sortedKeys, "") != "abcde" || !strings.Contains(errOut, "in key order, sorted here") {
		t.Fatalf("manifest order: %v, keys %v, summary %q; want a … e", err, sortedKeys, errOut)
	}

	broken := partialPages(t, "2", new([]string))
	out, _, err = runResults(broken, "b", "--partial")
	if err == nil || !strings.Contains(err.Error(), "go on with bulkrun results b --partial --cursor 2") || strings.Count(out, "\n") != 4 {
		t.Fatalf("a failing page: %v\n%s\nwant the 4 lines read and the cursor to go on from", err, out)
	}

	for _, args := range [][]string{{"b", "--partial", "--run", "2"}, {"b", "--limit", "5"}, {"b", "--cursor", "x"}, {"b", "--partial", "--limit", "1001"}} {
		_, _, err := runResults(c, args...)
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != ExitUsage {
			t.Fatalf("%v: %v, want a usage error", args, err)
		}
	}
}
