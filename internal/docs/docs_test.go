package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const root = "../.."

// readmeMaxLines is the most lines the README may have: it is a front
// page (what bulkrun is, the two commands, a tour, links); the manual is
// the pages under docs/.
const readmeMaxLines = 250

// markdownFiles are the repository's Markdown files, relative to the root,
// outside build outputs and installed tools.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && skipDir(d.Name()) && path != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func skipDir(name string) bool {
	switch name {
	case "node_modules", "build", "cdk.out", "demo-output", "testdata", ".ministack":
		return true
	}
	return strings.HasPrefix(name, ".")
}

// headings returns the headings of a Markdown file, as written and as
// GitHub's anchors (lower case, punctuation but - and _ dropped, spaces as
// -), outside code blocks.
func headings(t *testing.T, file string) (titles, anchors map[string]bool) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatalf("%v", err)
	}
	titles, anchors = map[string]bool{}, map[string]bool{}
	inBlock := false
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inBlock = !inBlock
			continue
		}
		m := regexp.MustCompile(`^#+ (.+?)\s*$`).FindStringSubmatch(l)
		if inBlock || m == nil {
			continue
		}
		titles[m[1]] = true
		anchors[anchor(m[1])] = true
	}
	return titles, anchors
}

// anchor is GitHub's anchor of a heading.
func anchor(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestDocLinks: every relative link of every Markdown file names a file or
// folder that exists, and its #anchor a heading of that file.
func TestDocLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, file := range markdownFiles(t) {
		raw, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(raw), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			resolved := file
			if path != "" {
				resolved = filepath.ToSlash(filepath.Join(filepath.Dir(file), path))
				if _, err := os.Stat(filepath.Join(root, resolved)); err != nil {
					t.Errorf("%s: link %q: %s does not exist", file, target, resolved)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(resolved, ".md") {
				if _, anchors := headings(t, resolved); !anchors[frag] {
					t.Errorf("%s: link %q: %s has no heading with anchor #%s", file, target, resolved, frag)
				}
			}
		}
	}
}

// sectionRef is a reference to a section: a Markdown file, written as the
// repository names it (README, README.md, docs/cli.md, infra/README.md,
// docs/design/items.md, docs/adr/0010-packs-of-k-items.md) or relative to
// the file that refers to it (a page's bare name inside docs/,
// design/items.md from docs/design.md, items.md inside docs/design/),
// then an optional comma or "(" and the heading in double quotes: the
// heading itself, or its beginning up to a parenthesis or a colon.
var sectionRef = regexp.MustCompile(`(?:^|[\s(\[])((?:(?:docs|infra|localstack|examples|design|adr)/)*(?:(?:[0-9]{4}-)?[a-z][a-z0-9-]*\.md|README(?:\.md)?)),? \(?"([^"]+)"`)

// linkedSectionRef is the same reference written as a Markdown link to the
// page, then the quoted heading: [design/items.md](design/items.md),
// "Pause on an outage". The link's target names the file.
var linkedSectionRef = regexp.MustCompile(`\]\(([^)#\s]+\.md)\),? \(?"([^"]+)"`)

// rootDirs are the folders a reference written from the repository's root
// starts with; any other reference is relative to the file that holds it.
var rootDirs = []string{"docs/", "infra/", "localstack/", "examples/"}

// refTarget resolves a reference's file: README is the root's README.md,
// a name starting with a root folder is the repository's, any other is
// relative to the file that holds the reference.
func refTarget(from, doc string) string {
	if doc == "README" {
		return "README.md"
	}
	for _, d := range rootDirs {
		if strings.HasPrefix(doc, d) {
			return doc
		}
	}
	return filepath.ToSlash(filepath.Join(filepath.Dir(from), doc))
}

// TestDocSectionReferences: every reference to a section of the manual, in
// the Markdown files, in the code's comments and messages and in the
// Makefile, names a heading that exists. Comment markers and line breaks
// are read as spaces, so a reference may wrap.
func TestDocSectionReferences(t *testing.T) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && skipDir(d.Name()) && path != root {
			return filepath.SkipDir
		}
		switch ext := filepath.Ext(path); {
		case d.IsDir():
		case ext == ".go" || ext == ".md" || ext == ".py" || ext == ".yaml" || ext == ".sh" || d.Name() == "Makefile":
			rel, _ := filepath.Rel(root, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	unwrap := regexp.MustCompile(`\n\s*(?://|#)?\s*`)
	checked := 0
	for _, file := range files {
		raw, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		text := unwrap.ReplaceAllString(string(raw), " ")
		text = strings.ReplaceAll(text, `\"`, `"`) // inside Go strings
		refs := sectionRef.FindAllStringSubmatch(text, -1)
		if strings.HasSuffix(file, ".md") {
			refs = append(refs, linkedSectionRef.FindAllStringSubmatch(text, -1)...)
		}
		for _, m := range refs {
			doc := refTarget(file, m[1])
			if _, err := os.Stat(filepath.Join(root, doc)); err != nil {
				t.Errorf("%s: reference %s %q: %s does not exist", file, m[1], m[2], doc)
				continue
			}
			if titles, _ := headings(t, doc); !names(titles, m[2]) {
				t.Errorf("%s: reference %s %q: %s has no such heading", file, m[1], m[2], doc)
			}
			checked++
		}
	}
	t.Logf("%d section references checked", checked)
	if checked < 30 {
		t.Errorf("checked %d section references; the pattern no longer finds them?", checked)
	}
}

// names reports whether ref names one of the headings: the heading itself,
// or its beginning up to a parenthesis or a colon ("Item packing" names
// "Item packing (items_per_message)").
func names(titles map[string]bool, ref string) bool {
	if titles[ref] {
		return true
	}
	for title := range titles {
		if strings.HasPrefix(title, ref+" (") || strings.HasPrefix(title, ref+":") {
			return true
		}
	}
	return false
}

// TestReadmeIsAFrontPage: the README is at most readmeMaxLines lines, keeps
// its two commands, and links every page of docs/ (the manual).
func TestReadmeIsAFrontPage(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	if n := strings.Count(readme, "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, want at most %d: move the manual's text to a page of docs/", n, readmeMaxLines)
	}
	for _, cmd := range []string{"make demo", "make test"} {
		if !strings.Contains(readme, cmd) {
			t.Errorf("README.md does not show %q", cmd)
		}
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		rel := "docs/" + filepath.Base(p)
		if !strings.Contains(readme, "]("+rel+")") {
			t.Errorf("README.md does not link %s", rel)
		}
	}
}

// Every make target the README documents runs in CI: in .ci/run itself,
// or as a prerequisite (at any depth) of a target .ci/run runs, such as
// `make test` — so a documented target that stops working fails CI
// instead of waiting for a user to find it (as `make soak` once did).
func TestReadmeTargetsRunInCI(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	makefile := read("Makefile")
	deps := map[string][]string{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):([^=\n]*)$`).FindAllStringSubmatch(makefile, -1) {
		deps[m[1]] = append(deps[m[1]], strings.Fields(m[2])...)
	}
	// A recipe's $(MAKE) X runs X too.
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):[^=\n]*\n((?:\t.*\n)+)`).FindAllStringSubmatch(makefile, -1) {
		for _, c := range regexp.MustCompile(`\$\(MAKE\) ([a-z][a-z0-9-]*)`).FindAllStringSubmatch(m[2], -1) {
			deps[m[1]] = append(deps[m[1]], c[1])
		}
	}
	ran := map[string]bool{}
	var visit func(string)
	visit = func(target string) {
		if ran[target] {
			return
		}
		ran[target] = true
		for _, d := range deps[target] {
			visit(d)
		}
	}
	ci := read(".ci/run")
	for _, m := range regexp.MustCompile(`(?m)^\s*make ((?:[a-z][a-z0-9-]* ?)+)`).FindAllStringSubmatch(ci, -1) {
		for _, target := range strings.Fields(m[1]) {
			visit(target)
		}
	}
	documented := regexp.MustCompile("`(?:TARGET=[a-z]+ )?make ([a-z][a-z0-9-]*)").FindAllStringSubmatch(read("README.md"), -1)
	if len(documented) < 5 {
		t.Fatalf("found %d documented targets in README.md; the pattern no longer matches how it names them", len(documented))
	}
	// Targets whose check runs in CI under another target: the console's
	// browser test is part of the integration suite, and the soak's test
	// runs short in soak-short.
	sameCheck := map[string]string{"console-test": "integration", "soak": "soak-short"}
	for from, to := range sameCheck {
		if ran[to] {
			ran[from] = true
		}
	}
	for _, m := range documented {
		if _, ok := deps[m[1]]; !ok {
			t.Errorf("README.md documents make %s, which the Makefile does not define", m[1])
		} else if !ran[m[1]] {
			t.Errorf("README.md documents make %s, which neither .ci/run nor any target it runs (make test included) runs", m[1])
		}
	}
}
