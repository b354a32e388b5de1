package api

import (
	"fmt"
	"strings"
)

// BatchesPrefix is the S3 prefix of everything a batch owns.
func BatchesPrefix(id string) string { return "batches/" + id + "/" }

// ManifestKey is where a submit attempt writes its manifest. Each attempt
// writes its own object (the id is a ULID) so that a refused or duplicate
// submit never touches the stored batch's manifest.
func ManifestKey(batchID, attempt string) string {
	return fmt.Sprintf("batches/%s/manifests/%s.jsonl", batchID, attempt)
}

// SchemaKey is where the JSON Schema a batch's source was checked with
// is kept, beside the manifest it checked (manifestKey, ManifestKey's):
// batches/{id}/manifests/{attempt}.schema.json. A correction checks its
// items with it, as the source's rows were (typed CSV cells included).
func SchemaKey(manifestKey string) string {
	return strings.TrimSuffix(manifestKey, ".jsonl") + ".schema.json"
}

// RunPrefix is where a run's report and results live.
func RunPrefix(batchID string, run int) string {
	return fmt.Sprintf("batches/%s/runs/%d/", batchID, run)
}

// ReportKey is the key of a run's report.
func ReportKey(batchID string, run int) string { return RunPrefix(batchID, run) + "report.json" }

// ResultsKey is the key of a run's results file for one outcome.
func ResultsKey(batchID string, run int, o Outcome) string {
	return RunPrefix(batchID, run) + "results/" + string(o) + ".jsonl"
}

// ResultsManifestKey is the key of a run's results manifest.json.
func ResultsManifestKey(batchID string, run int) string {
	return RunPrefix(batchID, run) + "results/manifest.json"
}

// OutputsPrefix is where a batch's pipeline outputs live.
func OutputsPrefix(batchID string) string { return "batches/" + batchID + "/outputs/" }

// HeldMessageKey is where the item function keeps the items-queue message
// of a unit (unit: "item-{run id}" for an item row, "pack-{first:012}"
// for a pack row) whose item it held in run: a held item has no message
// on the queue, and its wake sends this one again. Written before the
// item's held outcome, overwritten by each hold of the unit; forget
// removes it with the batch's prefix.
func HeldMessageKey(batchID string, run int, unit string) string {
	return fmt.Sprintf("batches/%s/held/%d/%s.json", batchID, run, unit)
}
