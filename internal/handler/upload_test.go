package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkrun/bulkrun/shared/source"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bulkrun/bulkrun/integration/testbed/eventschema"
	"github.com/bulkrun/bulkrun/integration/testbed/memstore"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/submit"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// object is what the fake bucket holds under one key.
type object struct {
	body     []byte
	etag     string
	encoding string
	meta     map[string]string
}

// bucket is an in-memory ledger.Blobs and Header for the upload paths:
// sources are read from objects, reports are written to written.
type bucket struct {
	ledger.Blobs // nil: methods the upload paths do not use panic
	name         string
	objects      map[string]object
	written      map[string][]byte
	headErr      error // returned by HeadMatch when set
	putErr       error // returned by Put when set
	createErr    error // returned by Create when set
}

func (b *bucket) Bucket() string { return b.name }

func (b *bucket) HeadMatch(_ context.Context, bkt, key, etag string) (source.ObjectInfo, map[string]string, error) {
	if b.headErr != nil {
		return source.ObjectInfo{}, nil, b.headErr
	}
	o, ok := b.objects[key]
	if !ok {
		return source.ObjectInfo{}, nil, api.ErrNotFound
	}
	if etag != "" && etag != o.etag {
		return source.ObjectInfo{}, nil, api.ErrConflict
	}
	return source.ObjectInfo{Bucket: bkt, Key: key, Size: int64(len(o.body)), ETag: `"` + o.etag + `"`, ContentEncoding: o.encoding}, o.meta, nil
}

func (b *bucket) OpenMatch(_ context.Context, _, key, etag string) (io.ReadCloser, error) {
	o, ok := b.objects[key]
	if !ok {
		return nil, api.ErrNotFound
	}
	if etag != "" && strings.Trim(etag, `"`) != o.etag {
		return nil, api.ErrConflict
	}
	return io.NopCloser(bytes.NewReader(o.body)), nil
}

func (b *bucket) Create(context.Context, string, string) (ledger.BlobWriter, error) {
	if b.createErr != nil {
		return nil, b.createErr
	}
	return discard{}, nil
}

// discard is a manifest write that keeps nothing.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) Close() error                { return nil }
func (discard) Abort() error                { return nil }

func (b *bucket) Put(_ context.Context, key, _ string, body []byte) error {
	if b.putErr != nil {
		return b.putErr
	}
	b.written[key] = body
	return nil
}

func (b *bucket) Get(_ context.Context, key string) ([]byte, error) {
	if v, ok := b.written[key]; ok {
		return v, nil
	}
	return nil, api.ErrNotFound
}

func (b *bucket) Delete(_ context.Context, key string) error { delete(b.written, key); return nil }

// bus records the Batch Refused events put, and the Batch State Change
// events apart.
type bus struct {
	events  []putEvent
	changes []api.StateChangeEvent
}

type putEvent struct {
	detailType string
	detail     Refusal
}

func (e *bus) Put(_ context.Context, detailType string, detail any) error {
	if detailType == api.DetailStateChange {
		e.changes = append(e.changes, detail.(api.StateChangeEvent))
		return nil
	}
	e.events = append(e.events, putEvent{detailType, detail.(Refusal)})
	return nil
}

func newSubmit(b *bucket, e *bus, logs *bytes.Buffer) *Submit {
	log := slog.New(slog.NewJSONHandler(logs, nil))
	return &Submit{
		Submitter:       &submit.Submitter{Store: memstore.NewStore(), Blobs: b, Log: log, Clock: ledger.SystemClock{}, Pipelines: []string{"webhook"}},
		Heads:           b,
		Blobs:           b,
		Events:          e,
		DefaultPipeline: "webhook",
		Log:             log,
	}
}

// s3Record builds one record as S3 sends it: the key URL-encoded the way
// S3 encodes it (form encoding, '+' for a space), the ETag unquoted.
func s3Record(eventName, bucketName, key string, size int64, etag string) events.S3EventRecord {
	return events.S3EventRecord{EventVersion: "2.1", EventSource: "aws:s3", AWSRegion: "us-east-1", EventName: eventName,
		S3: events.S3Entity{SchemaVersion: "1.0", Bucket: events.S3Bucket{Name: bucketName, Arn: "arn:aws:s3:::" + bucketName},
			Object: events.S3Object{Key: strings.ReplaceAll(url.QueryEscape(key), "%2F", "/"), Size: size, ETag: etag}}}
}

