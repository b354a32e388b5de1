package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/bulkrun/bulkrun/cmd/bulkrun/cli/describe"
	"github.com/bulkrun/bulkrun/shared/api"
)

// The help of the per-item ceiling flags (submit, upload).
const (
	ceilingSpendHelp  = "per-item ceiling in US dollars: an item whose attempts of a run reported this much usd, at an attempt that would be retried, ends exhausted (not failed); bulkrun ceilings ID --spend-usd N raises it (default: none)"
	ceilingTokensHelp = "per-item ceiling in tokens (the pipeline's reported \"tokens\"), as --ceiling-spend-usd; bulkrun ceilings ID --tokens N raises it (default: none)"
)

// ceilingValue is one per-item ceiling flag: a number > 0, checked as
// it is parsed (api.Ceilings.Check), set into the request's ceilings.
type ceilingValue struct {
	to   **api.Ceilings
	flag string
	set  func(*api.Ceilings, float64)
}

func (v ceilingValue) String() string { return "" }

func (v ceilingValue) Set(s string) error {
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n <= 0 {
		return fmt.Errorf("%s: want a number > 0, not %q", v.flag, s)
	}
	if *v.to == nil {
		*v.to = &api.Ceilings{}
	}
	v.set(*v.to, n)
	if err := (*v.to).Check("ceilings"); err != nil {
		return fmt.Errorf("%s: %w", v.flag, err)
	}
	return nil
}

func (v ceilingValue) Type() string { return "number" }

// raised is the answer of bulkrun ceilings.
type raised struct {
	BatchID string `json:"batch_id"`
	api.CeilingsResult
}

func (r raised) print(w io.Writer) {
	still := ""
	if r.Still > 0 {
		still = fmt.Sprintf("; %s still at a ceiling", api.Count(r.Still, "item"))
	}
	more := ""
	if !r.Done {
		more = " (more are left: run bulkrun ceilings again)"
	}
	textf(w, "batch %s: ceilings %s; %s woken%s%s\n", r.BatchID, describe.CeilingsText(r.Ceilings), api.Count(r.Woken, "exhausted item"), still, more)
}

func (a *app) ceilingsCmd() *cobra.Command {
	var raise api.Ceilings
	cmd := &cobra.Command{
		Use: "ceilings ID [--spend-usd N] [--tokens N]",
		Short: "Set the batch's per-item ceilings: every item exhausted whose run's totals are now under them runs once more " +
			"(keeping its attempts and spend)",
		Args: rangeArgs(1, 1, "a batch ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if raise.IsZero() {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("ceilings %s: give --spend-usd N or --tokens N", args[0])}
			}
			if err := raise.Check("ceilings"); err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			ctx := cmd.Context()
			if err := a.load(ctx); err != nil {
				return err
			}
			res, err := a.setCeilings(ctx, args[0], raise)
			if err != nil {
				return err
			}
			out := raised{BatchID: args[0], CeilingsResult: res}
			if a.output == "json" {
				return a.printJSON(out)
			}
			out.print(a.out)
			return nil
		},
	}
	cmd.Flags().Float64Var(&raise.SpendUSD, "spend-usd", 0, "the per-item ceiling in US dollars, > 0")
	cmd.Flags().Float64Var(&raise.Tokens, "tokens", 0, "the per-item ceiling in tokens, > 0")
	return cmd
}

func (a *app) setCeilings(ctx context.Context, id string, raise api.Ceilings) (api.CeilingsResult, error) {
	return a.api.SetCeilingsAll(ctx, id, raise)
}
