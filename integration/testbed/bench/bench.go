package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/logging"

	"github.com/bulkrun/bulkrun/integration/testbed/meter"
	"github.com/bulkrun/bulkrun/internal/blob"
	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/internal/event"
	"github.com/bulkrun/bulkrun/internal/queue"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/finalize"
	"github.com/bulkrun/bulkrun/shared/function"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/source"
	"github.com/bulkrun/bulkrun/shared/submit"
	"github.com/bulkrun/bulkrun/shared/worker"
)

// Function memory sizes in MB, as the stack sets them by default
// (infra/bulkrun: DefaultMemoryMiB); used for the GB-seconds estimate.
const (
	SubmitMemoryMB   = 512
	ItemMemoryMB     = 512
	FinalizeMemoryMB = 1024
)

// EchoPipeline is the name of the pipeline the bench registers: it returns
// an output of the scenario's size and does nothing else.
const EchoPipeline = "bench-echo"

// Scenario is one run to measure.
type Scenario struct {
	Name        string
	Items       int // default 2,000
	InputBytes  int // bytes per source line; default 1,024
	OutputBytes int // bytes of each item's output JSON; ≤ 16 means a small output ({"ok":true})
	// ItemsPerMessage is the batch's items_per_message (K); 0 means 1.
	ItemsPerMessage int
	// Delivery is the order in which the queue hands out messages:
	// DeliveryChunkOrdered (the oldest first, so a receive holds the items
	// of one fan-out chunk) or DeliveryShuffled (at random among the
	// visible ones, as SQS standard queues may); "" is chunk-ordered. Set
	// on the scenario's queue as its bulkrun:delivery tag, which the
	// emulator's launcher (localstack/delivery.py) obeys.
	Delivery string
	// TransientPercent of the items (chosen by key) fail their first
	// attempt with a transient error and succeed on the retry;
	// PermanentPercent of the others fail permanently.
	TransientPercent, PermanentPercent int
	// ThresholdPercent, when > 0, is the batch's tolerated failure percent
	// (the early stop is armed).
	ThresholdPercent float64
}

// Delivery orders of a Scenario.
const (
	DeliveryChunkOrdered = "chunk-ordered"
	DeliveryShuffled     = "shuffled"
)

// ChunkItems is the fan-out chunk of the bench's batches: 200 items, so
// that a run of 2,000 items has ten chunks in the queue at once, as a
// large batch has many (its chunks are expanded in parallel), and a
// shuffled receive of ten messages holds items of ≈ 6.5 chunks.
const ChunkItems = 200

// failureOf says how item key fails in sc: "" (never), "transient" (its
// first attempt) or "permanent"; by FNV-1a of the key, so each run fails
// the same items.
func (sc Scenario) failureOf(key string) string {
	h := fnv.New32a()
	h.Write([]byte(key))
	switch p := int(h.Sum32() % 100); {
	case p < sc.TransientPercent:
		return "transient"
	case p < sc.TransientPercent+sc.PermanentPercent:
		return "permanent"
	}
	return ""
}

// Result is what one scenario measured.
type Result struct {
	Scenario
	// Usage is the metered requests of submit, the item function (with the
	// event source's ReceiveMessage and DeleteMessageBatch, made here as the
	// poller makes them: one of each per message batch) and finalize.
	Usage meter.Usage
	// Reported is what the emulator returned as ConsumedCapacity to the
	// adapter (rough on the emulator; the billed figure on AWS).
	Reported dynamo.Capacity
	// ReportUsage is the run report's usage block.
	ReportUsage api.Usage
	// EmptyReceives are receives that returned nothing (idle polling, billed
	// per minute of the event source, not per item); not in Usage.
	EmptyReceives int
	// MessageBatches is the item function's invocations (one per received
	// message batch).
	MessageBatches int
	// LambdaRequests counts invocations: submit, one per message batch,
	// finalize (its trigger's Invoke).
	LambdaRequests float64
	// LambdaGBSeconds is the wall time of each in-process invocation × its
	// function's memory. On the emulator it includes the emulator's latency.
	LambdaGBSeconds float64
	// APIRequests is the API Gateway requests: one submit.
	APIRequests float64
	// Redeliveries are the deliveries of messages received before (a
	// transient failure's retry, a message under another's lease).
	Redeliveries int
	// Census is the run's census from its report.
	Census api.Census
	// ChunksPerMessageBatch is the mean number of fan-out chunks whose
	// item or pack messages one message batch held (fan-out messages
	// left out): 1 when a receive holds one chunk's messages.
	ChunksPerMessageBatch float64
}

