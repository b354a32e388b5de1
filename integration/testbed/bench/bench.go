package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/logging"
	"github.com/aws/smithy-go/middleware"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/integration/testbed/meter"
	"github.com/bulkrun/bulkrun/internal/blob"
	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/internal/event"
	"github.com/bulkrun/bulkrun/internal/handler"
	"github.com/bulkrun/bulkrun/internal/metric"
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
	// MaxConcurrency, when > 0, is the batch's max_concurrency: its run
	// goes on that many tracks (docs/adr/0028), each running its units
	// one after another.
	MaxConcurrency int
	// ChunkItems, when > 0, is the run's fan-out chunk in place of the
	// bench's ChunkItems (the product's is 5,000 items,
	// source.DefaultChunkItems): a run on tracks cuts no slice across a
	// chunk, so the chunk bounds its slices.
	ChunkItems int
	// Scale, when > 1, marks a scenario run at Scale times the bench's
	// items (its Items already so): a run on tracks beside the same run
	// without them at a size where a slice holds its full 100 units
	// (pace.SliceSize). The tables by K, by order, of failures and of
	// partitions take the runs at the bench's own size (Scale ≤ 1).
	Scale int
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
	// LogBytes and LogEvents are what the functions logged (their JSON
	// log lines and CloudWatch metric lines, at the stack's default level
	// "info"), as CloudWatch Logs sizes events: each line's bytes, and
	// the events; Lambda's own platform lines are added per invocation
	// in Figures (PlatformLogBytesPerInvocation).
	LogBytes, LogEvents int64
	logs                *logCounter
	// ChunksPerMessageBatch is the mean number of fan-out chunks whose
	// item or pack messages one message batch held (fan-out messages
	// left out): 1 when a receive holds one chunk's messages.
	ChunksPerMessageBatch float64
}

// logCounter counts the bytes and lines written to it (each Write of the
// JSON handlers and the metric emitter is one line), and keeps the log
// lines (not the metric lines) written since the mark before the last:
// those of an invocation of the item function and of the one before it
// (which may have sent its messages), printed when its deliveries fail.
type logCounter struct {
	bytes, lines atomic.Int64
	mu           sync.Mutex
	kept         [][]byte
	before       int // kept[:before] were written before the last mark
}

func (c *logCounter) Write(p []byte) (int, error) {
	c.bytes.Add(int64(len(p)))
	c.lines.Add(int64(bytes.Count(p, []byte("\n"))))
	if !bytes.Contains(p, []byte(`"_aws":`)) { // a metric line (EMF) says nothing of why
		c.mu.Lock()
		c.kept = append(c.kept, bytes.Clone(p))
		c.mu.Unlock()
	}
	return len(p), nil
}

// keep keeps a line among the log lines without counting it: what is
// not one of the functions' lines (attemptErrors).
func (c *logCounter) keep(line string) {
	c.mu.Lock()
	c.kept = append(c.kept, []byte(line+"\n"))
	c.mu.Unlock()
}

// attemptErrors keeps each failed try of an AWS call among the log lines
// (the SDK may try a call again: its first try may have taken effect), so
// that a failed delivery's lines show the calls behind it.
func attemptErrors(c *logCounter) func(*middleware.Stack) error {
	return func(s *middleware.Stack) error {
		return s.Finalize.Insert(middleware.FinalizeMiddlewareFunc("benchAttemptErrors",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				start := time.Now()
				out, md, err := next.HandleFinalize(ctx, in)
				if err != nil {
					c.keep(fmt.Sprintf("%s aws call %s/%s try failed after %d ms: %v", start.UTC().Format(time.RFC3339Nano),
						awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx), time.Since(start).Milliseconds(), err))
				}
				return out, md, err
			}), "Retry", middleware.After)
	}
}

// mark forgets the lines kept before the last mark.
func (c *logCounter) mark() {
	c.mu.Lock()
	c.kept = slices.Delete(c.kept, 0, c.before)
	c.before = len(c.kept)
	c.mu.Unlock()
}

