package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/source"
	"github.com/bulkrun/bulkrun/shared/validate"
)

// CheckOptions are a checked submit's settings, as the request carries
// them: the JSON Schema (nil for none), bad_rows ("" is refuse) and
// max_invalid_percent (nil: api.DefaultMaxInvalidPercent).
type CheckOptions struct {
	Schema            json.RawMessage
	BadRows           api.BadRows
	MaxInvalidPercent *float64
}

// LocalCheckResult is what LocalCheck found: Rows read (items and bad
// rows), Items a submit would run (bad rows that fail included, dropped
// duplicates not), the Report of every problem, and the Refusal a submit
// would answer (nil: the batch would run).
type LocalCheckResult struct {
	Rows, Items int64
	Report      *validate.Report
	Refusal     *api.ProblemsError
}

// LocalCheck reads a whole local file as a submit with o's checks reads
// it once uploaded — every row checked, the read going on past a bad one
// (docs/sources.md, "Bad rows and a schema") — and hands each problem to
// each as it is found: the rows that cannot be read or that the schema
// refuses in file order, then the later rows of repeated keys in key byte
// order. Nothing is uploaded or written (duplicate keys past a few MiB
// spill to the temporary directory). Errors: a schema that does not
// compile (*validate.SchemaError), the source's own errors that end any
// read (its encoding, a CSV header, a line over source.MaxLineBytes),
// errNoItems when nothing would run, an I/O error.
func LocalCheck(path, format, keyField, delim string, o CheckOptions, each func(api.Problem)) (LocalCheckResult, error) {
	chk := &source.Check{}
	if len(o.Schema) > 0 {
		s, err := validate.Compile(o.Schema)
		if err != nil {
			return LocalCheckResult{}, err
		}
		chk.Schema = s
	}
	rep := &validate.Report{Mode: o.BadRows}
	record := func(p api.Problem) error {
		each(p)
		return rep.Add(p)
	}
	mw := source.NewManifestWriter(io.Discard, 0, os.TempDir())
	defer mw.Close()
	chk.Bad = func(row source.BadRow) error {
		rep.Row()
		if err := record(row.Problem); err != nil {
			return err
		}
		if o.BadRows != api.BadRowsFail {
			return nil
		}
		// A bad row that fails is an item: its key counts among the keys.
		p := row.Problem
		return mw.Add(source.SourceItem{Key: row.Key, Input: row.Input, Line: p.Line, Element: p.Element, Invalid: p.Reason})
	}
	err := readLocalChecked(path, format, keyField, delim, chk, func(it source.SourceItem) error {
		rep.Row()
		return mw.Add(it)
	})
	if err != nil {
		return LocalCheckResult{}, err
	}
	if _, err := mw.FinishAll(record); err != nil {
		return LocalCheckResult{}, err
	}
	res := LocalCheckResult{Rows: rep.Rows, Items: rep.Rows - rep.Count(), Report: rep}
	if o.BadRows == api.BadRowsFail {
		res.Items = rep.Rows - rep.Duplicates
	}
	pct := api.DefaultMaxInvalidPercent
	if o.MaxInvalidPercent != nil {
		pct = *o.MaxInvalidPercent
	}
	res.Refusal = rep.Refusal(pct, "")
	if res.Refusal == nil && res.Items == 0 {
		return res, errNoItems
	}
	return res, nil
}

