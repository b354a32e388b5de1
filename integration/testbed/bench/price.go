// Package bench measures what a clean bulkrun run costs: it runs submit,
// the item function and finalize in this process against their real
// storage on the emulator (its own table, bucket and queue), meters every
// request with integration/testbed/meter, and prices the figures per 10^6
// items at us-east-1 on-demand prices next to Step Functions Distributed
// Map. It also computes the partition table: the busiest partition key's
// write units per second of the table and each index, at 10,000 items/s,
// from the real shard derivation (shared/ledger ListShards, CounterShards,
// Shard).
//
// `make bench` runs it (integration/testbed/cmd/bench); the echo pipeline
// it registers lives only in this package, so production cannot run it.
package bench

// Prices, us-east-1, USD. Sources:
//   - DynamoDB on-demand: "Amazon DynamoDB pricing for on-demand capacity"
//     (https://aws.amazon.com/dynamodb/pricing/on-demand/), since 1 Nov 2024:
//     $0.625 per million write request units, $0.125 per million read
//     request units.
//   - SQS standard queues: "Amazon SQS pricing"
//     (https://aws.amazon.com/sqs/pricing/): $0.40 per million requests,
//     each 64 KB chunk of a payload billed as one request.
//   - Lambda arm64: "AWS Lambda pricing" (https://aws.amazon.com/lambda/pricing/):
//     $0.20 per million requests, $0.0000133334 per GB-second.
//   - S3 Standard: "Amazon S3 pricing" (https://aws.amazon.com/s3/pricing/):
//     PUT, COPY, POST, LIST $0.005 per 1,000; GET and others $0.0004 per 1,000.
//   - EventBridge: "Amazon EventBridge pricing"
//     (https://aws.amazon.com/eventbridge/pricing/): custom events $1.00 per
//     million.
//   - API Gateway REST APIs: "Amazon API Gateway pricing"
//     (https://aws.amazon.com/api-gateway/pricing/): $3.50 per million.
//   - CloudWatch Logs: "Amazon CloudWatch pricing"
//     (https://aws.amazon.com/cloudwatch/pricing/), Logs: Lambda's logs
//     are vended logs delivered to CloudWatch Logs, $0.50 per GB (2^30
//     bytes, as AWS bills data) ingested
//     (the first 10 TB a month, the standard log class); storage, $0.03
//     per GB-month compressed, is per month kept, not per item, and left
//     out. An event is sized as PutLogEvents sizes a batch: its message's
//     UTF-8 bytes plus 26 bytes ("PutLogEvents", CloudWatch Logs API
//     reference).
//   - Step Functions: "AWS Step Functions pricing"
//     (https://aws.amazon.com/step-functions/pricing/): Standard $25 per
//     million state transitions; Express $1.00 per million requests.
const (
	USDPerWriteUnit      = 0.625 / 1e6
	USDPerReadUnit       = 0.125 / 1e6
	USDPerSQSRequest     = 0.40 / 1e6
	USDPerLambdaRequest  = 0.20 / 1e6
	USDPerLambdaGBSecond = 0.0000133334
	USDPerS3Put          = 0.005 / 1e3
	USDPerS3Get          = 0.0004 / 1e3
	USDPerEvent          = 1.00 / 1e6
	USDPerAPIRequest     = 3.50 / 1e6
	USDPerLogGB          = 0.50
	// LogEventOverheadBytes is what CloudWatch Logs adds to each event's
	// message in sizing it (PutLogEvents).
	LogEventOverheadBytes = 26
)

// Anchor is what Step Functions Distributed Map charges for the same 10^6
// items, excluding the pipeline's own compute and counting the Lambda
// request fees its granularity causes.
type Anchor struct {
	Name        string
	USD         float64
	Assumptions string
}

// Anchors are the Distributed Map figures bulkrun is compared with.
var Anchors = []Anchor{
	{"Distributed Map, Standard children", 25.2, "one state transition per item at $25/10^6, plus one Lambda request per item"},
	{"Distributed Map, Express children", 1.4, "$1.00/10^6 executions, ≈ $0.21 duration at 64 MB × 200 ms, $0.20 Lambda requests; no ledger"},
	{"Distributed Map Express + idempotency table", 2.7, "as above plus a per-item idempotency record (≥ 2 write units per item)"},
	{"Distributed Map Express + ItemBatcher(10)", 0.33, "ten items per child execution; no ledger"},
	{"Distributed Map Express + ItemBatcher(10) + ledger", 1.6, "as above plus a per-item ledger record"},
}

// PlatformLogLines are the lines Lambda itself writes for each invocation
// at the stack's system log level INFO with the JSON log format
// (infra/bulkrun: LoggingFormat JSON, SystemLogLevel INFO): platform.start
// and platform.report, shaped as the Lambda developer guide's "Telemetry
// API Event schema reference" gives them (a request id of 36 characters,
// the report's four metrics; a cold start's platform.initStart and
// initReport, once per environment, left out).
var PlatformLogLines = []string{
	`{"time":"2026-12-03T05:00:00.000Z","type":"platform.start","record":{"requestId":"6d68ca91-49c9-448d-89b8-7ca3e6dc66aa","version":"$LATEST"}}`,
	`{"time":"2026-12-03T05:00:00.250Z","type":"platform.report","record":{"requestId":"6d68ca91-49c9-448d-89b8-7ca3e6dc66aa","metrics":{"durationMs":248.31,"billedDurationMs":249,"memorySizeMB":512,"maxMemoryUsedMB":61},"status":"success"}}`,
}

// PlatformLogBytesPerInvocation is PlatformLogLines as CloudWatch Logs
// sizes them.
func PlatformLogBytesPerInvocation() int {
	n := 0
	for _, l := range PlatformLogLines {
		n += len(l) + LogEventOverheadBytes
	}
	return n
}
