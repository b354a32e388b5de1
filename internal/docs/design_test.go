package docs

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// designMaxLines is the most lines docs/design.md may have: it is the
// overview (guarantees, packages, the four paths, storage in brief, the
// invariants); the detail is the pages under docs/design/, the reasons the
// records under docs/adr/.
const designMaxLines = 300

// module is the module path the code imports itself by.
const module = "github.com/bulkrun/bulkrun/"

func read(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the text of a Markdown file under the heading title, up
// to the next heading of the same or a higher level.
func section(t *testing.T, text, title string) string {
	t.Helper()
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		m := regexp.MustCompile(`^(#+) (.+?)\s*$`).FindStringSubmatch(l)
		if m == nil || m[2] != title {
			continue
		}
		var b strings.Builder
		for _, l := range lines[i+1:] {
			if n := regexp.MustCompile(`^(#+) `).FindStringSubmatch(l); n != nil && len(n[1]) <= len(m[1]) {
				break
			}
			b.WriteString(l + "\n")
		}
		return b.String()
	}
	t.Fatalf("no heading %q", title)
	return ""
}

// TestDesignIsAnOverview: docs/design.md is at most designMaxLines lines
// and links every page of docs/design/ and the decision records' index.
func TestDesignIsAnOverview(t *testing.T) {
	design := read(t, "docs/design.md")
	if n := strings.Count(design, "\n"); n > designMaxLines {
		t.Errorf("docs/design.md has %d lines, want at most %d: move the detail to a page of docs/design/, the history to docs/adr/ or CHANGELOG.md", n, designMaxLines)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "design", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) < 5 {
		t.Fatalf("docs/design/ has %d pages; the glob no longer finds them?", len(pages))
	}
	for _, p := range append(pages, filepath.Join(root, "docs", "adr", "README.md")) {
		rel, _ := filepath.Rel(filepath.Join(root, "docs"), p)
		if !strings.Contains(design, "]("+filepath.ToSlash(rel)+")") {
			t.Errorf("docs/design.md does not link %s", filepath.ToSlash(rel))
		}
	}
}

// adrName is a decision record's file name: four digits, a dash, a short
// title in lower case.
var adrName = regexp.MustCompile(`^([0-9]{4})-[a-z0-9]+(?:-[a-z0-9]+)*\.md$`)

// TestDecisionRecords: every file of docs/adr/ but its index is a record
// named NNNN-short-title.md, numbered without gaps from 0001, titled
// "# NNNN. …", with a date and the sections Context, Decision and
// Consequences; the index docs/adr/README.md links every record.
func TestDecisionRecords(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join(root, "docs", "adr"))
	if err != nil {
		t.Fatal(err)
	}
	index := read(t, "docs/adr/README.md")
	var numbers []int
	for _, e := range entries {
		name := e.Name()
		if name == "README.md" {
			continue
		}
		m := adrName.FindStringSubmatch(name)
		if m == nil {
			t.Errorf("docs/adr/%s: a record is named NNNN-short-title.md", name)
			continue
		}
		n, _ := strconv.Atoi(m[1])
		numbers = append(numbers, n)
		text := read(t, "docs/adr/"+name)
		if !strings.HasPrefix(text, "# "+m[1]+". ") {
			t.Errorf("docs/adr/%s: the title is not \"# %s. …\"", name, m[1])
		}
		if !regexp.MustCompile(`(?m)^- Date: [0-9]{4}-[0-9]{2}-[0-9]{2}`).MatchString(text) {
			t.Errorf("docs/adr/%s: no \"- Date: YYYY-MM-DD\" line", name)
		}
		titles, _ := headings(t, "docs/adr/"+name)
		for _, h := range []string{"Context", "Decision", "Consequences"} {
			if !titles[h] {
				t.Errorf("docs/adr/%s: no section %q", name, h)
			}
		}
		if !strings.Contains(index, "]("+name+")") {
			t.Errorf("docs/adr/README.md does not list %s", name)
		}
	}
	sort.Ints(numbers)
	for i, n := range numbers {
		if n != i+1 {
			t.Errorf("docs/adr: record %04d where %04d was expected (numbers run from 0001 without gaps)", n, i+1)
			break
		}
	}
	if len(numbers) < 10 {
		t.Errorf("docs/adr has %d records; the pattern no longer finds them?", len(numbers))
	}
}

// testName is a test cited in the docs: TestX, TestX* (every test whose
// name starts so) or TestX/Case (a subtest, such as a case of the store's
// conformance suite, TestStoreConformance/PackTakeAndFence).
var testName = regexp.MustCompile("`(Test[A-Z0-9][A-Za-z0-9_]*)(\\*)?(?:/([A-Za-z0-9_]+))?`")

// goTests are the tests the repository declares (func TestX(t
// *testing.T)) and the text of its Go files, where a subtest's name is
// looked for.
type goTests struct {
	declared map[string]bool
	text     string
}

