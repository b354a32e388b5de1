package cli

import (
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/cmd/bulkrun/cli/describe"
	"github.com/bulkrun/bulkrun/shared/api"
)

// The ceiling flags are checked as they are parsed, naming the flag, and
// set only the ceiling they name.
func TestCeilingFlags(t *testing.T) {
	var c *api.Ceilings
	spend := ceilingValue{&c, "--ceiling-spend-usd", func(c *api.Ceilings, v float64) { c.SpendUSD = v }}
	tokens := ceilingValue{&c, "--ceiling-tokens", func(c *api.Ceilings, v float64) { c.Tokens = v }}
	for _, bad := range []string{"0", "-1", "x", "2e9"} {
		c = nil
		if err := spend.Set(bad); err == nil || !strings.Contains(err.Error(), "--ceiling-spend-usd") {
			t.Errorf("--ceiling-spend-usd %s: %v, want an error naming the flag", bad, err)
		}
	}
	c = nil
	if err := spend.Set("0.5"); err != nil {
		t.Fatal(err)
	}
	if err := tokens.Set("20000"); err != nil {
		t.Fatal(err)
	}
	if *c != (api.Ceilings{SpendUSD: 0.5, Tokens: 20000}) {
		t.Errorf("ceilings %+v", *c)
	}
	if got := describe.CeilingsText(*c); !strings.HasPrefix(got, "$0.5 spend, 20000 tokens per item") {
		t.Errorf("text %q", got)
	}
	if got := describe.CeilingsText(api.Ceilings{}); got != "none" {
		t.Errorf("no ceilings: %q", got)
	}
}