type trigger struct{ n atomic.Int64 }

func (t *trigger) Finalize(context.Context, string, int) error { t.n.Add(1); return nil }

// Run performs the scenario against the emulator (or AWS) given by cfg,
// in its own table, bucket and queue, which it deletes afterwards.
func Run(ctx context.Context, cfg aws.Config, sc Scenario) (Result, error) {
	if sc.Items <= 0 {
		sc.Items = 2000
	}
	if sc.InputBytes <= 0 {
		sc.InputBytes = 1024
	}
	res := Result{Scenario: sc}
	// Table, bucket and queue names allow a-z, 0-9 and "-" in common.
	slug := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(sc.Name))
	name := fmt.Sprintf("bench-%d-%s", time.Now().UnixNano(), slug)
	if len(name) > 60 {
		name = name[:60]
	}
	name = strings.Trim(name, "-")

	raw := dynamodb.NewFromConfig(cfg)
	rawS3 := function.NewS3(cfg)
	rawSQS := sqs.NewFromConfig(cfg)
	if err := dynamo.CreateTable(ctx, raw, name); err != nil {
		return res, fmt.Errorf("bench: create table: %w", err)
	}
	defer raw.DeleteTable(context.WithoutCancel(ctx), &dynamodb.DeleteTableInput{TableName: &name})
	if _, err := rawS3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &name}); err != nil {
		return res, fmt.Errorf("bench: create bucket: %w", err)
	}
	defer emptyBucket(context.WithoutCancel(ctx), rawS3, name)
	// A short visibility timeout: a ReceiveMessage whose answer the
	// emulator lost under load (the SDK sends it again) hides its messages
	// for this long, and the run waits for them (localstack/README.md).
	if sc.Delivery == "" {
		sc.Delivery = DeliveryChunkOrdered
		res.Delivery = sc.Delivery
	}
	order := map[string]string{DeliveryChunkOrdered: "ordered", DeliveryShuffled: "shuffled"}[sc.Delivery]
	if order == "" {
		return res, fmt.Errorf("bench: delivery %q: want %q or %q", sc.Delivery, DeliveryChunkOrdered, DeliveryShuffled)
	}
	q, err := rawSQS.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &name, Attributes: map[string]string{"VisibilityTimeout": "60"},
		Tags: map[string]string{"bulkrun:delivery": order}})
	if err != nil {
		return res, fmt.Errorf("bench: create queue: %w", err)
	}
	defer rawSQS.DeleteQueue(context.WithoutCancel(ctx), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl})
	qurl := aws.ToString(q.QueueUrl)

	// The source: JSONL, one line of InputBytes per item, key in "id".
	var src bytes.Buffer
	for i := range sc.Items {
		empty := fmt.Sprintf(`{"id":%q,"pad":""}`, api.PositionalKey(int64(i)))
		pad := strings.Repeat("x", max(0, sc.InputBytes-len(empty)-1))
		fmt.Fprintf(&src, `{"id":%q,"pad":%q}`+"\n", api.PositionalKey(int64(i)), pad)
	}
	if _, err := rawS3.PutObject(ctx, &s3.PutObjectInput{Bucket: &name, Key: aws.String("uploads/source.jsonl"), Body: bytes.NewReader(src.Bytes())}); err != nil {
		return res, fmt.Errorf("bench: put source: %w", err)
	}

	m := meter.New(cfg)
	metered := cfg.Copy()
	metered.Logger = logging.Nop{} // the emulator's ranged GETs make the SDK warn about checksums
	m.Attach(&metered)
	store := dynamo.New(dynamodb.NewFromConfig(metered), name)
	store.RowTTL = config.DefaultRetention + ledger.TTLGrace // as the functions set it (shared/function)
	blobs := blob.New(function.NewS3(metered), name)
	items := queue.New(sqs.NewFromConfig(metered), qurl)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	output := json.RawMessage(`{"ok":true}`)
	if sc.OutputBytes > len(output) {
		output = json.RawMessage(`{"echo":"` + strings.Repeat("y", sc.OutputBytes-len(`{"echo":""}`)) + `"}`)
	}
	res.OutputBytes = len(output)
	reg := &pipeline.Registry{}
	if err := reg.Register(EchoPipeline, pipeline.Func(func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		switch sc.failureOf(req.Key) {
		case "transient":
			if req.Attempt == 1 {
				return pipeline.Result{}, errors.New("bench: transient failure")
			}
		case "permanent":
			return pipeline.Result{}, pipeline.Permanent(errors.New("bench: permanent failure"))
		}
		return pipeline.Result{Output: output}, nil
	})); err != nil {
		return res, err
	}
	trig := &trigger{}
	sub := &submit.Submitter{Store: store, Blobs: blobs, Queue: items, Trigger: trig, Clock: ledger.SystemClock{}, Log: log,
		Pipelines: []string{EchoPipeline}, MaxAttempts: config.DefaultMaxAttempts, MaxReceiveCount: config.DefaultMaxReceiveCount,
		TempDir: os.TempDir(), Retention: config.DefaultRetention, Sources: source.SourcePolicy{Bucket: name}, ChunkItems: ChunkItems}
	// A transient failure's retry comes back after a second (the
	// shortest visibility change), not after the default backoff.
	w := &worker.Worker{Store: store, Blobs: blobs, Queue: items, Trigger: trig, Clock: ledger.SystemClock{}, Log: log,
		Pipelines: reg, Lease: config.DefaultLease, Retry: &api.RetryPolicy{IntervalSeconds: 1, BackoffRate: 1, MaxDelaySeconds: 1}}
	fin := &finalize.Finalizer{Store: store, Blobs: blobs, Clock: ledger.SystemClock{}, Log: log, Retention: config.DefaultRetention,
		Events: event.New(eventbridge.NewFromConfig(metered), "", name)}
	gbs := func(start time.Time, mb int) { res.LambdaGBSeconds += time.Since(start).Seconds() * float64(mb) / 1024 }

	var threshold api.Threshold
	if sc.ThresholdPercent > 0 {
		threshold.FailurePercent = &sc.ThresholdPercent
	}
	m.Reset()
	start := time.Now()
	id := strings.ToUpper(name[len(name)-min(len(name), 20):])
	id = strings.Trim(strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, id), "-")
	if _, err := sub.Submit(ctx, api.SubmitRequest{BatchID: id, Pipeline: EchoPipeline, KeyField: "id",
		Source: api.SourceSpec{Object: "s3://" + name + "/uploads/source.jsonl"}, ItemsPerMessage: sc.ItemsPerMessage,
		Threshold: threshold}); err != nil {
		return res, fmt.Errorf("bench: submit: %w", err)
	}
	gbs(start, SubmitMemoryMB)
	res.LambdaRequests++
	res.APIRequests++

	metered2 := sqs.NewFromConfig(metered)
	idle, dry := 0, 0
	unitBatches, chunkSum := 0, 0
	for trig.n.Load() == 0 || idle == 0 {
		out, err := metered2.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &qurl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount}})
		if err != nil {
			return res, fmt.Errorf("bench: receive: %w", err)
		}
		if len(out.Messages) == 0 {
			res.EmptyReceives++
			if dry++; trig.n.Load() > 0 {
				idle++
			} else if dry%10 == 0 {
				// Messages put back with a delay after the emulator was
				// unavailable come back within minutes (the worker's
				// UnavailableDelay), hidden ones after the visibility
				// timeout; a counter write lost to a fault is caught by
				// finalizing as the scheduled tick would: when the
				// counters say done, or once they stood still past twice
				// the visibility timeout.
				p, err := store.Progress(ctx, id, 1, ledger.CounterShards(0))
				if err != nil || p.Done < int64(sc.Items) && dry < 120 {
					continue
				}
				if _, err := fin.Finalize(ctx, id, 1); err == nil {
					trig.n.Add(1)
				} else if !errors.Is(err, api.ErrNotFinished) || dry > 300 {
					return res, fmt.Errorf("bench: the queue stayed empty before the run finished: %w", err)
				}
			}
			continue
		}
		dry = 0
		ds := make([]worker.Delivery, 0, len(out.Messages))
		chunks, unitBatch := map[int64]bool{}, false
		for _, msg := range out.Messages {
			var head struct {
				Kind  string `json:"kind"`
				First int64  `json:"chunk_first"`
			}
			if json.Unmarshal([]byte(aws.ToString(msg.Body)), &head) == nil && head.Kind != string(ledger.KindFanout) {
				chunks[head.First], unitBatch = true, true
			}
			n, _ := strconv.Atoi(msg.Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)])
			if n > 1 {
				res.Redeliveries++
			}
			ds = append(ds, worker.Delivery{MessageID: aws.ToString(msg.MessageId), Body: []byte(aws.ToString(msg.Body)),
				ReceiptHandle: aws.ToString(msg.ReceiptHandle), ReceiveCount: max(n, 1)})
		}
		if unitBatch {
			unitBatches++
			chunkSum += len(chunks)
		}
		start := time.Now()
		failed := w.Handle(ctx, ds)
		gbs(start, ItemMemoryMB)
		res.LambdaRequests++
		res.MessageBatches++
		if len(failed) > 0 && sc.TransientPercent == 0 {
			return res, fmt.Errorf("bench: %d deliveries failed in a run without transient failures", len(failed))
		}
		// The event source deletes the messages of a batch that did not
		// fail with one call (ReportBatchItemFailures); a failed one comes
		// back after its visibility timeout, which the worker set.
		skip := map[string]bool{}
		for _, id := range failed {
			skip[id] = true
		}
		del := &sqs.DeleteMessageBatchInput{QueueUrl: &qurl}
		for i, msg := range out.Messages {
			if !skip[aws.ToString(msg.MessageId)] {
				del.Entries = append(del.Entries, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: msg.ReceiptHandle})
			}
		}
		if len(del.Entries) > 0 {
			if _, err := metered2.DeleteMessageBatch(ctx, del); err != nil {
				return res, fmt.Errorf("bench: delete: %w", err)
			}
		}
	}
	res.LambdaRequests += float64(trig.n.Load()) // each trigger is one Invoke of finalize
	start = time.Now()
	fr, err := fin.Finalize(ctx, id, 1)
	if err != nil {
		return res, fmt.Errorf("bench: finalize: %w", err)
	}
	gbs(start, FinalizeMemoryMB)
	var permanent int64
	for i := range sc.Items {
		if sc.failureOf(api.PositionalKey(int64(i))) == "permanent" {
			permanent++
		}
	}
	res.Census = fr.Report.Census
	if unitBatches > 0 {
		res.ChunksPerMessageBatch = float64(chunkSum) / float64(unitBatches)
	}
	if c := fr.Report.Census; sc.ThresholdPercent == 0 && (c.Succeeded != int64(sc.Items)-permanent || c.Failed != permanent) {
		return res, fmt.Errorf("bench: census %+v, want %d succeeded and %d failed", c, int64(sc.Items)-permanent, permanent)
	}
	res.Usage = m.Usage()
	res.Usage.SQSRequests -= float64(res.EmptyReceives)
	res.Reported = store.Capacity()
	res.ReportUsage = fr.Report.Usage
	return res, nil
}

func emptyBucket(ctx context.Context, c *s3.Client, bucket string) {
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: &bucket})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			break
		}
		for _, o := range page.Contents {
			c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: o.Key})
		}
	}
	c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &bucket})
}
