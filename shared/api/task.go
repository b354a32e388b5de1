package api

// MaxTaskTokenBytes bounds SubmitRequest.TaskToken: 2,048, the longest
// task token Step Functions' SendTaskSuccess and SendTaskFailure take
// (AWS Step Functions API Reference, "SendTaskSuccess", taskToken:
// length 1–2048).
const MaxTaskTokenBytes = 2048

// The bounds of SubmitRequest.TaskHeartbeatSeconds. bulkrun sends a
// batch's heartbeat from its ticks (the FinalizeTick and SubmitTick
// schedule, "rate(5 minutes)" by default): the least interval it can keep
// is twice that period, so a tick that is late or fails leaves the task
// alive. The most is Step Functions' own bound on HeartbeatSeconds (AWS
// Step Functions Developer Guide, "Task workflow state": a positive
// integer less than 99999999, the state's TimeoutSeconds).
const (
	MinTaskHeartbeatSeconds = 600
	MaxTaskHeartbeatSeconds = 99999999
)

// The error names of SendTaskFailure, one per way a batch's first run
// ends without a verdict (a Task state's Catch or Retry matches them by
// ErrorEquals); the cause is the run's reason as text (at most
// MaxTaskCauseBytes).
const (
	TaskErrorCancelled      = "bulkrun.Cancelled"      // a caller cancelled the run
	TaskErrorFinalizeFailed = "bulkrun.FinalizeFailed" // the run could not be finished (StatusFinalizeFailed)
	TaskErrorRefused        = "bulkrun.Refused"        // the source was refused; nothing ran (StatusRefused)
)

// MaxTaskCauseBytes bounds SendTaskFailure's cause as bulkrun sends it:
// 32,768 bytes, SendTaskFailure's limit (AWS Step Functions API Reference,
// "SendTaskFailure", cause: length 0–32768; error: 0–256).
const MaxTaskCauseBytes = 32768

// TaskOutput is the output bulkrun sends with SendTaskSuccess when a
// batch's first run completed or exceeded its threshold: the run's
// status (the verdict a Choice state branches on: "completed" or
// "threshold_exceeded"), its census and verdict, and where its report and
// results are. JSON, well within SendTaskSuccess's 256 KiB output (the
// census's cost rollup is bounded: pipeline.BoundCost):
//
//	{"batch_id": "…", "run": 1, "status": "threshold_exceeded",
//	 "census": {"total": 3, "succeeded": 1, "failed": 2, …},
//	 "verdict": {"exceeded": true, "limit": "tolerated_failure_count", "failures": 2, "total": 3, …},
//	 "report": "s3://…/batches/{id}/runs/1/report.json",
//	 "results": {"manifest": "s3://…/manifest.json", "files": {…}}, "outputs": "s3://…"}
type TaskOutput struct {
	BatchID string  `json:"batch_id"`
	Run     int     `json:"run"`
	Status  Status  `json:"status"`
	Census  Census  `json:"census"`
	Verdict Verdict `json:"verdict"`
	Report  string  `json:"report"` // s3:// URI of report.json
	Results Results `json:"results"`
	Outputs string  `json:"outputs"` // s3:// prefix of the pipeline's output objects
}
