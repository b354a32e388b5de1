package cli

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Guards `bulkrun console --open` (docs/console.md): where no browser can
// be opened (a machine without one: xdg-open answers "no method
// available"), the command says so and how to open the console, instead
// of printing the address alone.
func TestConsoleOpenSaysWhenNoBrowser(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the opener is xdg-open on Linux")
	}
	dir := t.TempDir()
	script := "#!/bin/sh\necho \"xdg-open: no method available for opening '$1'\" >&2\nexit 3\n"
	if err := os.WriteFile(filepath.Join(dir, "xdg-open"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	var errw bytes.Buffer
	a := &app{errw: &errw}
	a.openConsole("http://127.0.0.1:8420/?token=t0k3n")
	got := errw.String()
	for _, want := range []string{"could not open a browser", "no method available", "open http://127.0.0.1:8420/?token=t0k3n"} {
		if !strings.Contains(got, want) {
			t.Errorf("stderr %q lacks %q", got, want)
		}
	}
	// No opener at all.
	t.Setenv("PATH", t.TempDir())
	errw.Reset()
	a.openConsole("http://127.0.0.1:8420/?token=t0k3n")
	if !strings.Contains(errw.String(), "could not open a browser") {
		t.Errorf("without xdg-open: %q", errw.String())
	}
}

// TestConsoleListensOnLoopbackOnly guards the console's binding: it
// listens on 127.0.0.1, never on every interface.
func TestConsoleListensOnLoopbackOnly(t *testing.T) {
	ln, err := consoleListen(0)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().(*net.TCPAddr)
	if !addr.IP.Equal(net.IPv4(127, 0, 0, 1)) || addr.Port == 0 {
		t.Errorf("listens on %s, want 127.0.0.1 and a port", addr)
	}
}

// TestConsoleOpenerKeepsTokenPrivate guards `bulkrun console --open`
// (product line: other users of the machine cannot use the console): the
// browser is started on a private file that leads to the address with the
// token, because a command line is visible to every user (ps). The file
// is the user's alone and its name holds no token.
func TestConsoleOpenerKeepsTokenPrivate(t *testing.T) {
	tok := strings.Repeat("ab", 32)
	u := "http://127.0.0.1:8420/?token=" + tok
	p, err := consoleOpener(u)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(p)
	if strings.Contains(p, tok) {
		t.Errorf("opener path %q holds the token", p)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("opener file mode %v, want 0600", fi.Mode().Perm())
	}
	b, _ := os.ReadFile(p)
	if !strings.Contains(string(b), `content="0;url=`+u+`"`) {
		t.Errorf("opener page %s does not lead to %s", b, u)
	}
}
