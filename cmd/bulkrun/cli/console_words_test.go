package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/api"
)

// Guards the batch page's "what to do" for a run whose items all failed
// the same way: the failed results lines are grouped by reason and error,
// an error that names its item's key being one cause whatever the key.
func TestFailureCausesGroupByReasonAndError(t *testing.T) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for i := range 3000 {
		k := fmt.Sprintf("order-%04d", i)
		_ = enc.Encode(api.ResultLine{Key: k, Outcome: api.OutcomeFailed, Run: 1, Revision: 1, Reason: api.ReasonPermanent,
			Error: "webhook: " + k + ": HTTP 401 Unauthorized", Attempts: 1})
	}
	f, err := FailureCauses(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Complete || f.Read != 3000 || len(f.Causes) != 1 {
		t.Fatalf("3,000 items failed with one error: %+v", f)
	}
	if c := f.Causes[0]; c.Reason != api.ReasonPermanent || c.Error != "webhook: {key}: HTTP 401 Unauthorized" || c.Items != 3000 || c.Example != "order-0000" {
		t.Errorf("cause %+v", c)
	}
	b.Reset()
	for i, l := range []api.ResultLine{
		{Key: "a", Reason: api.ReasonMaxAttempts, Error: "attempt 3 of 3: timeout"},
		{Key: "b", Reason: api.ReasonPermanent, Error: "no text"},
		{Key: "c", Reason: api.ReasonPermanent, Error: "no text"},
	} {
		l.Outcome, l.Run, l.Attempts = api.OutcomeFailed, 1, i+1
		_ = enc.Encode(l)
	}
	f, err = FailureCauses(&b)
	if err != nil || len(f.Causes) != 2 || f.Causes[0].Error != "no text" || f.Causes[0].Items != 2 || f.Causes[1].Reason != api.ReasonMaxAttempts {
		t.Errorf("two causes, the commonest first: %+v, %v", f, err)
	}
}

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