// since is the lines kept since the mark before the last, the last mark
// shown, but for those of items recorded succeeded (counted).
func (c *logCounter) since() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b bytes.Buffer
	succeeded := 0
	for i, line := range c.kept {
		if i == c.before {
			b.WriteString("-- the invocation:\n")
		}
		if bytes.Contains(line, []byte(`"message":"item recorded"`)) && bytes.Contains(line, []byte(`"outcome":"succeeded"`)) {
			succeeded++
			continue
		}
		b.Write(line)
	}
	fmt.Fprintf(&b, "-- and %d lines of items recorded succeeded\n", succeeded)
	return b.Bytes()
}

func (c *logCounter) totals() (bytes, lines int64) { return c.bytes.Load(), c.lines.Load() }

type trigger struct{ n atomic.Int64 }

func (t *trigger) Finalize(context.Context, string, int) error { t.n.Add(1); return nil }

// Run performs the scenario against the emulator (or AWS) given by cfg,
// in its own table, bucket and queue, which it deletes afterwards.
func Run(ctx context.Context, cfg aws.Config, sc Scenario) (Result, error) {
	cfg = idleUnderEmulator(cfg)
	sc = sc.withDefaults()
	res := Result{Scenario: sc}
	tag, err := deliveryTag(sc.Delivery)
	if err != nil {
		return res, err
	}
	b := newBed(cfg, resourceName(sc.Name))
	defer b.remove(context.WithoutCancel(ctx))
	if err := b.create(ctx, tag); err != nil {
		return res, err
	}
	if err := b.putSource(ctx, sc); err != nil {
		return res, err
	}
	r, err := newRun(cfg, b, sc, &res)
	if err != nil {
		return res, err
	}
	if err := r.submit(ctx); err != nil {
		return res, err
	}
	if err := r.drain(ctx); err != nil {
		return res, err
	}
	if err := r.finish(ctx); err != nil {
		return res, err
	}
	return res, nil
}

// idleUnderEmulator is cfg with its HTTP client (the SDK's default, or
// one built like it) closing idle connections after
// faultproxy.UpstreamIdleTimeout instead of 90 s: before the emulator
// would (faultproxy.EmulatorKeepAlive), which answers no call that reaches
// it as it closes one and applies it, so that the SDK's retry sends it
// twice. A client of another kind is left as it is.
func idleUnderEmulator(cfg aws.Config) aws.Config {
	c, ok := cfg.HTTPClient.(*awshttp.BuildableClient)
	if cfg.HTTPClient == nil {
		c, ok = awshttp.NewBuildableClient(), true
	}
	if ok {
		cfg.HTTPClient = c.WithTransportOptions(func(t *http.Transport) { t.IdleConnTimeout = faultproxy.UpstreamIdleTimeout })
	}
	return cfg
}

// withDefaults fills sc's zero fields: 2,000 items, lines of 1,024
// bytes, chunk-ordered delivery.
func (sc Scenario) withDefaults() Scenario {
	if sc.Items <= 0 {
		sc.Items = 2000
	}
	if sc.InputBytes <= 0 {
		sc.InputBytes = 1024
	}
	if sc.Delivery == "" {
		sc.Delivery = DeliveryChunkOrdered
	}
	return sc
}

// deliveryTag is the queue's bulkrun:delivery tag for a Scenario's
// Delivery ("ordered" or "shuffled"), the order the emulator's launcher
// (localstack/delivery.py) then delivers in.
func deliveryTag(delivery string) (string, error) {
	tag := map[string]string{DeliveryChunkOrdered: "ordered", DeliveryShuffled: "shuffled"}[delivery]
	if tag == "" {
		return "", fmt.Errorf("bench: delivery %q: want %q or %q", delivery, DeliveryChunkOrdered, DeliveryShuffled)
	}
	return tag, nil
}

// resourceName is the name of a scenario's table, bucket and queue:
// bench-<Unix nanoseconds>-<the scenario's name>, in the characters all
// three allow (a-z, 0-9 and "-"), at most 60 of them.
func resourceName(scenario string) string {
	slug := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(scenario))
	name := fmt.Sprintf("bench-%d-%s", time.Now().UnixNano(), slug)
	if len(name) > 60 {
		name = name[:60]
	}
	return strings.Trim(name, "-")
}