// S3 uploads, every upload leaves a durable trace: each object under
// incoming/ either starts a batch or leaves an error report (naming the
// decoded key) and a Batch Refused event; folder placeholders, the stack's
// own writes and other events are ignored with a log line saying why.
func TestUploadsLeaveATrace(t *testing.T) {
	good := []byte("{\"id\":\"a\"}\n")
	hook := map[string]string{"pipeline-options": `{"url":"http://127.0.0.1:9/x"}`}
	tests := []struct {
		name    string
		record  events.S3EventRecord
		objects map[string]object
		headErr error
		putErr  error
		// want: the report's key ("" = none), what its message says, the
		// line it names, whether it is retrying, whether Uploads returns an
		// error (Lambda retries), and the log line of an ignored record.
		report, says string
		line         int64
		retrying     bool
		wantErr      bool
		ignored      string
		// corrects: the upload corrects a batch; a refused one leaves no
		// batch row of its own.
		corrects bool
	}{
		{name: "unknown format, key with spaces",
			record:  s3Record("ObjectCreated:Put", "bkt", "incoming/my orders.txt", 11, "e1"),
			objects: map[string]object{"incoming/my orders.txt": {body: good, etag: "e1", meta: hook}},
			report:  "incoming-errors/my orders.txt.error.json", says: "cannot tell the format of \"incoming/my orders.txt\""},
		{name: "deleted before it was read",
			record: s3Record("ObjectCreated:CompleteMultipartUpload", "bkt", "incoming/Q3 reporté+v2.csv", 11, "e1"),
			report: "incoming-errors/Q3 reporté+v2.csv.error.json", says: "s3://bkt/incoming/Q3 reporté+v2.csv was deleted before it was read"},
		{name: "replaced before it was read",
			record:  s3Record("ObjectCreated:Put", "bkt", "incoming/orders.jsonl", 11, "e1"),
			objects: map[string]object{"incoming/orders.jsonl": {body: good, etag: "e2", meta: hook}},
			report:  "incoming-errors/orders.jsonl.error.json", says: "was replaced before it was read (its ETag is no longer e1)"},
		{name: "bad line in an upper-case name",
			record:  s3Record("ObjectCreated:Put", "bkt", "incoming/orders.JSONL", 20, "e1"),
			objects: map[string]object{"incoming/orders.JSONL": {body: []byte("{\"id\":\"a\"}\n{oops\n"), etag: "e1", meta: map[string]string{"key-field": "id", "pipeline-options": hook["pipeline-options"]}}},
			report:  "incoming-errors/orders.JSONL.error.json", says: "line 2", line: 2},
		{name: "a truncated gzip stream says gzip",
			record:  s3Record("ObjectCreated:Put", "bkt", "incoming/orders.ndjson.gz", 11, "e1"),
			objects: map[string]object{"incoming/orders.ndjson.gz": {body: []byte{0x1f, 0x8b, 8, 0, 0, 0}, etag: "e1", encoding: "gzip", meta: hook}},
			report:  "incoming-errors/orders.ndjson.gz.error.json", says: "gzip"},
		{name: "another Content-Encoding is refused",
			record:  s3Record("ObjectCreated:Put", "bkt", "incoming/orders.csv", 11, "e1"),
			objects: map[string]object{"incoming/orders.csv": {body: good, etag: "e1", encoding: "br", meta: hook}},
			report:  "incoming-errors/orders.csv.error.json", says: "\"br\""},
		{name: "a misspelt option is refused, naming it",
			record:  s3Record("ObjectCreated:Put", "bkt", "incoming/orders.jsonl", 11, "e1"),
			objects: map[string]object{"incoming/orders.jsonl": {body: good, etag: "e1", meta: map[string]string{"keyfield": "id", "pipeline-options": hook["pipeline-options"]}}},
			report:  "incoming-errors/orders.jsonl.error.json", says: "x-amz-meta-keyfield: not a bulkrun upload option (known: batch-id, pipeline, key-field"},
		{name: "a failed HEAD is retried and recorded as retrying",
			record:  s3Record("ObjectCreated:Put", "bkt", "incoming/orders.csv", 11, "e1"),
			headErr: errors.New("head: 503 SlowDown"),
			report:  "incoming-errors/orders.csv.error.json", says: "503 SlowDown", retrying: true, wantErr: true},
		{name: "a refusal whose report cannot be written is retried",
			record: s3Record("ObjectCreated:Put", "bkt", "incoming/gone.csv", 11, "e1"),
			putErr: errors.New("put: 500"), wantErr: true, says: "deleted before it was read"},
		{name: "corrections for a batch that does not exist are refused, naming it",
			record:  s3Record("ObjectCreated:Put", "bkt", "incoming/fixed.jsonl", 11, "e1"),
			objects: map[string]object{"incoming/fixed.jsonl": {body: good, etag: "e1", meta: map[string]string{"corrects": "nightly-7", "key-field": "id"}}},
			report:  "incoming-errors/fixed.jsonl.error.json", says: "x-amz-meta-corrects: no batch nightly-7 to correct", corrects: true},
		{name: "corrections carry no submit option",
			record:  s3Record("ObjectCreated:Put", "bkt", "incoming/fixed.jsonl", 11, "e1"),
			objects: map[string]object{"incoming/fixed.jsonl": {body: good, etag: "e1", meta: map[string]string{"corrects": "nightly-7", "pipeline": "webhook"}}},
			report:  "incoming-errors/fixed.jsonl.error.json", says: "x-amz-meta-pipeline: a correction (x-amz-meta-corrects) runs with the settings of the batch it corrects", corrects: true},
		{name: "folder placeholder", record: s3Record("ObjectCreated:Put", "bkt", "incoming/2026/", 0, "d41d8cd98f00b204e9800998ecf8427e"),
			ignored: "object ignored: a folder placeholder"},
		{name: "the stack's own write", record: s3Record("ObjectCreated:Put", "bkt", "incoming-errors/x.csv.error.json", 200, "e1"),
			ignored: "object ignored: the stack's own write"},
		{name: "a batch's object", record: s3Record("ObjectCreated:CompleteMultipartUpload", "bkt", "batches/b1/manifests/m.jsonl", 200, "e1"),
			ignored: "object ignored: the stack's own write"},
		{name: "outside incoming/", record: s3Record("ObjectCreated:Put", "bkt", "elsewhere/a.csv", 20, "e1"),
			ignored: "object ignored: not under incoming/"},
		{name: "removal", record: s3Record("ObjectRemoved:Delete", "bkt", "incoming/a.csv", 0, ""),
			ignored: "object ignored: not an object creation"},
	}
	schema, err := eventschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &bucket{name: "bkt", objects: tt.objects, written: map[string][]byte{}, headErr: tt.headErr, putErr: tt.putErr}
			e := &bus{}
			var logs bytes.Buffer
			s := newSubmit(b, e, &logs)
			// Through Handle, as Lambda delivers it: the JSON S3 sends.
			raw, _ := json.Marshal(events.S3Event{Records: []events.S3EventRecord{tt.record}})
			_, err := s.Handle(context.Background(), raw)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Handle: %v, want error %v", err, tt.wantErr)
			}
			if tt.ignored != "" {
				if len(b.written) != 0 || len(e.events) != 0 || !strings.Contains(logs.String(), tt.ignored) {
					t.Fatalf("reports %v, events %v, logs %s: want none and a log line %q", b.written, e.events, logs.String(), tt.ignored)
				}
				return
			}
			key, _ := url.QueryUnescape(tt.record.S3.Object.Key)
			if len(e.events) != 1 || e.events[0].detailType != api.DetailRefused {
				t.Fatalf("events %+v, want one %s", e.events, api.DetailRefused)
			}
			ev := e.events[0].detail
			if ev.Source != SourceUpload || ev.Key != key || ev.Bucket != "bkt" || ev.Retrying != tt.retrying || !strings.Contains(ev.Error.Message, tt.says) || ev.Error.Line != tt.line {
				t.Fatalf("event detail %+v: want key %q, retrying %v, a message saying %q, line %d", ev, key, tt.retrying, tt.says, tt.line)
			}
			// A start refused for good is a state change too; one Lambda
			// retries is not (yet).
			switch {
			case tt.retrying && len(e.changes) != 0:
				t.Fatalf("state changes %+v of a start Lambda retries, want none", e.changes)
			case !tt.retrying && (len(e.changes) != 1 || e.changes[0].Change != api.ChangeRefused || e.changes[0].Status != api.StatusRefused ||
				e.changes[0].Start == nil || e.changes[0].Start.Key != key || e.changes[0].Refusal == nil || e.changes[0].Refusal.Code != ev.Error.Code ||
				e.changes[0].BatchID != ev.BatchID || !strings.HasSuffix(e.changes[0].EventID, ":0:refused:"+strconv.FormatInt(ev.At.UnixMilli(), 10))):
				t.Fatalf("state changes %+v, want one refused naming %q and the refusal %+v", e.changes, key, ev.Error)
			}
			for _, c := range e.changes {
				if err := schema.ValidateValue(c); err != nil {
					t.Fatalf("state change %+v against %s: %v", c, eventschema.SchemaPath, err)
				}
			}
			// A refused upload is a refused batch, listed as any other (its
			// row names the line or field); a start being retried is not.
			got, gerr := s.Submitter.Store.GetBatch(context.Background(), ev.BatchID)
			switch {
			case tt.corrects:
				if ev.BatchID != "nightly-7" || !errors.Is(gerr, api.ErrNotFound) {
					t.Fatalf("a refused correction: event names %q, batch row %+v %v; want the batch it names and no row", ev.BatchID, got, gerr)
				}
			case tt.retrying || tt.putErr != nil:
			case gerr != nil || got.Status != api.StatusRefused || got.Refusal == nil || !strings.Contains(got.Refusal.Message, tt.says) || got.Refusal.Line != tt.line || got.Source == "":
				t.Fatalf("batch %q: %+v %v, want a refused batch row saying %q", ev.BatchID, got, gerr, tt.says)
			}
			if tt.report == "" {
				return
			}
			var rep Refusal
			if err := json.Unmarshal(b.written[tt.report], &rep); err != nil {
				t.Fatalf("report %s: %v (written: %v)", tt.report, err, b.written)
			}
			if rep.Key != key || rep.Report != "s3://bkt/"+tt.report || rep.Error.Message != ev.Error.Message || rep.Retrying != tt.retrying {
				t.Fatalf("report %+v, want the event's detail, naming %q", rep, key)
			}
		})
	}
}

