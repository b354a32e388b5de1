package cli

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// messageSources are the Go files whose strings a person reads through the
// command line and the console: the CLI's own, the client's errors, the
// API's texts (verdicts, stops, refusals, errors) and the live view's
// reasons for attention.
var messageSources = []string{
	"*.go",
	"../../../shared/client/*.go",
	"../../../shared/live/live.go",
	"../../../shared/api/*.go",
	"../../../shared/control/*.go",
	"../../../shared/submit/*.go",
	"../../../internal/handler/*.go",
	"../../../internal/pipeline/lambdafn/*.go",
}

// countedPlural is a number printed before a plural noun, with at most
// one word between ("%d items", "%d corrected items", "%d failures of
// %d items"): a template that prints "1 items" when the number is 1.
var countedPlural = regexp.MustCompile(`%d (\w+ )?(items|failures|files|probes|attempts|batches|alarms|keys|lines|revisions|checks|packs|messages|calls|retries|objects|parts|chunks|names|errors|minutes|hours|days|seconds|tries|waits|receives|records|thumbnails|costs|rows|corrections)\b`)

// anotherField is "another" before a name filled in, which may be plural
// ("another headers"): "another value of %s" says it for any name.
var anotherField = regexp.MustCompile(`another %[sqv]`)

// Guards "numbers carry singular and plural right": no message template
// the CLI prints counts with "%d" before a plural noun. Counts go through
// api.Count (or api.Noun), which says "1 item" and "2 items". Before the
// CLI's messages were fixed this failed on "revision %d: %d corrected
// items", "%d failures of %d items", "%d items waiting for a retry" and
// the others it lists, and on "batch %s exists with another %s", which
// read "exists with another headers".
func TestMessageTemplatesCountInWords(t *testing.T) {
	var bad []string
	fset := token.NewFileSet()
	for _, pattern := range messageSources {
		files, err := filepath.Glob(pattern)
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no files (%v)", pattern, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				for _, re := range []*regexp.Regexp{countedPlural, anotherField} {
					if m := re.FindString(s); m != "" {
						bad = append(bad, fmt.Sprintf("%s: %q in %q", fset.Position(lit.Pos()), m, s))
					}
				}
				return true
			})
		}
	}
	if len(bad) > 0 {
		t.Errorf("message templates that print \"1 …s\" (count with api.Count):\n%s", strings.Join(bad, "\n"))
	}
}
