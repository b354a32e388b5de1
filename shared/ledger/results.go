package ledger

import "github.com/bulkrun/bulkrun/shared/api"

// OutcomeInRun is item row it's outcome in the batch's current run b.Run,
// the one its results line of that run carries, or false for an item
// pending in that run (a row an earlier run left failed, cancelled, in
// flight or released quarantined, which this run runs again; in a
// correction run, a row marked with its revision and not yet taken). A
// row of an earlier run that this run does not run again (succeeded,
// quarantined) keeps its outcome. The outcome may be non-terminal (in
// flight, withheld): the item has no results line yet. Finalize counts
// the census and writes the results by it; the partial results
// (control.Control.PartialResults) list by it, so that they end equal to
// the run's results.
func OutcomeInRun(it Item, b Batch) (api.Outcome, bool) {
	o := it.Outcome
	if b.RunRevision >= 2 {
		// A correction run: an item marked with its revision is pending
		// until this run has taken it; every other item keeps the outcome
		// an earlier run gave it (each key counted once, with its latest).
		if it.Run < b.Run && it.Revision == b.RunRevision {
			return "", false
		}
		return o, true
	}
	if it.Run < b.Run && (o == api.OutcomeFailed || o == api.OutcomeCancelled || o == api.OutcomeInFlight || o == api.OutcomeQuarantined && it.Released) {
		return "", false
	}
	return o, true
}

// ResultLineOf is item row it's line in the results of outcome o (one
// line of results/{o}.jsonl).
func ResultLineOf(it Item, o api.Outcome) api.ResultLine {
	return api.ResultLine{Key: it.Key, Outcome: o, Run: it.Run, Revision: max(it.Revision, 1), Output: it.Output, OutputRef: it.OutputRef,
		Error: it.Error, Reason: it.Reason, Attempts: it.RunAttempts, Cost: it.Cost}
}
