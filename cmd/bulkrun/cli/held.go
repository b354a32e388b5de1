package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/spf13/cobra"

	"github.com/bulkrun/bulkrun/shared/api"
)

// lifted is the answer of bulkrun lift: one api.LiftResult per subject.
type lifted struct {
	BatchID string           `json:"batch_id"`
	Lifts   []api.LiftResult `json:"lifts"`
	// Status is the batch's status when the lift was asked; a finished
	// batch's lift wakes nothing (its run holds no item) and readies a
	// resume.
	Status api.Status `json:"status"`
}

// print writes one line per lift, its subject made inert (textf).
func (l lifted) print(w io.Writer) {
	for _, r := range l.Lifts {
		what := "no halt stood on %s"
		if r.Lifted {
			what = "halt on %s lifted"
		}
		more := ""
		if !r.Done {
			more = " (more are left: run bulkrun lift again)"
		}
		if l.Status.Finished() {
			textf(w, "batch %s: "+what+"; the batch is %s, so no item waits under it\n", l.BatchID, r.Subject, l.Status)
			continue
		}
		textf(w, "batch %s: "+what+"; %s woken%s\n", l.BatchID, r.Subject, api.Count(r.Woken, "withheld item"), more)
	}
	if l.Status.Finished() && len(l.Lifts) > 0 {
		textf(w, "bulkrun resume %s runs its unfinished items again, under the credential as it reads now\n", l.BatchID)
	}
}

func (a *app) liftCmd() *cobra.Command {
	return &cobra.Command{
		Use: "lift ID [SUBJECT]",
		Short: "Lift the batch's halt on SUBJECT (every halt when none is named), once its credential is fixed: " +
			"every item withheld under it runs once more",
		Args: rangeArgs(1, 2, "a batch ID and, optionally, the halt's SUBJECT (see bulkrun status)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := a.load(ctx); err != nil {
				return err
			}
			id := args[0]
			subjects := args[1:]
			v, err := a.api.Status(ctx, id)
			if err != nil {
				return err
			}
			if len(subjects) == 0 {
				subjects = slices.Sorted(maps.Keys(v.Halts))
				switch {
				case len(subjects) == 0 && v.Status.Finished():
					return &ExitError{Code: ExitUsage, Err: fmt.Errorf("lift %s: the batch is %s and holds no halt: nothing to lift", id, v.Status)}
				case len(subjects) == 0:
					return &ExitError{Code: ExitUsage, Err: fmt.Errorf("lift %s: the batch holds no halt; name the SUBJECT its withheld items show to wake them", id)}
				}
			}
			out := lifted{BatchID: id, Status: v.Status}
			for _, s := range subjects {
				r, err := a.api.LiftAll(ctx, id, s)
				if err != nil {
					return err
				}
				out.Lifts = append(out.Lifts, r)
			}
			if a.output == "json" {
				return a.printJSON(out)
			}
			out.print(a.out)
			return nil
		},
	}
}