// batchID is the batch id of the run in the resources named name: its
// last 20 characters in upper case, "-" for any a batch id does not allow.
func batchID(name string) string {
	id := strings.ToUpper(name[len(name)-min(len(name), 20):])
	return strings.Trim(strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, id), "-")
}

// sourceKey is the source object's key in the scenario's bucket.
const sourceKey = "uploads/source.jsonl"

// sourceLines is the scenario's source: JSONL, one line of InputBytes
// per item, its key in "id".
func sourceLines(sc Scenario) []byte {
	var src bytes.Buffer
	for i := range sc.Items {
		empty := fmt.Sprintf(`{"id":%q,"pad":""}`, api.PositionalKey(int64(i)))
		pad := strings.Repeat("x", max(0, sc.InputBytes-len(empty)-1))
		fmt.Fprintf(&src, `{"id":%q,"pad":%q}`+"\n", api.PositionalKey(int64(i)), pad)
	}
	return src.Bytes()
}

// bed is a scenario's own table, bucket and queue, all named name, with
// the unmetered clients that make and delete them.
type bed struct {
	name     string
	queueURL string
	db       *dynamodb.Client
	s3       *s3.Client
	sqs      *sqs.Client
	undo     []func(context.Context) // deletes what create made, in the order made
}

func newBed(cfg aws.Config, name string) *bed {
	return &bed{name: name, db: dynamodb.NewFromConfig(cfg), s3: function.NewS3(cfg), sqs: sqs.NewFromConfig(cfg)}
}

// create makes the table, the bucket and the queue, whose bulkrun:delivery
// tag is tag; remove deletes those made, also when a later one failed.
func (b *bed) create(ctx context.Context, tag string) error {
	if err := dynamo.CreateTable(ctx, b.db, b.name); err != nil {
		return fmt.Errorf("bench: create table: %w", err)
	}
	b.undo = append(b.undo, func(ctx context.Context) {
		b.db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &b.name})
	})
	if _, err := b.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &b.name}); err != nil {
		return fmt.Errorf("bench: create bucket: %w", err)
	}
	b.undo = append(b.undo, func(ctx context.Context) { emptyBucket(ctx, b.s3, b.name) })
	// A short visibility timeout: a ReceiveMessage whose answer the
	// emulator lost under load (the SDK sends it again) hides its messages
	// for this long, and the run waits for them (localstack/README.md).
	q, err := b.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &b.name, Attributes: map[string]string{"VisibilityTimeout": "60"},
		Tags: map[string]string{"bulkrun:delivery": tag}})
	if err != nil {
		return fmt.Errorf("bench: create queue: %w", err)
	}
	b.undo = append(b.undo, func(ctx context.Context) {
		b.sqs.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl})
	})
	b.queueURL = aws.ToString(q.QueueUrl)
	return nil
}

// remove deletes what create made, the last made first.
func (b *bed) remove(ctx context.Context) {
	for i := len(b.undo) - 1; i >= 0; i-- {
		b.undo[i](ctx)
	}
}

// putSource writes the scenario's source (sourceLines) at sourceKey.
func (b *bed) putSource(ctx context.Context, sc Scenario) error {
	_, err := b.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &b.name, Key: aws.String(sourceKey), Body: bytes.NewReader(sourceLines(sc))})
	if err != nil {
		return fmt.Errorf("bench: put source: %w", err)
	}
	return nil
}

// echoOutput is the output of each item of sc: {"ok":true}, or
// {"echo":"yyy…"} of OutputBytes bytes when that is more.
func echoOutput(sc Scenario) json.RawMessage {
	output := json.RawMessage(`{"ok":true}`)
	if sc.OutputBytes > len(output) {
		output = json.RawMessage(`{"echo":"` + strings.Repeat("y", sc.OutputBytes-len(`{"echo":""}`)) + `"}`)
	}
	return output
}

