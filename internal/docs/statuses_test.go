package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
)

// Guards docs/api.md "Batch statuses" against disagreeing with the
// product: it names every status the API answers (api.Statuses), and
// only those; a paused batch is running with pause set; there is no
// "succeeded" status, so a batch whose every item failed, without a
// threshold, is completed. The section once opened with the tail of a
// sentence of another page.
func TestDocsNameEveryStatus(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "docs/api.md"))
	if err != nil {
		t.Fatal(err)
	}
	sec := section(t, string(raw), "Batch statuses")
	text := strings.Join(strings.Fields(sec), " ")
	for _, s := range api.Statuses() {
		if !strings.Contains(text, "`"+string(s)+"`") {
			t.Errorf("docs/api.md, \"Batch statuses\", does not name `%s`", s)
		}
	}
	for _, want := range []string{"There is no \"succeeded\" batch status", "whose every item failed is `completed` too", "A paused batch is `running` with `pause` set"} {
		if !strings.Contains(text, want) {
			t.Errorf("docs/api.md, \"Batch statuses\", does not say %q", want)
		}
	}
	if strings.Contains(text, "`succeeded` (") || strings.Contains(text, "`paused` (") {
		t.Errorf("docs/api.md, \"Batch statuses\", names a status the API does not answer")
	}
}