func readGoTests(t *testing.T) goTests {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]*)\(t \*testing\.T\)`)
	g := goTests{declared: map[string]bool{}}
	var all strings.Builder
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && skipDir(d.Name()) && path != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
				g.declared[m[1]] = true
			}
			all.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	g.text = all.String()
	return g
}

// citedTestsExist checks every test text cites, and returns how many.
func citedTestsExist(t *testing.T, where, text string, g goTests) int {
	t.Helper()
	n := 0
	for _, m := range testName.FindAllStringSubmatch(text, -1) {
		n++
		name, prefix, sub := m[1], m[2] == "*", m[3]
		found := g.declared[name]
		if prefix {
			for d := range g.declared {
				found = found || strings.HasPrefix(d, name)
			}
		}
		switch {
		case !found:
			t.Errorf("%s cites %s, which no Go file declares (func %s(t *testing.T))", where, m[0], name)
		case sub != "" && !strings.Contains(g.text, strconv.Quote(sub)):
			t.Errorf("%s cites %s, but no Go file names the case %q", where, m[0], sub)
		}
	}
	return n
}

// TestCitedTestsExist: every test the invariants table of docs/design.md
// cites exists (a function TestX(t *testing.T) somewhere in the
// repository, and for TestX/Case the case's name as a string), and so does
// every test the pages of docs/design/ and the records of docs/adr/ cite.
func TestCitedTestsExist(t *testing.T) {
	sources := readGoTests(t)
	table := section(t, read(t, "docs/design.md"), "Invariants and the tests that prove them")
	if n := citedTestsExist(t, `docs/design.md "Invariants and the tests that prove them"`, table, sources); n < 100 {
		t.Errorf("the invariants table cites %d tests; the pattern no longer finds them?", n)
	}
	var pages []string
	for _, glob := range []string{"docs/design/*.md", "docs/adr/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, m...)
	}
	cited := 0
	for _, p := range pages {
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		cited += citedTestsExist(t, rel, read(t, rel), sources)
	}
	t.Logf("%d tests cited by the pages and records checked", cited)
	if cited < 100 {
		t.Errorf("the pages and records cite %d tests; the pattern no longer finds them?", cited)
	}
}

// TestModuleMap: the table of docs/design.md between <!-- module map -->
// and <!-- /module map --> says, for each package it lists, which of the
// listed packages it imports; the last column is what the package's Go
// files (tests left out) import, no more and no less. A first column with
// braces (functions/{submit,item}) stands for each package it names.
func TestModuleMap(t *testing.T) {
	design := read(t, "docs/design.md")
	const begin, end = "<!-- module map -->", "<!-- /module map -->"
	i, j := strings.Index(design, begin), strings.Index(design, end)
	if i < 0 || j < i {
		t.Fatalf("docs/design.md has no %s … %s table", begin, end)
	}
	cell := regexp.MustCompile("`([^`]+)`")
	listed := map[string][]string{} // package → the packages its row says it imports
	for _, line := range strings.Split(design[i+len(begin):j], "\n") {
		cols := strings.Split(strings.Trim(line, " |"), " | ")
		if !strings.HasPrefix(line, "| `") || len(cols) < 2 {
			continue
		}
		m := cell.FindStringSubmatch(cols[0])
		if m == nil {
			continue
		}
		var imports []string
		if len(cols) == 3 {
			for _, c := range cell.FindAllStringSubmatch(cols[2], -1) {
				imports = append(imports, c[1])
			}
		}
		for _, pkg := range expandBraces(m[1]) {
			listed[pkg] = imports
		}
	}
	if len(listed) < 15 {
		t.Fatalf("the module map lists %d packages; the pattern no longer reads it?", len(listed))
	}
	for pkg, want := range listed {
		got := packageImports(t, pkg)
		var among []string
		for _, imp := range got {
			if _, ok := listed[imp]; ok {
				among = append(among, imp)
			}
		}
		sort.Strings(among)
		sort.Strings(want)
		if strings.Join(among, ", ") != strings.Join(want, ", ") {
			t.Errorf("module map: %s imports %v of the listed packages; its row says %v", pkg, among, want)
		}
	}
}

// expandBraces expands one {a,b,c} group: functions/{submit,item} is
// functions/submit and functions/item.
func expandBraces(s string) []string {
	i, j := strings.Index(s, "{"), strings.Index(s, "}")
	if i < 0 || j < i {
		return []string{s}
	}
	var out []string
	for _, part := range strings.Split(s[i+1:j], ",") {
		out = append(out, s[:i]+part+s[j+1:])
	}
	return out
}

// packageImports returns the module's packages the non-test Go files of
// dir import, relative to the module's root.
func packageImports(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		n++
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range parsed.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, module) {
				seen[strings.TrimPrefix(path, module)] = true
			}
		}
	}
	if n == 0 {
		t.Errorf("module map: %s has no Go files", dir)
	}
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	return out
}
