package bulkrun

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// A schedule whose event input is over EventBridge's 8192 characters (a
// request with inline items) is refused at synth naming the schedule;
// EventBridge would refuse the rule's target at deploy, the emulator
// takes it.
func TestSynthRefusesAScheduleInputOver8KB(t *testing.T) {
	items, _ := json.Marshal([]string{strings.Repeat("x", 8200)})
	p := &RunnerProps{Target: TargetEmulator, FunctionsDir: functionsDir,
		Schedules: []Schedule{{Name: "inline", Expression: "rate(1 day)", Request: json.RawMessage(`{"pipeline":"webhook","source":{"items":` + string(items) + `}}`)}}}
	err := Validate(p)
	var pe *PropError
	if !errors.As(err, &pe) || pe.Field != "Schedules[inline].Request" || !strings.Contains(err.Error(), "EventBridge's 8192") {
		t.Fatalf("Validate = %v, want a *PropError naming Schedules[inline].Request and the limit", err)
	}
	p.Schedules[0].Request = json.RawMessage(`{"pipeline":"webhook","source":{"prefix":"s3://b/daily/"}}`)
	if err := Validate(p); err != nil {
		t.Fatalf("a schedule naming a prefix: %v", err)
	}
}