// echoPipelines registers EchoPipeline: it answers output, or fails the
// items sc fails (failureOf), a transient failure on the first attempt
// only.
func echoPipelines(sc Scenario, output json.RawMessage) (*pipeline.Registry, error) {
	reg := &pipeline.Registry{}
	err := reg.Register(EchoPipeline, pipeline.Func(func(_ context.Context, req pipeline.Request) (pipeline.Result, error) {
		switch sc.failureOf(req.Key) {
		case "transient":
			if req.Attempt == 1 {
				return pipeline.Result{}, errors.New("bench: transient failure")
			}
		case "permanent":
			return pipeline.Result{}, pipeline.Permanent(errors.New("bench: permanent failure"))
		}
		return pipeline.Result{Output: output}, nil
	}))
	return reg, err
}

// run is one scenario's run in progress: submit, the item function and
// finalize in this process over the scenario's bed, every storage call
// metered, and what the run has measured so far (res).
type run struct {
	sc       Scenario
	res      *Result
	id       string // the batch id
	name     string // the bed's
	queueURL string
	meter    *meter.Meter
	store    *dynamo.Store
	poller   *sqs.Client // the event source's receives and deletes, metered
	trig     *trigger
	sub      *submit.Submitter
	worker   *worker.Worker
	fin      *finalize.Finalizer

	// dry counts the receives in a row that returned nothing; idle those
	// after finalize was triggered.
	dry, idle int
	// unitBatches counts the message batches that held item or pack
	// messages, chunkSum the fan-out chunks those messages came from.
	unitBatches, chunkSum int
}

// newRun builds the engines over b with the functions' settings, their
// AWS clients on one metered config.
func newRun(cfg aws.Config, b *bed, sc Scenario, res *Result) (*run, error) {
	m := meter.New(cfg)
	metered := cfg.Copy()
	metered.Logger = logging.Nop{} // the emulator's ranged GETs make the SDK warn about checksums
	m.Attach(&metered)
	logs := &logCounter{}
	metered.APIOptions = append(metered.APIOptions, attemptErrors(logs))
	store := dynamo.New(dynamodb.NewFromConfig(metered), b.name)
	store.RowTTL = config.DefaultRetention + ledger.TTLGrace // as the functions set it (shared/function)
	blobs := blob.New(function.NewS3(metered), b.name)
	items := queue.New(sqs.NewFromConfig(metered), b.queueURL)
	// The functions' own logger and metric lines (internal/handler,
	// internal/metric) at the stack's default level, counted: what
	// CloudWatch Logs ingests (Result.LogBytes).
	res.logs = logs
	log := handler.NewLogger(logs, "info")
	metrics := &metric.Emitter{Stack: "bench", W: logs}
	output := echoOutput(sc)
	res.OutputBytes = len(output)
	reg, err := echoPipelines(sc, output)
	if err != nil {
		return nil, err
	}
	trig := &trigger{}
	r := &run{sc: sc, res: res, id: batchID(b.name), name: b.name, queueURL: b.queueURL,
		meter: m, store: store, poller: sqs.NewFromConfig(metered), trig: trig}
	r.sub = &submit.Submitter{Store: store, Blobs: blobs, Queue: items, Trigger: trig, Clock: ledger.SystemClock{}, Log: log,
		Pipelines: []string{EchoPipeline}, MaxAttempts: config.DefaultMaxAttempts, MaxReceiveCount: config.DefaultMaxReceiveCount,
		TempDir: os.TempDir(), Retention: config.DefaultRetention, Sources: source.SourcePolicy{Bucket: b.name}, ChunkItems: ChunkItems,
		// As the stack's: a batch in one chunk of at most 100 messages
		// gets its item messages from submit (the bench's batches of
		// 2,000 items are 10 chunks: not one of them).
		FanOutHere: submit.DefaultFanOutHere, Metrics: metrics}
	if sc.ChunkItems > 0 {
		r.sub.ChunkItems = sc.ChunkItems
	}
	// A transient failure's retry comes back after a second (the
	// shortest visibility change), not after the default backoff.
	r.worker = &worker.Worker{Store: store, Blobs: blobs, Queue: items, Trigger: trig, Clock: ledger.SystemClock{}, Log: log, Metrics: metrics.Buffered(), // as the item function's
		Pipelines: reg, Lease: config.DefaultLease, Retry: &api.RetryPolicy{IntervalSeconds: 1, BackoffRate: 1, MaxDelaySeconds: 1}}
	r.fin = &finalize.Finalizer{Store: store, Blobs: blobs, Clock: ledger.SystemClock{}, Log: log, Retention: config.DefaultRetention, Metrics: metrics,
		Events: event.New(eventbridge.NewFromConfig(metered), "", b.name)}
	return r, nil
}