// S3 uploads, identity: the batch id is the name and the manifest digest,
// not the ETag: the same name and items (a multipart re-upload has another
// ETag) are the same batch; other items under the same name another.
func TestUploadBatchIDIsNameAndDigest(t *testing.T) {
	a := api.UploadBatchID("bkt", "incoming/orders.jsonl.gz", "d1")
	tests := []struct {
		name, id string
		same     bool
	}{
		{"same name and digest", api.UploadBatchID("bkt", "incoming/orders.jsonl.gz", "d1"), true},
		{"other digest", api.UploadBatchID("bkt", "incoming/orders.jsonl.gz", "d2"), false},
		{"other name", api.UploadBatchID("bkt", "incoming/orders2.jsonl.gz", "d1"), false},
		{"other bucket", api.UploadBatchID("bkt2", "incoming/orders.jsonl.gz", "d1"), false},
	}
	for _, tt := range tests {
		if (tt.id == a) != tt.same {
			t.Errorf("%s: %s vs %s, want same %v", tt.name, tt.id, a, tt.same)
		}
	}
	if !strings.HasPrefix(a, "orders-") || !api.ValidBatchID(a) || !api.ValidBatchID(api.UploadBatchID("b", "incoming/my orders (1).CSV", "d")) {
		t.Errorf("id %q: want the base name without extensions and a valid batch id", a)
	}
}

