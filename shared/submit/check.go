package submit

import (
	"context"
	"fmt"
	"io"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/source"
	"github.com/bulkrun/bulkrun/shared/validate"
)

// checking is one read of a request's source with its check: the schema,
// the bad-rows policy, the report of every problem, and the rows left
// out (the later rows of duplicate keys, on a second read).
type checking struct {
	req    api.SubmitRequest
	schema *validate.Schema
	report *validate.Report
	// drop holds the lines (elements) of the rows a second read leaves
	// out; nil on a first read.
	drop map[int64]bool
}

// newChecking compiles req's schema (Validate has checked it) and starts
// a report of mode req.BadRows writing every problem to w (nil: none).
func newChecking(req api.SubmitRequest, w io.Writer) (*checking, error) {
	c := &checking{req: req, report: &validate.Report{Mode: req.BadRows, W: w}}
	if len(req.Schema) > 0 {
		sch, err := validate.Compile(req.Schema)
		if err != nil {
			return nil, &api.InputError{Field: "schema", Reason: err.Error()}
		}
		c.schema = sch
	}
	return c, nil
}

// read reads the source into mw: every item, and under bad_rows fail
// every bad row as an item that fails without running (record false: a
// second read, whose problems the first recorded already).
func (c *checking) read(ctx context.Context, objects source.Objects, mw *source.ManifestWriter, record bool) error {
	fail := c.req.BadRows == api.BadRowsFail
	chk := &source.Check{Schema: c.schema}
	if !checkedWhole(c.req) {
		// Without a check the first problem ends the read, as a read in
		// parts does (the same refusal either way).
		return source.ReadSourceChecked(ctx, objects, c.req.Source, c.req.KeyField, chk, func(it source.SourceItem) error {
			if record {
				c.report.Row()
			}
			return mw.Add(it)
		})
	}
	chk.Bad = func(row source.BadRow) error {
		if c.dropped(row.Problem.Line, row.Problem.Element) {
			return nil
		}
		if record {
			c.report.Row()
			if err := c.report.Add(row.Problem); err != nil {
				return err
			}
		}
		if !fail {
			return nil
		}
		p := row.Problem
		return mw.Add(source.SourceItem{Key: row.Key, Input: row.Input, Line: p.Line, Element: p.Element,
			Invalid: fmt.Sprintf("not run: %s problem at %s", p.Kind, p.Text())})
	}
	return source.ReadSourceChecked(ctx, objects, c.req.Source, c.req.KeyField, chk, func(it source.SourceItem) error {
		if c.dropped(it.Line, it.Element) {
			return nil
		}
		if record {
			c.report.Row()
		}
		return mw.Add(it)
	})
}

// dropped reports whether the row at line (element) is left out.
func (c *checking) dropped(line, element int64) bool {
	if c.drop == nil {
		return false
	}
	if element > 0 {
		return c.drop[element]
	}
	return c.drop[line]
}

// finish checks the keys: every duplicate is recorded (record) and, under
// bad_rows fail, collected for a second read that leaves them out
// (returned; nil when there is none). More than api.MaxBadRowsDropped
// duplicates to drop is a refusal.
func (c *checking) finish(mw *source.ManifestWriter, record bool) (source.ManifestSummary, map[int64]bool, error) {
	if !checkedWhole(c.req) {
		sum, err := mw.Finish() // the first duplicate refuses, as in parts
		return sum, nil, err
	}
	var drop map[int64]bool
	sum, err := mw.FinishAll(func(p api.Problem) error {
		if record {
			if err := c.report.Add(p); err != nil {
				return err
			}
		}
		if c.req.BadRows != api.BadRowsFail {
			return nil
		}
		if drop == nil {
			drop = map[int64]bool{}
		}
		if len(drop) >= api.MaxBadRowsDropped {
			return &api.InputError{Line: p.Line, Element: p.Element, Key: api.Truncate(p.Key, 80),
				Reason: fmt.Sprintf("more than %s repeat an earlier row's key: too many to leave out; make the keys unique", api.Count(api.MaxBadRowsDropped, "row"))}
		}
		drop[max(p.Line, p.Element)] = true
		return nil
	})
	return sum, drop, err
}

// summary is what the batch keeps of the report (nil: no problem).
func (c *checking) summary(object string) *api.CheckSummary {
	r := c.report
	if r.Count() == 0 {
		return nil
	}
	first := r.First
	if len(first) > api.MaxStoredProblems {
		first = first[:api.MaxStoredProblems]
	}
	return &api.CheckSummary{Invalid: r.Invalid, Duplicates: r.Duplicates, Object: object, First: first}
}

// refusal is the error that refuses the batch for its problems (nil: it
// runs): an *InputError on the source naming the first problem, wrapping
// the *ProblemsError.
func (c *checking) refusal(object string) error {
	max := api.DefaultMaxInvalidPercent
	if c.req.MaxInvalidPercent != nil {
		max = *c.req.MaxInvalidPercent
	}
	pe := c.report.Refusal(max, object)
	if pe == nil {
		return nil
	}
	ie := pe.InputError()
	ie.Field, ie.Reason, ie.Err = sourceField(c.req.Source), "the source has rows that cannot run", pe
	return ie
}

// lazyObject creates its object on the first write (a source without
// problems writes no invalid-items file).
type lazyObject struct {
	ctx   context.Context
	blobs ledger.Blobs
	key   string
	w     ledger.BlobWriter
}

func (o *lazyObject) Write(p []byte) (int, error) {
	if o.w == nil {
		w, err := o.blobs.Create(o.ctx, o.key, "application/x-ndjson")
		if err != nil {
			return 0, err
		}
		o.w = w
	}
	return o.w.Write(p)
}

// keep completes the object (none when nothing was written).
func (o *lazyObject) keep() error {
	if o.w == nil {
		return nil
	}
	return o.w.Close()
}

// discard aborts the object.
func (o *lazyObject) discard() {
	if o.w != nil {
		_ = o.w.Abort()
	}
}

// written reports whether the object has content.
func (o *lazyObject) written() bool { return o.w != nil }