// charge adds an invocation's GB-seconds: the wall time since start × the
// function's memory of mb MB.
func (r *run) charge(start time.Time, mb int) {
	r.res.LambdaGBSeconds += time.Since(start).Seconds() * float64(mb) / 1024
}

// submit zeroes the meter and submits the batch, as one API request and
// one invocation of submit.
func (r *run) submit(ctx context.Context) error {
	var threshold api.Threshold
	if r.sc.ThresholdPercent > 0 {
		threshold.FailurePercent = &r.sc.ThresholdPercent
	}
	r.meter.Reset()
	start := time.Now()
	if _, err := r.sub.Submit(ctx, api.SubmitRequest{BatchID: r.id, Pipeline: EchoPipeline, KeyField: "id",
		Source: api.SourceSpec{Object: "s3://" + r.name + "/" + sourceKey}, ItemsPerMessage: r.sc.ItemsPerMessage,
		MaxConcurrency: r.sc.MaxConcurrency, Threshold: threshold}); err != nil {
		return fmt.Errorf("bench: submit: %w", err)
	}
	r.charge(start, SubmitMemoryMB)
	r.res.LambdaRequests++
	r.res.APIRequests++
	return nil
}

// drain plays the queue's event source until finalize was triggered and a
// receive after that came back empty: up to 10 messages a receive, each
// batch handed to the item function.
func (r *run) drain(ctx context.Context) error {
	for r.trig.n.Load() == 0 || r.idle == 0 {
		out, err := r.poller.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &r.queueURL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount}})
		if err != nil {
			return fmt.Errorf("bench: receive: %w", err)
		}
		if len(out.Messages) == 0 {
			err = r.empty(ctx)
		} else {
			err = r.handle(ctx, out.Messages)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// empty counts a receive that returned nothing. Before finalize was
// triggered, every tenth in a row finalizes as the scheduled tick would
// (tick).
func (r *run) empty(ctx context.Context) error {
	r.res.EmptyReceives++
	if r.dry++; r.trig.n.Load() > 0 {
		r.idle++
		return nil
	}
	if r.dry%10 != 0 {
		return nil
	}
	return r.tick(ctx)
}

// tick finalizes the run as the scheduled tick would: when the counters
// say it is done, or once the queue stayed empty for 120 receives (of a
// second each: twice the visibility timeout), so that a counter write
// lost to a fault does not hold the run. Messages put back with a delay
// after the emulator was unavailable come back within minutes (the
// worker's UnavailableDelay), hidden ones after the visibility timeout;
// a run still not finished after 300 empty receives is an error.
func (r *run) tick(ctx context.Context) error {
	p, err := r.store.Progress(ctx, r.id, 1, ledger.CounterShards(0))
	if err != nil || p.Done < int64(r.sc.Items) && r.dry < 120 {
		return nil
	}
	_, err = r.fin.Finalize(ctx, r.id, 1)
	switch {
	case err == nil:
		r.trig.n.Add(1)
	case !errors.Is(err, api.ErrNotFinished) || r.dry > 300:
		return fmt.Errorf("bench: the queue stayed empty before the run finished: %w", err)
	}
	return nil
}

// handle is one invocation of the item function on a message batch, then
// the event source's deletion of the messages that did not fail.
func (r *run) handle(ctx context.Context, msgs []sqstypes.Message) error {
	r.dry = 0
	ds := r.deliveries(msgs)
	r.res.logs.mark()
	start := time.Now()
	failed := r.worker.Handle(ctx, ds)
	r.charge(start, ItemMemoryMB)
	r.res.LambdaRequests++
	r.res.MessageBatches++
	if len(failed) > 0 && r.sc.TransientPercent == 0 {
		// The log lines say why.
		fmt.Fprintf(os.Stderr, "bench: log lines and failed AWS tries since the invocation before the one whose deliveries %v failed (%d messages, %.1f s):\n%s",
			failed, len(msgs), time.Since(start).Seconds(), r.res.logs.since())
		return fmt.Errorf("bench: %d deliveries failed in a run without transient failures", len(failed))
	}
	return r.deleteHandled(ctx, msgs, failed)
}

// deliveries are the worker's deliveries of msgs. It counts the
// redeliveries among them and, for a batch with item or pack messages,
// the fan-out chunks they came from.
func (r *run) deliveries(msgs []sqstypes.Message) []worker.Delivery {
	ds := make([]worker.Delivery, 0, len(msgs))
	chunks := map[int64]bool{}
	for _, msg := range msgs {
		var head struct {
			Kind  string `json:"kind"`
			First int64  `json:"chunk_first"`
		}
		if json.Unmarshal([]byte(aws.ToString(msg.Body)), &head) == nil && head.Kind != string(ledger.KindFanout) {
			chunks[head.First] = true
		}
		n, _ := strconv.Atoi(msg.Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)])
		if n > 1 {
			r.res.Redeliveries++
		}
		ds = append(ds, worker.Delivery{MessageID: aws.ToString(msg.MessageId), Body: []byte(aws.ToString(msg.Body)),
			ReceiptHandle: aws.ToString(msg.ReceiptHandle), ReceiveCount: max(n, 1)})
	}
	if len(chunks) > 0 {
		r.unitBatches++
		r.chunkSum += len(chunks)
	}
	return ds
}