// Failed starts leave no trace, schedule ticks: a refused tick is recorded
// (report + Batch Refused event naming the schedule, the tick and the
// reason) and not retried; a failed one is recorded as retrying and
// returned, so that Lambda retries it and then hands it to the failure
// queue.
func TestScheduleTickLeavesATrace(t *testing.T) {
	tick := time.Date(2026, 11, 29, 2, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		request   api.SubmitRequest
		createErr error
		noTime    bool
		report    string
		says      string
		code      string // "" = not checked
		retrying  bool
		wantErr   bool
	}{
		{name: "empty source", request: api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: json.RawMessage(`[]`)}, Options: json.RawMessage(`{"url":"http://x"}`)},
			report: "schedule-errors/nightly/nightly-20261129T020000Z.error.json", says: "no items", code: "empty_source"},
		{name: "refused request", request: api.SubmitRequest{Pipeline: "nope", Source: api.SourceSpec{Items: json.RawMessage(`[1]`)}},
			report: "schedule-errors/nightly/nightly-20261129T020000Z.error.json", says: "not a registered pipeline"},
		{name: "tick without time", noTime: true, request: api.SubmitRequest{Pipeline: "webhook"},
			report: "schedule-errors/nightly/no-tick.error.json", says: "no tick time"},
		{name: "failed submit", request: api.SubmitRequest{Pipeline: "webhook", Source: api.SourceSpec{Items: json.RawMessage(`[1]`)}, Options: json.RawMessage(`{"url":"http://x"}`)},
			createErr: errors.New("s3: 503 SlowDown"), report: "schedule-errors/nightly/nightly-20261129T020000Z.error.json", says: "503 SlowDown", retrying: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &bucket{name: "bkt", written: map[string][]byte{}, createErr: tt.createErr}
			e := &bus{}
			var logs bytes.Buffer
			s := newSubmit(b, e, &logs)
			ev := map[string]any{"bulkrun_schedule": "nightly", "time": tick, "request": tt.request}
			if tt.noTime {
				delete(ev, "time")
			}
			raw, _ := json.Marshal(ev)
			_, err := s.Handle(context.Background(), raw)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Handle: %v, want error %v", err, tt.wantErr)
			}
			if len(e.events) != 1 || e.events[0].detailType != api.DetailRefused {
				t.Fatalf("events %+v, want one %s", e.events, api.DetailRefused)
			}
			d := e.events[0].detail
			if d.Source != SourceSchedule || d.Schedule != "nightly" || d.Retrying != tt.retrying || !strings.Contains(d.Error.Message, tt.says) ||
				tt.code != "" && d.Error.Code != tt.code ||
				!tt.noTime && (d.Tick == nil || !d.Tick.Equal(tick) || d.BatchID != "nightly-20261129T020000Z") {
				t.Fatalf("detail %+v: want schedule nightly, tick %s, retrying %v, saying %q", d, tick, tt.retrying, tt.says)
			}
			var rep Refusal
			if err := json.Unmarshal(b.written[tt.report], &rep); err != nil || rep.Error.Message != d.Error.Message || rep.Report != "s3://bkt/"+tt.report {
				t.Fatalf("report %s: %+v %v (written %v)", tt.report, rep, err, b.written)
			}
		})
	}
}

