package validate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/bulkrun/bulkrun/shared/api"
)

// Report records the problems of one read of a source, in bounded memory
// whatever their number: every problem is counted and written to W (one
// JSON line per api.Problem; nil writes nothing), the first
// api.MaxListedProblems are kept in First. Mode decides each problem's
// Handling (what becomes of its row if the batch runs). Not safe for
// concurrent use.
type Report struct {
	Mode       api.BadRows
	W          io.Writer
	Rows       int64 // rows read: the caller counts every item and bad row (Row)
	Invalid    int64 // format and schema problems
	Duplicates int64 // later rows of a repeated key
	First      []api.Problem
	buf        bytes.Buffer
}

// Row counts one row read (an item or a bad row).
func (r *Report) Row() { r.Rows++ }

// Count is every problem recorded.
func (r *Report) Count() int64 { return r.Invalid + r.Duplicates }

// Add records p with the handling r.Mode gives it: refused under
// bad_rows refuse; failed (a format or schema problem) or dropped (a
// duplicate) under bad_rows fail. It returns W's write error.
func (r *Report) Add(p api.Problem) error {
	switch {
	case r.Mode != api.BadRowsFail:
		p.Handling = api.HandlingRefused
	case p.Kind == api.ProblemDuplicate:
		p.Handling = api.HandlingDropped
	default:
		p.Handling = api.HandlingFailed
	}
	if p.Kind == api.ProblemDuplicate {
		r.Duplicates++
	} else {
		r.Invalid++
	}
	if len(r.First) < api.MaxListedProblems {
		r.First = append(r.First, p)
	}
	if r.W == nil {
		return nil
	}
	r.buf.Reset()
	enc := json.NewEncoder(&r.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p); err != nil {
		return err
	}
	if _, err := r.W.Write(r.buf.Bytes()); err != nil {
		return fmt.Errorf("write problems: %w", err)
	}
	return nil
}

// Refusal is the *api.ProblemsError that refuses the batch, or nil when
// it runs: under bad_rows refuse any problem refuses it; under bad_rows
// fail, problems over maxPercent of the rows read (0 < maxPercent ≤ 100;
// ≤ 0 means api.DefaultMaxInvalidPercent). object names the
// invalid-items file in the error ("" for none).
func (r *Report) Refusal(maxPercent float64, object string) *api.ProblemsError {
	n := r.Count()
	if n == 0 {
		return nil
	}
	e := &api.ProblemsError{Count: n, Rows: r.Rows, First: r.First, Object: object}
	if r.Mode != api.BadRowsFail {
		e.Why = "bad_rows is refuse: set bad_rows to fail to run the others, each bad row a failed item"
		return e
	}
	if maxPercent <= 0 {
		maxPercent = api.DefaultMaxInvalidPercent
	}
	if float64(n)*100 > maxPercent*float64(r.Rows) {
		e.Why = fmt.Sprintf("%.2f %% of the rows, more than max_invalid_percent %g %%: the file, its delimiter or the schema is likely the wrong one", float64(n)*100/float64(max(r.Rows, 1)), maxPercent)
		return e
	}
	return nil
}
