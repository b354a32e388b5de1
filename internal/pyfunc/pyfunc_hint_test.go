package pyfunc

import (
	"strings"
	"testing"
)

// Guards the line `make lambda-function` ends with: the command that
// allows the function is the one docs/pipelines.md gives, keeping the
// example in the list (make deploy LAMBDA_FUNCTIONS=score,
// bulkrun-example-python), not one that drops it.
func TestAllowHintKeepsTheExample(t *testing.T) {
	if got := AllowHint("score"); !strings.Contains(got, "make deploy LAMBDA_FUNCTIONS=score,bulkrun-example-python ") {
		t.Errorf("hint %q", got)
	}
	if got := AllowHint("bulkrun-example-python"); strings.Contains(got, "LAMBDA_FUNCTIONS=bulkrun-example-python") {
		t.Errorf("hint for the example %q: the stack allows it by default", got)
	}
}