// A start that succeeds on a retry removes the report its failed attempt
// left; a refusal's report stays.
func TestRetriedStartClearsItsReport(t *testing.T) {
	for _, tt := range []struct {
		name     string
		retrying bool
		etag     string
		gone     bool
	}{
		{"retrying, same object", true, "e1", true},
		{"retrying, another object", true, "e0", false},
		{"refused", false, "e1", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body, _ := json.Marshal(Refusal{Source: SourceUpload, Key: "incoming/a.csv", ETag: tt.etag, Retrying: tt.retrying})
			b := &bucket{name: "bkt", written: map[string][]byte{"incoming-errors/a.csv.error.json": body}}
			s := newSubmit(b, &bus{}, &bytes.Buffer{})
			s.clearRetrying(context.Background(), s.Log, config.UploadErrorKey("incoming/a.csv"), `"e1"`)
			if _, ok := b.written["incoming-errors/a.csv.error.json"]; ok == tt.gone {
				t.Fatalf("report present %v, want gone %v", ok, tt.gone)
			}
		})
	}
}

// TestUploadMetadataNamesAsTheAPISpellsThem guards docs/sources.md "Upload instead":
// "Options come from its metadata (x-amz-meta-pipeline, -key-field, …)":
// an upload whose metadata spells the names as the API's fields do
// (x-amz-meta-key_field, any case) was read as if it had no such option,
// so its items ran under positional keys and without the threshold asked
// for. '_' and '-' name the same option.
func TestUploadMetadataNamesAsTheAPISpellsThem(t *testing.T) {
	tests := []struct {
		name string
		meta map[string]string
	}{
		{"hyphens", map[string]string{"key-field": "order_id", "tolerated-failure-count": "0", "csv-delimiter": ";"}},
		{"underscores", map[string]string{"key_field": "order_id", "tolerated_failure_count": "0", "csv_delimiter": ";"}},
		{"underscores, upper case", map[string]string{"Key_Field": "order_id", "TOLERATED_FAILURE_COUNT": "0", "Csv_Delimiter": ";"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &bucket{name: "src", written: map[string][]byte{}, objects: map[string]object{
				"incoming/orders.csv": {body: []byte("order_id;qty\nA1;2\n"), etag: "e1", meta: tt.meta}}}
			var logs bytes.Buffer
			req, _, err := newSubmit(b, &bus{}, &logs).uploadRequest(context.Background(), "src", "incoming/orders.csv", "e1")
			if err != nil {
				t.Fatal(err)
			}
			if req.KeyField != "order_id" || req.Threshold.FailureCount == nil || *req.Threshold.FailureCount != 0 || req.Source.CSVDelimiter != ";" {
				t.Fatalf("key field %q, failure count %v, delimiter %q: want order_id, 0, ;", req.KeyField, req.Threshold.FailureCount, req.Source.CSVDelimiter)
			}
		})
	}
}

