package console

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestConsoleTextsOfTheGoldenReport guards the console's sentences for a
// report's pauses and lifted halts (web/app.js pausedText, liftedText)
// over the report's golden JSON (shared/wire/testdata), the shape the
// API answers: each says what the CLI's report says, from the fields as
// they are spelled on the wire. It runs app.js under Node with a stub
// document (the browser test reaches no report with either); skipped
// where Node is not installed, except under CI=true.
func TestConsoleTextsOfTheGoldenReport(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node not found; CI installs it")
		}
		t.Skip("node not found")
	}
	golden, err := os.ReadFile("../../../shared/wire/testdata/report.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	script := `
const fs = require("fs"), vm = require("vm");
const stub = {querySelector: () => ({content: ""}), createElement: () => ({}), addEventListener: () => {}};
const ctx = {document: stub, window: {addEventListener: () => {}}, console, Intl, Date, Math, JSON, Object, String, Number, Array, isNaN, URLSearchParams};
vm.createContext(ctx);
vm.runInContext(fs.readFileSync(process.argv[1], "utf8") + "\n;globalThis.__t = {pausedText, liftedText};", ctx);
const rep = JSON.parse(process.argv[2]);
console.log(JSON.stringify({paused: ctx.__t.pausedText(rep.paused), lifted: ctx.__t.liftedText(rep.lifted)}));
`
	out, err := exec.Command(node, "-e", script, "web/app.js", string(golden)).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var got struct{ Paused, Lifted string }
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node printed %q: %v", out, err)
	}
	t.Logf("paused: %s", got.Paused)
	t.Logf("lifted: %s", got.Lifted)
	for _, want := range []string{"Paused 2 times", "the last by an outage (http 502, 3 probes)", "2026-11-30 20:01:02 UTC", "ended by its probe answered"} {
		if !strings.Contains(got.Paused, want) {
			t.Errorf("pausedText: %q lacks %q", got.Paused, want)
		}
	}
	for _, want := range []string{"Halts lifted: 1", "the last on secret:arn:aws:secretsmanager:us-east-1:123456789012:secret:old-hook",
		"halted 2026-11-30 20:00:40 UTC: webhook: HTTP 401", "lifted 2026-11-30 20:01:30 UTC"} {
		if !strings.Contains(got.Lifted, want) {
			t.Errorf("liftedText: %q lacks %q", got.Lifted, want)
		}
	}
}
