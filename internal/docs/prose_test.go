package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// block is one block of a Markdown page: a paragraph of prose, or
// something else (a heading, a list, a table, code, a picture, HTML).
type block struct {
	line    int    // its first line, 1-based
	text    string // its lines joined by spaces
	prose   bool   // a paragraph of prose
	heading string // the heading's title, for a heading
}

var (
	headingLine = regexp.MustCompile(`^#+ (.+?)\s*$`)
	// notProse opens a block that is not a paragraph of prose: a list
	// item, a table row, a quote, a picture, HTML or an HTML comment.
	notProse = regexp.MustCompile(`^\s*(([-*+]|\d+[.)])\s|\||>|!\[|<)`)
)

// blocks splits a Markdown page into its blocks, outside code blocks:
// paragraphs end at a blank line, a heading, a fence, a list item or a
// table.
func blocks(raw string) []block {
	var out []block
	var cur *block
	flush := func() {
		if cur != nil {
			out = append(out, *cur)
			cur = nil
		}
	}
	inCode := false
	for i, l := range strings.Split(raw, "\n") {
		t := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(t, "```"):
			flush()
			if !inCode {
				out = append(out, block{line: i + 1, text: t})
			}
			inCode = !inCode
		case inCode:
		case t == "":
			flush()
		case headingLine.MatchString(l):
			flush()
			out = append(out, block{line: i + 1, text: t, heading: headingLine.FindStringSubmatch(l)[1]})
		case notProse.MatchString(l):
			flush()
			cur = &block{line: i + 1, text: t}
		case cur == nil:
			cur = &block{line: i + 1, text: t, prose: true}
		default:
			cur.text += " " + t
		}
	}
	flush()
	return out
}

// wholeEnd reports whether a paragraph ends as a sentence does: a full
// stop, colon, question or exclamation mark, before any closing quote,
// bracket or emphasis.
func wholeEnd(p string) bool {
	p = strings.TrimRight(p, ")]\"'*_`’”")
	r, _ := utf8.DecodeLastRuneInString(p)
	return strings.ContainsRune(".:!?", r)
}

// wholeStart reports whether a paragraph begins as a sentence does: not
// with a lower-case letter (the end of a sentence whose beginning was
// lost), unless with bulkrun's own name, which is written in lower case.
func wholeStart(p string) bool {
	r, _ := utf8.DecodeRuneInString(p)
	return !unicode.IsLower(r) || strings.HasPrefix(p, "bulkrun")
}

// Guards every page of the manual against lost text: no page ends, and
// no section opens, in the middle of a sentence (a paragraph cut off, or
// the tail of one left behind when its beginning was moved), and no
// paragraph of prose ends without its full stop.
func TestParagraphsAreWhole(t *testing.T) {
	for _, f := range markdownFiles(t) {
		raw, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		bs := blocks(string(raw))
		for i, b := range bs {
			if !b.prose {
				continue
			}
			if !wholeEnd(b.text) {
				what := "a paragraph ends"
				if i == len(bs)-1 {
					what = "the page ends"
				}
				t.Errorf("%s:%d: %s mid-sentence: %q", f, b.line, what, tail(b.text))
			}
			if i > 0 && bs[i-1].heading != "" && !wholeStart(b.text) {
				t.Errorf("%s:%d: section %q opens mid-sentence: %q", f, b.line, bs[i-1].heading, head(b.text))
			}
		}
	}
}

func tail(s string) string {
	if len(s) > 60 {
		return "…" + s[len(s)-60:]
	}
	return s
}

func head(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// Guards the names of an item's two attempt counts: docs/api.md and
// docs/cli.md each say what `attempt` (across every run) and `attempts`
// (its last run's, toward max_attempts) count, as api.Item's JSON names
// them.
func TestItemAttemptCountsNamed(t *testing.T) {
	for _, f := range []string{"docs/api.md", "docs/cli.md"} {
		raw, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(raw)), " ")
		for _, want := range []string{"`attempt` is the number of", "across every run", "`attempts` is how many attempts its last run", "`\"attempt\": 3, \"attempts\": 1`"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s does not say %q", f, want)
			}
		}
	}
}