// TestUploadPriority guards x-amz-meta-priority (docs/sources.md,
// "Upload instead"): a whole number is the request's priority, anything
// else an error naming the metadata.
func TestUploadPriority(t *testing.T) {
	for _, tt := range []struct {
		value string
		want  int
		bad   bool
	}{{"3", 3, false}, {"three", 0, true}} {
		b := &bucket{name: "src", written: map[string][]byte{}, objects: map[string]object{
			"incoming/orders.csv": {body: []byte("order_id;qty\nA1;2\n"), etag: "e1", meta: map[string]string{"pipeline": "webhook", "priority": tt.value}}}}
		req, _, err := newSubmit(b, &bus{}, &bytes.Buffer{}).uploadRequest(context.Background(), "src", "incoming/orders.csv", "e1")
		var ie *api.InputError
		switch {
		case tt.bad && (!errors.As(err, &ie) || ie.Field != "x-amz-meta-priority"):
			t.Errorf("priority %q: %v, want an error naming x-amz-meta-priority", tt.value, err)
		case !tt.bad && (err != nil || req.Priority != tt.want):
			t.Errorf("priority %q: %v, priority %d, want %d", tt.value, err, req.Priority, tt.want)
		}
	}
}

// TestUploadSample: x-amz-meta-sample and -auto-approve-usd reach the
// request; a bad value is refused naming its header.
func TestUploadSample(t *testing.T) {
	for _, tt := range []struct {
		meta  map[string]string
		field string
	}{
		{map[string]string{"sample": "200", "auto-approve-usd": "12.5"}, ""},
		{map[string]string{"sample": "many"}, "x-amz-meta-sample"},
		{map[string]string{"sample": "200", "auto-approve-usd": "-1"}, "x-amz-meta-auto-approve-usd"},
	} {
		tt.meta["pipeline"] = "webhook"
		b := &bucket{name: "src", written: map[string][]byte{}, objects: map[string]object{
			"incoming/orders.csv": {body: []byte("order_id;qty\nA1;2\n"), etag: "e1", meta: tt.meta}}}
		req, _, err := newSubmit(b, &bus{}, &bytes.Buffer{}).uploadRequest(context.Background(), "src", "incoming/orders.csv", "e1")
		var ie *api.InputError
		switch {
		case tt.field != "" && (!errors.As(err, &ie) || ie.Field != tt.field):
			t.Errorf("%v: %v, want an error naming %s", tt.meta, err, tt.field)
		case tt.field == "" && (err != nil || req.Sample != 200 || req.AutoApproveUSD == nil || *req.AutoApproveUSD != 12.5):
			t.Errorf("%v: %v, sample %d, auto-approve %v: want 200 and 12.5", tt.meta, err, req.Sample, req.AutoApproveUSD)
		}
	}
}

