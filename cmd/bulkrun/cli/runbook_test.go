package cli

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docCommands returns the bulkrun and make command lines a Markdown file
// shows: lines of its sh code blocks and its inline code spans that start
// with "bulkrun", "build/bulkrun" or (after VAR=value words) "make",
// without a trailing "# comment".
func docCommands(doc string) (bulkrun, make []string) {
	add := func(line string) {
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		words := strings.Fields(line)
		for len(words) > 0 && strings.Contains(words[0], "=") { // TARGET=aws make …
			words = words[1:]
		}
		if len(words) < 2 { // a mention of the name, not a command
			return
		}
		switch words[0] {
		case "bulkrun", "build/bulkrun":
			bulkrun = append(bulkrun, strings.Join(words, " "))
		case "make":
			make = append(make, strings.Join(words, " "))
		}
	}
	inBlock := false
	for _, l := range strings.Split(doc, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "```") {
			inBlock = !inBlock && strings.HasPrefix(t, "```sh")
			continue
		}
		if inBlock {
			add(t)
			continue
		}
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(l, -1) {
			add(m[1])
		}
	}
	return bulkrun, make
}

// TestOperationsRunbookCommands guards the product line "every command the
// operations runbook (docs/operations.md) shows exists": each bulkrun
// command names a subcommand of this CLI with flags it accepts and the
// number of arguments it takes, each make command a target of the
// Makefile; and the README links the runbook.
func TestOperationsRunbookCommands(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	raw, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds, makes := docCommands(string(raw))
	if len(cmds) < 8 || len(makes) < 1 {
		t.Fatalf("docs/operations.md shows %d bulkrun and %d make commands; the runbook lost its commands?", len(cmds), len(makes))
	}
	for _, line := range cmds {
		args := strings.Fields(line)[1:]
		top := New(io.Discard, io.Discard) // fresh: parsed flags stay on a command
		cmd, rest, err := top.Find(args)
		if err != nil || cmd == top {
			t.Errorf("docs/operations.md: %q: not a bulkrun command (%v)", line, err)
			continue
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("docs/operations.md: %q: %v", line, err)
			continue
		}
		if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
			t.Errorf("docs/operations.md: %q: %v", line, err)
		}
	}

	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range makes {
		words := strings.Fields(line)
		target := ""
		for _, w := range words[1:] {
			if !strings.Contains(w, "=") && !strings.HasPrefix(w, "-") {
				target = w
				break
			}
		}
		if target == "" || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(target)+`:`).Match(mk) {
			t.Errorf("docs/operations.md: %q: %q is not a target of the Makefile", line, target)
		}
	}

	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "(docs/operations.md)") {
		t.Error("README.md does not link docs/operations.md")
	}
}
