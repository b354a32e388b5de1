package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

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
	// withheld is how many of its items the batch view counted withheld.
	withheld int64
}

// print writes one line per lift, its subject made inert (textf); with
// none (the batch held no halt), that nothing was lifted.
func (l lifted) print(w io.Writer) {
	if len(l.Lifts) == 0 {
		more := "no item is withheld"
		switch {
		case l.Status.Finished():
			more = "no item of a finished run waits under one"
		case l.withheld > 0:
			more = "name the SUBJECT its " + api.Count(l.withheld, "withheld item") + " show (bulkrun items " + l.BatchID + " --outcome withheld) to wake them"
		}
		textf(w, "batch %s: the batch is %s and holds no halt, so nothing was lifted; %s\n", l.BatchID, l.Status, more)
		return
	}
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
			held := slices.Sorted(maps.Keys(v.Halts))
			if len(subjects) == 0 || len(held) == 0 && v.Status.Finished() {
				subjects = held // a finished batch without halts: nothing to lift, whatever was named
			} else if s := subjects[0]; len(held) > 0 && !slices.Contains(held, s) {
				return fmt.Errorf("lift %s: the batch holds no halt on %s; it holds halts on: %s", id, s, strings.Join(held, ", "))
			}
			out := lifted{BatchID: id, Status: v.Status, Lifts: []api.LiftResult{}}
			if v.Census != nil {
				out.withheld = v.Census.Withheld
			}
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