// TestUploadRefusesUnknownOptions guards docs/sources.md "Upload instead": "a name close to
// an option but not one is refused": an upload whose metadata misspelt an
// option (x-amz-meta-keyfield) ran as if it had none, its items under
// positional keys. A name near an option, or under the bulkrun- prefix, is
// refused naming it; the metadata other upload tools add passes.
func TestUploadRefusesUnknownOptions(t *testing.T) {
	tests := []struct {
		name      string
		meta      map[string]string
		wantField string // "" = accepted
	}{
		{"keyfield without the hyphen", map[string]string{"keyfield": "id"}, "x-amz-meta-keyfield"},
		{"KEY.FIELD in upper case", map[string]string{"KEY.FIELD": "id"}, "x-amz-meta-KEY.FIELD"},
		{"pipeline transposed", map[string]string{"piepline": "webhook"}, "x-amz-meta-piepline"},
		{"max-atempts", map[string]string{"max-atempts": "3"}, "x-amz-meta-max-atempts"},
		{"tolerated failure count with underscores, one letter off", map[string]string{"tolerated_failure_cont": "0"}, "x-amz-meta-tolerated_failure_cont"},
		{"formats", map[string]string{"formats": "csv"}, "x-amz-meta-formats"},
		{"bulkrun- prefix", map[string]string{"bulkrun-priority": "high"}, "x-amz-meta-bulkrun-priority"},
		{"known options, either spelling", map[string]string{"key_field": "id", "Format": "jsonl", "stop-on-threshold": "false"}, ""},
		{"rclone's mtime and md5chksum", map[string]string{"mtime": "1700000000.5", "md5chksum": "1B2M2Y8AsgTpgAmY7PhCfg=="}, ""},
		{"s3cmd's attributes", map[string]string{"s3cmd-attrs": "uid:1000/gname:staff", "owner": "ops"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &bucket{name: "src", written: map[string][]byte{}, objects: map[string]object{
				"incoming/orders.jsonl": {body: []byte("{\"id\":\"a\"}\n"), etag: "e1", meta: tt.meta}}}
			var logs bytes.Buffer
			_, _, err := newSubmit(b, &bus{}, &logs).uploadRequest(context.Background(), "src", "incoming/orders.jsonl", "e1")
			var ie *api.InputError
			switch {
			case tt.wantField == "" && err != nil:
				t.Fatalf("uploadRequest: %v, want accepted", err)
			case tt.wantField != "" && (!errors.As(err, &ie) || ie.Field != tt.wantField || !strings.Contains(ie.Reason, wire.MetaKeyField)):
				t.Fatalf("uploadRequest: %v, want a refusal naming %s and listing the options", err, tt.wantField)
			}
		})
	}
}

// TestUploadErrorReportOfALongKey guards docs/sources.md "Upload instead": "Every object
// under incoming/ either starts a batch or leaves an error report": the
// report of an upload whose key is near S3's 1,024-byte limit was put at
// incoming-errors/{name}.error.json, past the limit, so S3 refused it and
// the start ended on the failure queue without its report. Such a report
// goes to incoming-errors/_long/{sha256 of the key}.error.json and names
// the key; a shorter key keeps its readable report name.
func TestUploadErrorReportOfALongKey(t *testing.T) {
	long := "incoming/" + strings.Repeat("é", 500) + ".csv" // 1,013 bytes: its report key would be 1,031
	for _, key := range []string{long, "incoming/" + strings.Repeat("a", 990) + ".csv"} {
		b := &bucket{name: "bkt", written: map[string][]byte{}}
		var logs bytes.Buffer
		raw, _ := json.Marshal(events.S3Event{Records: []events.S3EventRecord{s3Record("ObjectCreated:Put", "bkt", key, 11, "e1")}})
		if _, err := newSubmit(b, &bus{}, &logs).Handle(context.Background(), raw); err != nil {
			t.Fatalf("Handle: %v", err)
		}
		want := config.UploadErrorKey(key)
		if len(b.written) != 1 || b.written[want] == nil || len(want) > 1024 {
			t.Fatalf("%d-byte key: reports %d, want one at %q (≤ 1,024 bytes)", len(key), len(b.written), want)
		}
		var rep Refusal
		if err := json.Unmarshal(b.written[want], &rep); err != nil || rep.Key != key || rep.Report != "s3://bkt/"+want {
			t.Fatalf("report %+v (%v): want one naming the key and itself", rep, err)
		}
		if short := "incoming-errors/" + strings.TrimPrefix(key, "incoming/") + ".error.json"; len(short) <= 1024 && want != short {
			t.Fatalf("report key %q, want %q", want, short)
		}
	}
}
