package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
)

// itemInputs writes the inputs of every item of the batch id whose outcome
// is outcome to w, every page of GET /batches/{id}/inputs (1,000 items a
// page) joined by client.WriteInputPages, ready to edit and hand to
// `bulkrun correct`: a CSV source's as CSV with the source's header (once,
// at the top) and delimiter, any other source's as JSON Lines (each item's
// input, one a line). The inputs are the current ones (a corrected item's
// last correction's); within a page in source order, pages in key order.
// A summary goes to errw. A batch with positional keys (the API's 409) is
// a usage error: its items' inputs do not name the item they correct.
func (a *app) itemInputs(ctx context.Context, w io.Writer, id string, outcome api.Outcome) error {
	done, err := client.WriteInputPages(w, func(cursor string) (api.InputPage, error) {
		return a.api.Inputs(ctx, id, outcome, cursor, api.MaxListLimit)
	})
	var ae *client.APIError
	switch {
	case errors.As(err, &ae) && ae.Status == 409:
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("%w; list the items without --inputs", err)}
	case err != nil && done.Count > 0:
		return fmt.Errorf("%w (after %s were written)", err, api.Count(done.Count, "input"))
	case err != nil:
		return err
	}
	order := "in source order"
	if done.Pages > 1 {
		order = fmt.Sprintf("%d pages in key order, each in source order", done.Pages)
	}
	textf(a.errw, "%s of %s items of batch %s, %s (%s): edit them, then bulkrun correct %s FILE\n",
		api.Count(done.Count, "input"), outcome, id, order, done.Format, id)
	return nil
}
