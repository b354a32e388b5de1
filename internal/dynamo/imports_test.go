package dynamo

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/worker"
)

// TestAdapterImportsNoPipeline guards the layering: the DynamoDB adapter
// imports the ledger (shared/api, shared/ledger) and the SDK, never a
// pipeline package (staged writes arrive as ledger.StagedEffects and are matched by method),
// so nothing runs back up from storage to the pipelines.
func TestAdapterImportsNoPipeline(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		read++
		for _, imp := range file.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, "github.com/bulkrun/bulkrun/shared/pipeline") || strings.HasPrefix(p, "github.com/bulkrun/bulkrun/internal/pipeline") {
				t.Errorf("%s imports %s", f, p)
			}
		}
	}
	if read == 0 {
		t.Fatal("no adapter source file read")
	}
}

// The adapter answers the item engine's eventually consistent batch reads
// (a compile-time check, kept in a test so that the adapter imports no
// engine).
var _ worker.EventualBatchReader = (*Store)(nil)