// readLocalChecked is readLocalSource with chk checking the rows.
func readLocalChecked(path, format, keyField, delim string, chk *source.Check, emit func(source.SourceItem) error) error {
	if format == "" {
		format = api.FormatOf(path)
	}
	if format == "" {
		return fmt.Errorf("cannot tell the format of %s: name it .jsonl, .ndjson, .json or .csv (optionally .gz), or give --format", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	text, err := source.SourceText(f)
	if err != nil {
		return err
	}
	return source.ReadText(text, format, path, delim, keyField, chk, emit)
}

// checkLocal runs LocalCheck on a local file for submit: with print, every
// problem is printed to a.out as it is found and a summary follows
// (--check); without, only a refusal is printed. A source a submit would
// refuse is an *ExitError (ExitFailure) saying nothing was uploaded.
func (a *app) checkLocal(path, format, keyField, delim string, o CheckOptions, print bool) error {
	each := func(p api.Problem) {
		if print {
			textf(a.out, "%s\n", p.Text())
		}
	}
	res, err := LocalCheck(path, format, keyField, delim, o, each)
	if err != nil {
		return &ExitError{Code: ExitFailure, Err: fmt.Errorf("%s: %w (nothing was uploaded)", path, err)}
	}
	r := res.Report
	if print {
		textf(a.out, "%s: %s, %d would run; %d invalid, %s\n", path, api.Count(res.Rows, "row"), res.Items, r.Invalid, api.Count(r.Duplicates, "duplicate key"))
	}
	if res.Refusal != nil {
		return &ExitError{Code: ExitFailure, Err: fmt.Errorf("%s: would be refused: %w (nothing was uploaded)", path, res.Refusal)}
	}
	if print {
		textf(a.out, "would run (nothing was uploaded)\n")
	}
	return nil
}

// checkFlags turns submit's --schema (a file), --bad-rows and
// --max-invalid-percent (pctSet: given) into CheckOptions, or a usage
// error naming the flag (a schema that does not compile names its
// keyword).
func checkFlags(schemaFile, badRows string, pct float64, pctSet bool) (CheckOptions, error) {
	var o CheckOptions
	switch api.BadRows(badRows) {
	case "", api.BadRowsRefuse, api.BadRowsFail:
		o.BadRows = api.BadRows(badRows)
	default:
		return o, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--bad-rows %q: want refuse or fail", badRows)}
	}
	if pctSet {
		if pct <= 0 || pct > 100 {
			return o, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--max-invalid-percent %v: want 0 < P ≤ 100", pct)}
		}
		o.MaxInvalidPercent = &pct
	}
	if schemaFile == "" {
		return o, nil
	}
	b, err := os.ReadFile(schemaFile)
	if err != nil {
		return o, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--schema: %w", err)}
	}
	if _, err := validate.Compile(b); err != nil {
		return o, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--schema %s: %w", schemaFile, err)}
	}
	o.Schema = json.RawMessage(b)
	return o, nil
}

// submitChecks are submit's check flags: --check, --schema, --bad-rows,
// --max-invalid-percent, and the CheckOptions they give (opts).
type submitChecks struct {
	check               bool
	schemaFile, badRows string
	maxInvalid          float64
	opts                CheckOptions
}

func (sc *submitChecks) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&sc.check, "check", false, "read the local FILE as this submit would, with its --schema and --bad-rows, print every problem (line, key, path, reason) and whether the batch would run; upload and submit nothing (exit 1 if it would be refused)")
	f.StringVar(&sc.schemaFile, "schema", "", "JSON Schema file (draft 2020-12, at most 64 KiB, no remote $ref) every item must satisfy, checked before anything runs; its integer, number and boolean properties type a CSV's columns")
	f.StringVar(&sc.badRows, "bad-rows", "", "rows that cannot run (bad format, refused by the schema, a repeated key), every one listed in one read: refuse (the batch) or fail (each bad row a failed item, never run; a repeated key's later row dropped). Default: with --schema refuse; without, the first bad row refuses the source")
	f.Float64Var(&sc.maxInvalid, "max-invalid-percent", 0, "with --bad-rows fail, refuse the batch when bad rows are more than this percent of the rows (0 < P ≤ 100; default 10)")
}

// submitCheck reads submit's check flags into req (and sc.opts) and, for
// --check, checks the local file src and reports done: nothing else is
// to be done. A usage error names the flag.
func (a *app) submitCheck(cmd *cobra.Command, req *api.SubmitRequest, sc *submitChecks, src string, prefix bool, format, delim string) (bool, error) {
	o, err := checkFlags(sc.schemaFile, sc.badRows, sc.maxInvalid, cmd.Flags().Changed("max-invalid-percent"))
	if err != nil {
		return true, err
	}
	sc.opts = o
	req.Schema, req.BadRows, req.MaxInvalidPercent = o.Schema, o.BadRows, o.MaxInvalidPercent
	if !sc.check {
		return false, nil
	}
	if prefix || strings.HasPrefix(src, "s3://") {
		return true, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--check reads a local file; an s3:// source is checked as it is submitted (with --bad-rows refuse nothing runs if a row is bad)")}
	}
	return true, a.checkLocal(src, format, req.KeyField, delim, o, true)
}

// checkUpload checks a local file before it is uploaded: whole, every
// problem known, when o asks for checks (checkLocal); else up to its
// first item (CheckLocalSource).
func (a *app) checkUpload(src, format, keyField, delim string, o CheckOptions) error {
	if len(o.Schema) > 0 || o.BadRows != "" {
		return a.checkLocal(src, format, keyField, delim, o, false)
	}
	if err := CheckLocalSource(src, format, keyField, delim); err != nil {
		return &ExitError{Code: ExitFailure, Err: fmt.Errorf("%s: %w (nothing was uploaded)", src, err)}
	}
	return nil
}
