package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Item is an item's row. Rows exist from the item's first reservation on;
// an item without a row is pending.
type Item struct {
	Key     string  `json:"key"`
	RunID   string  `json:"run_id"`
	Run     int     `json:"run"`
	Outcome Outcome `json:"outcome"`
	// Attempt is the number of the item's latest attempt, counted across
	// every run of the batch, throttled attempts included: the fence of
	// its outcome (the webhook's Bulkrun-Attempt, the lambda pipeline's
	// attempt). JSON "attempt".
	Attempt int `json:"attempt"`
	// RunAttempts is how many attempts the item's last run (Run) counted
	// toward max_attempts: throttled attempts are not counted; 0 for an
	// item settled without running. JSON "attempts" (a results line's
	// attempts). An item that failed twice in run 1 shows attempt 3,
	// attempts 1 on its first attempt of run 2.
	RunAttempts int  `json:"attempts"`
	Released    bool `json:"released,omitempty"` // a quarantined item released for the next run
	// Revision is the manifest revision of the item's input: 0 (absent)
	// for the batch's own manifest, n ≥ 2 once a correction (Batch.Revisions)
	// gave it a new input.
	Revision   int             `json:"revision,omitempty"`
	LeaseUntil time.Time       `json:"lease_until,omitzero"`
	Output     json.RawMessage `json:"output,omitempty"`
	OutputRef  string          `json:"output_ref,omitempty"` // s3:// URI when the output is too large for the row
	Error      string          `json:"error,omitempty"`
	Reason     Reason          `json:"reason,omitempty"`
	// Hold is what a held item (withheld) waits for; nil for any other
	// outcome.
	Hold *Hold `json:"hold,omitempty"`
	// Next is the item's next move, in words, in listings (NextMove):
	// what a caller may do about a failed, quarantined or held item;
	// empty for the others. Not stored.
	Next string        `json:"next,omitempty"`
	Cost pipeline.Cost `json:"cost,omitempty"` // what the attempt that ended the item spent
	// Spent is what every attempt of run SpentRun spent (the ending one
	// included): the sum of each attempt's cost records, written with each
	// outcome and each release. Census.RunSpent sums it over the rows of
	// the current run.
	Spent     pipeline.Cost `json:"spent,omitempty"`
	UpdatedAt time.Time     `json:"updated_at,omitzero"`
	// ThrottledSince is when the item's current streak of throttled
	// attempts began (a service called on its behalf refused it for its
	// rate or capacity; those attempts count no attempt, see Conclude);
	// zero when its last attempt was not throttled.
	ThrottledSince time.Time `json:"throttled_since,omitzero"`
}

// ResultLine is one line of a results file: one item of the batch, with
// the outcome it has at the end of the run the file belongs to. A run's
// results hold every item once, the ones it did not run with the outcome
// an earlier run gave them (a resumed run answers succeeded items from
// their rows): Run says which run produced the line's outcome, Attempts
// how many attempts that run made (0: settled without running, such as an
// item cancelled before it started).
type ResultLine struct {
	Key     string  `json:"key"`
	Outcome Outcome `json:"outcome"`
	Run     int     `json:"run"`
	// Revision is the manifest revision whose input produced the outcome:
	// 1 for the batch's own manifest, n ≥ 2 for a correction's
	// (Batch.Revisions).
	Revision  int             `json:"revision"`
	Output    json.RawMessage `json:"output,omitempty"`
	OutputRef string          `json:"output_ref,omitempty"`
	Error     string          `json:"error,omitempty"`
	Reason    Reason          `json:"reason,omitempty"`
	Attempts  int             `json:"attempts"`
	Cost      pipeline.Cost   `json:"cost,omitempty"`
}

// ResultPage is one page of a batch's partial results (GET
// /batches/{id}/results/partial): the results lines of the items whose
// outcome in the batch's current run is recorded so far, each shaped as
// the line the run's results file will hold for it (ResultLine), in
// Order. Items pending, in flight or withheld in the run have no line
// yet and are absent, as they are from no results file.
type ResultPage struct {
	BatchID string `json:"batch_id"`
	Run     int    `json:"run"`
	// Status is the batch's status when the page was read: while it is
	// running, later pages (and a later stream) hold more lines.
	Status Status `json:"status"`
	// Order is ResultOrderKey (key byte order, the order of the results
	// files) or ResultOrderManifest (manifest order: a batch with items
	// per message > 1, whose rows are keyed by manifest position).
	Order      string       `json:"order"`
	Lines      []ResultLine `json:"lines"`
	NextCursor string       `json:"next_cursor,omitempty"` // pass as cursor for the next page; empty at the end
}

// The orders of a ResultPage.
const (
	ResultOrderKey      = "key"
	ResultOrderManifest = "manifest"
)

// ItemPage is one page of a listing.
type ItemPage struct {
	Items      []Item `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"` // pass as cursor for the next page; empty at the end
	// Live, on the first page of in_flight of a running batch, is its
	// live view (live.Of): the items the page cannot list because they have
	// no row yet (not fanned out, or sent and not yet received) are
	// counted there, with those waiting for a retry.
	Live *LiveView `json:"live,omitempty"`
}

// ReadResults parses a results file (JSONL of ResultLine), calling fn per line.
func ReadResults(r io.Reader, fn func(ResultLine) error) error {
	dec := json.NewDecoder(r)
	for {
		var l ResultLine
		if err := dec.Decode(&l); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("results: %w", err)
		}
		if err := fn(l); err != nil {
			return err
		}
	}
}

// InputPage is a page of GET /batches/{id}/inputs (control.Control.Inputs):
// the current inputs of some items of an outcome, in the source's own
// format, ready to edit and hand to a correction. Its body is not JSON:
// the API answers Body as it is, with Content-Type ContentType(Format)
// and the page's NextCursor and Count in the headers HeaderNextCursor and
// HeaderInputCount.
type InputPage struct {
	// Format is FormatCSV for a CSV source (Body: a header record, then a
	// record per item, with the source's delimiter), else FormatJSONL
	// (Body: one JSON value a line, each an item's input compacted).
	Format string
	Body   []byte
	// Count is how many items' inputs Body holds (0: a CSV Body is its
	// header alone, a JSON Lines Body empty).
	Count int
	// NextCursor goes on after this page; "" at the end.
	NextCursor string
}

// Headers and content types of GET /batches/{id}/inputs.
const (
	HeaderNextCursor  = "Bulkrun-Next-Cursor"
	HeaderInputCount  = "Bulkrun-Input-Count"
	ContentTypeCSV    = "text/csv; charset=utf-8; header=present"
	ContentTypeNDJSON = "application/x-ndjson"
)

// InputContentType is the Content-Type of an InputPage of format: CSV's
// (RFC 4180, with header=present) or JSON Lines' (application/x-ndjson).
func InputContentType(format string) string {
	if format == FormatCSV {
		return ContentTypeCSV
	}
	return ContentTypeNDJSON
}

// InputOutcomes are the outcomes whose items' inputs GET
// /batches/{id}/inputs exports: those a correction takes that can be
// listed (a cancelled item is corrected too, but is not listed by
// outcome).
var InputOutcomes = []Outcome{OutcomeFailed, OutcomeQuarantined}
