package api

import "fmt"

// BatchesPrefix is the S3 prefix of everything a batch owns.
func BatchesPrefix(id string) string { return "batches/" + id + "/" }

// ManifestKey is where a submit attempt writes its manifest. Each attempt
// writes its own object (the id is a ULID) so that a refused or duplicate
// submit never touches the stored batch's manifest.
func ManifestKey(batchID, attempt string) string {
	return fmt.Sprintf("batches/%s/manifests/%s.jsonl", batchID, attempt)
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