// deleteHandled deletes the messages of msgs not in failed with one call,
// as the event source does (ReportBatchItemFailures); a failed one comes
// back after its visibility timeout, which the worker set.
func (r *run) deleteHandled(ctx context.Context, msgs []sqstypes.Message, failed []string) error {
	skip := map[string]bool{}
	for _, id := range failed {
		skip[id] = true
	}
	del := &sqs.DeleteMessageBatchInput{QueueUrl: &r.queueURL}
	for i, msg := range msgs {
		if !skip[aws.ToString(msg.MessageId)] {
			del.Entries = append(del.Entries, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: msg.ReceiptHandle})
		}
	}
	if len(del.Entries) == 0 {
		return nil
	}
	if _, err := r.poller.DeleteMessageBatch(ctx, del); err != nil {
		return fmt.Errorf("bench: delete: %w", err)
	}
	return nil
}

// finish finalizes the run (each trigger counted as one invocation of
// finalize), checks its census and takes the meter's figures.
func (r *run) finish(ctx context.Context) error {
	r.res.LambdaRequests += float64(r.trig.n.Load()) // each trigger is one Invoke of finalize
	start := time.Now()
	fr, err := r.fin.Finalize(ctx, r.id, 1)
	if err != nil {
		return fmt.Errorf("bench: finalize: %w", err)
	}
	r.charge(start, FinalizeMemoryMB)
	r.res.Census = fr.Report.Census
	if r.unitBatches > 0 {
		r.res.ChunksPerMessageBatch = float64(r.chunkSum) / float64(r.unitBatches)
	}
	if err := r.sc.checkCensus(fr.Report.Census); err != nil {
		return err
	}
	r.res.Usage = r.meter.Usage()
	r.res.LogBytes, r.res.LogEvents = r.res.logs.totals()
	r.res.Usage.SQSRequests -= float64(r.res.EmptyReceives)
	r.res.Reported = r.store.Capacity()
	r.res.ReportUsage = fr.Report.Usage
	return nil
}

// checkCensus checks a run's census: the items sc fails permanently
// failed, every other one succeeded. A run with a threshold (it may stop
// early) is not checked.
func (sc Scenario) checkCensus(c api.Census) error {
	if sc.ThresholdPercent != 0 {
		return nil
	}
	var permanent int64
	for i := range sc.Items {
		if sc.failureOf(api.PositionalKey(int64(i))) == "permanent" {
			permanent++
		}
	}
	if c.Succeeded != int64(sc.Items)-permanent || c.Failed != permanent {
		return fmt.Errorf("bench: census %+v, want %d succeeded and %d failed", c, int64(sc.Items)-permanent, permanent)
	}
	return nil
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
