package api

import (
	"fmt"
	"strings"
)

// ProblemKind is what is wrong with a row of a source.
type ProblemKind string

// The problem kinds.
const (
	// ProblemFormat: the row cannot be read as an item (a CSV row with
	// another number of fields than the header, a byte that is not UTF-8,
	// a line that is not JSON, a missing key, a cell that is not of the
	// type the schema gives its column).
	ProblemFormat ProblemKind = "format"
	// ProblemSchema: the row was read, and the batch's JSON Schema
	// refuses it (Problem.Path names the failing value).
	ProblemSchema ProblemKind = "schema"
	// ProblemDuplicate: the row's key was the key of an earlier row
	// (Problem.FirstLine).
	ProblemDuplicate ProblemKind = "duplicate"
)

// Handling is what becomes of a row with a problem.
type Handling string

// The handlings.
const (
	// HandlingRefused: the batch is refused (bad_rows refuse, or too many
	// bad rows); nothing runs.
	HandlingRefused Handling = "refused"
	// HandlingFailed: the row is an item that ends failed, with the
	// problem as its error, without its pipeline ever being called
	// (bad_rows fail).
	HandlingFailed Handling = "failed"
	// HandlingDropped: the row is not an item: the later row of a
	// duplicate key under bad_rows fail (the first row with the key runs).
	HandlingDropped Handling = "dropped"
)

// Problem is one row of a source that cannot run as it is: where it is
// (Line, 1-based, of JSON Lines and CSV — where the record began — or
// Element of a JSON array), its Key when one was read, its Kind, the
// failing Path (a JSON pointer, RFC 6901, into the item for a schema
// problem; the column's pointer for a CSV cell; "" otherwise), the Reason,
// for a duplicate the FirstLine (or element) of its key, and its
// Handling. One line of a batch's invalid-items file (InvalidKey); JSON
// names as tagged.
type Problem struct {
	Line      int64       `json:"line,omitempty"`
	Element   int64       `json:"element,omitempty"`
	Key       string      `json:"key,omitempty"`
	Kind      ProblemKind `json:"kind"`
	Path      string      `json:"path,omitempty"`
	Reason    string      `json:"reason"`
	FirstLine int64       `json:"first_line,omitempty"`
	Handling  Handling    `json:"handling"`
}

// Where is the problem's place: "line 7", "element 3", with the key when
// known (`line 7 (key "a-17")`).
func (p Problem) Where() string {
	w := fmt.Sprintf("line %d", p.Line)
	if p.Element > 0 {
		w = fmt.Sprintf("element %d", p.Element)
	}
	if p.Key != "" {
		w += fmt.Sprintf(" (key %q)", Truncate(p.Key, 80))
	}
	return w
}

// Text is the problem in one line: where, the path, the reason.
func (p Problem) Text() string {
	s := p.Where() + ": "
	if p.Path != "" {
		s += p.Path + ": "
	}
	return s + p.Reason
}

// BadRows is a batch's policy for rows with a problem (SubmitRequest.BadRows).
type BadRows string

// The bad-rows policies.
const (
	// BadRowsRefuse (the default): a source with any problem is refused
	// whole, every problem listed; nothing runs.
	BadRowsRefuse BadRows = "refuse"
	// BadRowsFail: a row that cannot be read or that the schema refuses is
	// an item that ends failed with its problem, never run; the later row
	// of a duplicate key is dropped (not an item) and listed; the batch is
	// refused whole only when its bad rows pass MaxInvalidPercent.
	BadRowsFail BadRows = "fail"
)

// DefaultMaxInvalidPercent is the share of bad rows (format and schema
// problems, and dropped duplicates, over every row read) past which a
// batch with bad_rows fail is refused whole: 10 %. A few bad rows are
// data; one row in ten or more is far more often the wrong file, the
// wrong delimiter or a schema of another version, where every failed
// item would be noise: Spark's and BigQuery's readers take the same view
// by refusing at the first bad record unless told how many to allow.
const DefaultMaxInvalidPercent = 10.0

// MaxListedProblems is how many problems a refusal carries (its first
// ones); every problem is in the invalid-items file.
const MaxListedProblems = 100

// MaxStoredProblems is how many problems a batch keeps on its row
// (CheckSummary.First).
const MaxStoredProblems = 10

// InvalidKey is the S3 key of the invalid-items file a submit attempt
// writes (attempt as in ManifestKey): one JSON line per Problem, in
// source order, then the duplicates in key order. Written before anything
// runs, only when the source has a problem; the batch names its own
// (CheckSummary.Object, SubmitRefusal.InvalidObject) and keeps and
// forgets it with its other objects.
func InvalidKey(batchID, attempt string) string {
	return fmt.Sprintf("batches/%s/invalid/%s.jsonl", batchID, attempt)
}

// CheckSummary is what a batch's submit found wrong in its source: Invalid
// rows that are failed items (format and schema problems under bad_rows
// fail), Duplicates dropped, the invalid-items file (Object, an S3 key
// in the stack's bucket) and the First problems (at most
// MaxStoredProblems). Absent when the source had no problem. JSON names as
// tagged.
type CheckSummary struct {
	Invalid    int64     `json:"invalid"`
	Duplicates int64     `json:"duplicates"`
	Object     string    `json:"object"`
	First      []Problem `json:"first,omitempty"`
}

// ProblemsError is a source refused for its problems: Count problems in
// all, Rows rows read, the first of them listed (at most
// MaxListedProblems), and why the batch is refused (Why: any problem under
// bad_rows refuse, or too large a share). errors.Is(err, ErrInvalid) is
// true; it names the first problem's line and key.
type ProblemsError struct {
	Count  int64
	Rows   int64
	First  []Problem
	Why    string
	Object string // the invalid-items file, "" when none was written
}

func (e *ProblemsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %s cannot run (%s)", e.Count, Count(e.Rows, "row"), e.Why)
	for i, p := range e.First {
		if i == 5 {
			fmt.Fprintf(&b, "; and %d more", e.Count-5)
			break
		}
		b.WriteString("; " + p.Text())
	}
	if e.Object != "" {
		b.WriteString("; every problem is listed in " + e.Object)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ProblemsError) Is(target error) bool { return target == ErrInvalid }

// InputError is the problems as the *InputError a refusal records: the
// first problem's line, element and key, and the whole text.
func (e *ProblemsError) InputError() *InputError {
	ie := &InputError{Reason: e.Error()}
	if len(e.First) > 0 {
		ie.Line, ie.Element, ie.Key = e.First[0].Line, e.First[0].Element, Truncate(e.First[0].Key, 80)
	}
	return ie
}
