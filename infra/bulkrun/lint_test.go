package bulkrun

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// lintRow renders a suppression as its row of infra/README.md.
func lintRow(l LintSuppression) string {
	applies := "`" + l.Type + "`"
	if l.Construct != "" {
		applies += " `" + l.Construct + "`"
	}
	return "| " + l.Tool + " | `" + l.Rule + "` | " + applies + " | " + l.Reason + " |"
}

// TestLintSuppressionsWritten keeps infra/README.md's table of
// template-linter suppressions ("Template linters") equal to
// LintSuppressions, row for row and reason for reason.
func TestLintSuppressionsWritten(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- bulkrun.LintSuppressions -->", "<!-- /bulkrun.LintSuppressions -->"
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("infra/README.md has no %s … %s table", begin, end)
	}
	var got []string
	for _, line := range strings.Split(doc[i+len(begin):j], "\n") {
		if strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| tool ") && !strings.HasPrefix(line, "| ---") {
			got = append(got, line)
		}
	}
	var want []string
	for _, l := range LintSuppressions {
		if len(l.Reason) < 40 {
			t.Errorf("%s %s: reason %q is too short to justify anything", l.Tool, l.Rule, l.Reason)
		}
		want = append(want, lintRow(l))
	}
	if !slices.Equal(got, want) {
		t.Errorf("infra/README.md's linter table differs from LintSuppressions; it should read:\n%s", strings.Join(want, "\n"))
	}
}

// TestLintSuppressionsInTemplates: every suppression reaches the Metadata
// of the resources it names, in the shapes cfn-lint and checkov read, on
// every test stack; and nothing else is suppressed.
func TestLintSuppressionsInTemplates(t *testing.T) {
	for _, name := range opsStacks {
		s := synthOps(t, name)
		seen := map[string]bool{}
		for id, r := range s.json["Resources"].(map[string]any) {
			res := r.(map[string]any)
			md, _ := res["Metadata"].(map[string]any)
			cfg, _ := md["cfn-lint"].(map[string]any)
			inner, _ := cfg["config"].(map[string]any)
			ignore, _ := inner["ignore_checks"].([]any)
			for _, rule := range ignore {
				seen[LintCfnLint+" "+rule.(string)+" "+res["Type"].(string)] = true
			}
			ck, _ := md["checkov"].(map[string]any)
			skips, _ := ck["skip"].([]any)
			for _, sk := range skips {
				m := sk.(map[string]any)
				if m["comment"] == "" {
					t.Errorf("%s: %s: checkov %s without a reason", name, id, m["id"])
				}
				seen[LintCheckov+" "+m["id"].(string)+" "+res["Type"].(string)] = true
			}
		}
		for _, l := range LintSuppressions {
			if !seen[l.Tool+" "+l.Rule+" "+l.Type] {
				t.Errorf("%s: %s %s is on no %s", name, l.Tool, l.Rule, l.Type)
			}
		}
	}
}
