package cli

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docCommand is one command line a Markdown file shows, split into words
// as a POSIX shell would (quotes removed), with the line it starts on.
type docCommand struct {
	line  int
	words []string
}

func (c docCommand) String() string { return strings.Join(c.words, " ") }

// docCommands returns the bulkrun and make command lines a Markdown file
// shows: commands of its sh code blocks (a line ending in \ continued on
// the next; several on a line split at ;, && and |) and of its inline
// code spans that start with "bulkrun", "build/bulkrun" or (after
// VAR=value words) "make", without a trailing "# comment".
func docCommands(doc string) (bulkrun, make []docCommand) {
	add := func(n int, line string) {
		for _, cmd := range shellCommands(line) {
			for len(cmd) > 0 && strings.Contains(cmd[0], "=") { // TARGET=aws make …
				cmd = cmd[1:]
			}
			if len(cmd) < 2 { // a mention of the name, not a command
				continue
			}
			switch cmd[0] {
			case "bulkrun", "build/bulkrun":
				bulkrun = append(bulkrun, docCommand{n, cmd})
			case "make":
				make = append(make, docCommand{n, cmd})
			}
		}
	}
	inBlock, continued, from := false, "", 0
	for i, l := range strings.Split(doc, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "```") {
			inBlock = !inBlock && strings.HasPrefix(t, "```sh")
			continue
		}
		if inBlock {
			if continued == "" {
				from = i + 1
			}
			if strings.HasSuffix(t, `\`) {
				continued += strings.TrimSuffix(t, `\`) + " "
				continue
			}
			add(from, continued+t)
			continued = ""
			continue
		}
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(l, -1) {
			add(i+1, m[1])
		}
	}
	return bulkrun, make
}

// shellCommands splits a command line into commands of words as a POSIX
// shell would for the commands the docs show: single and double quotes
// group and are removed, a backslash escapes the next character outside
// single quotes, an unquoted ;, & or | ends a command, and an unquoted #
// at a word's start begins a comment.
func shellCommands(line string) [][]string {
	var cmds [][]string
	var words []string
	var w strings.Builder
	in, quote, escaped := false, rune(0), false
	endWord := func() {
		if in {
			words = append(words, w.String())
			w.Reset()
			in = false
		}
	}
	endCommand := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	for _, r := range line {
		switch {
		case escaped:
			w.WriteRune(r)
			escaped = false
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case quote == '"':
			switch r {
			case '"':
				quote = 0
			case '\\':
				escaped = true
			default:
				w.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == '\\':
			escaped, in = true, true
		case r == '#' && !in:
			endCommand()
			return cmds
		case r == ';' || r == '&' || r == '|':
			endCommand()
		case r == ' ' || r == '\t':
			endWord()
		default:
			w.WriteRune(r)
			in = true
		}
	}
	endCommand()
	return cmds
}

// manualPages are the Markdown files whose commands TestDocCommands checks:
// the README and every page of docs/.
func manualPages(t *testing.T, root string) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(pages) < 7 {
		t.Fatalf("docs/*.md: %d pages (%v); the manual lost its pages?", len(pages), err)
	}
	return append([]string{filepath.Join(root, "README.md")}, pages...)
}

// TestDocCommands guards the product line "every command the manual shows
// exists": in the README and each page of docs/ (the runbook
// docs/operations.md, the command line docs/cli.md, …) each bulkrun
// command names a subcommand of this CLI with flags it accepts and the
// number of arguments it takes, and each make command a target of the
// Makefile.
func TestDocCommands(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	total := map[string]int{}
	for _, page := range manualPages(t, root) {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, page)
		cmds, makes := docCommands(string(raw))
		total[name] = len(cmds)
		for _, c := range cmds {
			top := New(io.Discard, io.Discard) // fresh: parsed flags stay on a command
			cmd, rest, err := top.Find(c.words[1:])
			if err != nil || cmd == top {
				t.Errorf("%s:%d: %q: not a bulkrun command (%v)", name, c.line, c, err)
				continue
			}
			if err := cmd.ParseFlags(rest); err != nil {
				t.Errorf("%s:%d: %q: %v", name, c.line, c, err)
				continue
			}
			if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
				t.Errorf("%s:%d: %q: %v", name, c.line, c, err)
			}
		}
		for _, c := range makes {
			target := ""
			for _, w := range c.words[1:] {
				if !strings.Contains(w, "=") && !strings.HasPrefix(w, "-") {
					target = w
					break
				}
			}
			if target == "" || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(target)+`:`).Match(mk) {
				t.Errorf("%s:%d: %q: %q is not a target of the Makefile", name, c.line, c, target)
			}
		}
	}
	// The pages that are about commands must show them.
	for page, least := range map[string]int{"README.md": 5, "docs/operations.md": 8, "docs/cli.md": 10} {
		if total[page] < least {
			t.Errorf("%s shows %d bulkrun commands, want at least %d; did it lose them?", page, total[page], least)
		}
	}
}
