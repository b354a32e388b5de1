package handler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/agnivade/levenshtein"
	"github.com/aws/aws-lambda-go/events"

	"github.com/bulkrun/bulkrun/shared/batch"
	"github.com/bulkrun/bulkrun/shared/config"
)

// Object metadata an upload may carry (x-amz-meta-<name>).
const (
	MetaBatchID         = "batch-id"
	MetaPipeline        = "pipeline"
	MetaKeyField        = "key-field"
	MetaFormat          = "format"
	MetaFailurePercent  = "tolerated-failure-percent"
	MetaFailureCount    = "tolerated-failure-count"
	MetaMaxAttempts     = "max-attempts"
	MetaPipelineOptions = "pipeline-options"
	MetaCSVDelimiter    = "csv-delimiter"     // as csv_delimiter: one character, or comma, semicolon, tab, pipe
	MetaStopOnThreshold = "stop-on-threshold" // "false" runs every item and judges the threshold at the end
)

// UploadOptions lists the x-amz-meta-<name> options an upload may carry,
// in the order docs/sources.md "Upload instead" documents them.
func UploadOptions() []string {
	return []string{MetaBatchID, MetaPipeline, MetaKeyField, MetaFormat, MetaCSVDelimiter, MetaFailurePercent,
		MetaFailureCount, MetaMaxAttempts, MetaStopOnThreshold, MetaPipelineOptions}
}

// MetaReservedPrefix marks a metadata name as meant for bulkrun: an upload
// carrying x-amz-meta-bulkrun-<anything> is refused, as no option has that
// prefix yet (it is kept for future options).
const MetaReservedPrefix = "bulkrun-"

// checkUploadOptions refuses, with an *batch.InputError naming the metadata
// and listing the known options, a name that looks meant for bulkrun but is
// not one of UploadOptions: one carrying MetaReservedPrefix, one equal to an
// option once '-' and '_' are dropped (keyfield), or one within edit
// distance 2 of an option (piepline, max-atempts). Names are compared in
// lower case with '_' read as '-'. Other names pass: tools that upload
// (rclone, s3cmd, the AWS CLI's sync) add metadata of their own, such as
// mtime, md5chksum or s3cmd-attrs.
func checkUploadOptions(meta map[string]string) error {
	names := make([]string, 0, len(meta))
	for k := range meta {
		names = append(names, k)
	}
	slices.Sort(names) // the same upload always names the same culprit
	known := UploadOptions()
	squash := func(s string) string { return strings.NewReplacer("-", "", "_", "").Replace(s) }
	for _, k := range names {
		n := strings.ReplaceAll(strings.ToLower(k), "_", "-")
		if slices.Contains(known, n) {
			continue
		}
		near := strings.HasPrefix(n, MetaReservedPrefix)
		for _, o := range known {
			if near {
				break
			}
			near = squash(n) == squash(o) || levenshtein.ComputeDistance(n, o) <= 2
		}
		if near {
			return &batch.InputError{Field: "x-amz-meta-" + k,
				Reason: fmt.Sprintf("not a bulkrun upload option (known: %s, each as x-amz-meta-<name>)", strings.Join(known, ", "))}
		}
	}
	return nil
}

// Uploads starts a batch per object created under incoming/. S3 delivers
// every notification at least once, with the key URL-encoded ('+' for a
// space); Uploads decodes it and reads exactly the object the record names
// (If-Match on its ETag). Every object under incoming/ either starts a
// batch or leaves an error report in incoming-errors/{name}.error.json
// (UploadErrorKey) and a Batch Refused event: an unknown format, a
// malformed line, a bad option, an object deleted or replaced before it was
// read. A folder placeholder (a key ending in "/", size 0), an object
// outside incoming/ (the stack's own writes included) and other event
// types are ignored with a log line saying why.
//
// The batch id is the x-amz-meta-batch-id, or UploadBatchID(bucket, key,
// manifest digest): the same name with the same items is the same batch
// however often and however it is uploaded (single or multipart PUT); a
// changed file under the same name is a new batch.
//
// A refusal is not retried. Any other failure is recorded as retrying and
// returned, so that Lambda retries the event (twice by default) and then
// puts it on the submit failure queue.
//
// The result lists what became of each record (Lambda discards it for
// asynchronous invocations; a synchronous caller can read it).
func (s *Submit) Uploads(ctx context.Context, ev events.S3Event) (UploadsResult, error) {
	var errs []error
	res := UploadsResult{Started: []UploadStart{}, Refused: []string{}, Ignored: map[string]string{}}
	for _, rec := range ev.Records {
		bucket, size, etag := rec.S3.Bucket.Name, rec.S3.Object.Size, strings.Trim(rec.S3.Object.ETag, `"`)
		key, err := url.QueryUnescape(rec.S3.Object.Key)
		if err != nil {
			key = rec.S3.Object.Key
		}
		log := s.Log.With("bucket", bucket, "object", key)
		if why := ignoreUpload(rec.EventName, key, size); why != "" {
			log.Info("object ignored: "+why, "event", rec.EventName)
			res.Ignored[key] = why
			continue
		}
		r := Refusal{Source: SourceUpload, Bucket: bucket, Key: key, ETag: etag}
		if err != nil {
			// Not what S3 sends; the raw key is the best name there is.
			err = &batch.InputError{Field: "Records.s3.object.key", Reason: fmt.Sprintf("%q is not URL-encoded as S3 encodes keys", key)}
		} else {
			var created bool
			var req batch.SubmitRequest
			req, created, err = s.upload(ctx, log, bucket, key, etag, UploadSubmitter(rec))
			r.BatchID = req.BatchID
			if err == nil {
				res.Started = append(res.Started, UploadStart{Key: key, BatchID: r.BatchID, Created: created})
				continue
			}
			r.BatchID = s.recordRefused(ctx, log, req, bucket, key, etag, err)
		}
		res.Refused = append(res.Refused, key)
		if err := s.refuse(ctx, log, r, err); err != nil {
			errs = append(errs, err)
		}
	}
	return res, errors.Join(errs...)
}

// UploadsResult is what Uploads made of an S3 event: the batches started
// (or found: Created false), the keys refused or failed (each has its
// error report), and the keys ignored with why. Keys are decoded.
type UploadsResult struct {
	Started []UploadStart     `json:"started"`
	Refused []string          `json:"refused"`
	Ignored map[string]string `json:"ignored"`
}

// UploadStart is one upload's batch.
type UploadStart struct {
	Key     string `json:"key"`
	BatchID string `json:"batch_id"`
	Created bool   `json:"created"`
}

// ignoreUpload returns why an S3 event record starts nothing and leaves no
// error report, or "" when it names an upload.
func ignoreUpload(eventName, key string, size int64) string {
	switch {
	case !strings.HasPrefix(eventName, "ObjectCreated"):
		return "not an object creation"
	case strings.HasPrefix(key, config.UploadErrorsPrefix), strings.HasPrefix(key, config.ScheduleErrorsPrefix),
		strings.HasPrefix(key, config.BatchesPrefix), strings.HasPrefix(key, config.UploadsPrefix):
		return "the stack's own write"
	case !strings.HasPrefix(key, config.IncomingPrefix):
		return "not under " + config.IncomingPrefix
	case strings.HasSuffix(key, "/") && size == 0:
		return "a folder placeholder (key ending in /, size 0)"
	}
	return ""
}

// upload starts the batch of one uploaded object and returns its request
// (as far as it was read, its BatchID when known, also on error) and
// whether this call created the batch.
func (s *Submit) upload(ctx context.Context, log *slog.Logger, bucket, key, etag, by string) (batch.SubmitRequest, bool, error) {
	req, err := s.uploadRequest(ctx, bucket, key, etag)
	req.SubmittedBy = by
	if err != nil {
		return req, false, err
	}
	if req.BatchID == "" {
		digest, err := s.Submitter.Digest(ctx, req)
		if err != nil {
			return req, false, err
		}
		req.BatchID = UploadBatchID(bucket, key, digest)
	}
	res, err := s.Submitter.Submit(ctx, req)
	if err != nil {
		return req, false, err
	}
	log.Info("upload submitted", "batch_id", res.Batch.ID, "created", res.Created, "items", res.Batch.ItemCount)
	s.clearRetrying(ctx, log, UploadErrorKey(key), req.Source.ETag)
	req.BatchID = res.Batch.ID
	return req, res.Created, nil
}

// recordRefused makes an upload refused for its input (batch.RefusalOf: a
// malformed line, a duplicate key, a bad option, an empty file) a refused
// batch, which `bulkrun list` and the console show like any other, and
// returns its id: req.BatchID, or, when the file could not be read far
// enough to know its digest, UploadBatchID of the object's ETag ("etag:"
// and the ETag in place of the digest), the same for every delivery of
// the same object. An upload whose batch id is another batch's (a
// mismatch, or an id held by a live batch) gets no row; its error report
// says why. A failure to write the row is logged; the error report and
// the event are still written.
func (s *Submit) recordRefused(ctx context.Context, log *slog.Logger, req batch.SubmitRequest, bucket, key, etag string, err error) string {
	refusal, ok := batch.RefusalOf(err)
	if !ok || errors.Is(err, batch.ErrBatchMismatch) || s.Submitter == nil {
		return req.BatchID
	}
	if req.BatchID == "" {
		req.BatchID = UploadBatchID(bucket, key, "etag:"+etag)
	}
	if req.Source.Object == "" {
		req.Source = batch.SourceSpec{Object: "s3://" + bucket + "/" + key, ETag: etag}
	}
	if _, rerr := s.Submitter.RecordRefused(ctx, req, refusal); rerr != nil && !errors.Is(rerr, batch.ErrBatchExists) {
		log.Error("record the refused upload as a refused batch", "batch_id", req.BatchID, "error", rerr.Error())
	}
	return req.BatchID
}

// UploadSubmitter is the submitted_by of an upload's batch:
// "s3-upload:" and the uploader's principal id from the S3 event's
// userIdentity.principalId (e.g. "s3-upload:AWS:AIDAEXAMPLE"; "s3-upload"
// when the event carries none). S3 event message structure:
// https://docs.aws.amazon.com/AmazonS3/latest/userguide/notification-content-structure.html
func UploadSubmitter(rec events.S3EventRecord) string {
	if p := rec.PrincipalID.PrincipalID; p != "" {
		return "s3-upload:" + p
	}
	return "s3-upload"
}

var unsafeID = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// UploadBatchID derives a batch id from an upload: the file's base name
// (without its format and .gz extensions, characters outside
// [A-Za-z0-9_-] replaced by '-', at most 80 bytes), '-', and 16 hex digits
// of SHA-256("{bucket}/{key}#{digest}"), digest being the manifest digest
// (batch.Submitter.Digest). The same name with the same items gives the
// same id whatever the object's ETag.
func UploadBatchID(bucket, key, digest string) string {
	base := path.Base(key)
	if strings.EqualFold(path.Ext(base), ".gz") {
		base = strings.TrimSuffix(base, path.Ext(base))
	}
	base = strings.TrimSuffix(base, path.Ext(base))
	base = strings.Trim(unsafeID.ReplaceAllString(base, "-"), "-")
	if len(base) > 80 {
		base = base[:80]
	}
	if base == "" {
		base = "upload"
	}
	sum := sha256.Sum256([]byte(bucket + "/" + key + "#" + digest))
	return base + "-" + hex.EncodeToString(sum[:8])
}

// uploadRequest builds the submit request of an upload from its metadata,
// read with If-Match on etag (when given): an object gone or replaced since
// the notification is an *batch.InputError naming the key.
func (s *Submit) uploadRequest(ctx context.Context, bucket, key, etag string) (batch.SubmitRequest, error) {
	uri := "s3://" + bucket + "/" + key
	info, meta, err := s.Heads.HeadMatch(ctx, bucket, key, etag)
	switch {
	case errors.Is(err, batch.ErrNotFound):
		return batch.SubmitRequest{}, &batch.InputError{Field: "source.object", Reason: fmt.Sprintf("%s was deleted before it was read", uri)}
	case errors.Is(err, batch.ErrConflict):
		return batch.SubmitRequest{}, &batch.InputError{Field: "source.object",
			Reason: fmt.Sprintf("%s was replaced before it was read (its ETag is no longer %s); the new object has its own notification", uri, etag)}
	case err != nil:
		return batch.SubmitRequest{}, err
	}
	if etag == "" {
		etag = strings.Trim(info.ETag, `"`) // pin what the HEAD saw for every later read
	}
	if err := checkUploadOptions(meta); err != nil {
		return batch.SubmitRequest{Source: batch.SourceSpec{Object: uri, ETag: etag}}, err
	}
	// A name is matched in any case and with '_' for '-' (x-amz-meta-key_field,
	// spelled as the API's key_field, is x-amz-meta-key-field).
	get := func(name string) string {
		for k, v := range meta {
			if strings.EqualFold(strings.ReplaceAll(k, "_", "-"), name) {
				return v
			}
		}
		return ""
	}
	req := batch.SubmitRequest{
		BatchID:  get(MetaBatchID),
		Pipeline: get(MetaPipeline),
		KeyField: get(MetaKeyField),
		Source:   batch.SourceSpec{Object: uri, Format: strings.ToLower(get(MetaFormat)), CSVDelimiter: get(MetaCSVDelimiter), ETag: etag},
	}
	// A gzip object is recognised by its bytes (batch.ReadSource), whatever
	// its name or Content-Encoding; another encoding could not be read.
	switch ce := strings.ToLower(strings.TrimSpace(info.ContentEncoding)); ce {
	case "", "identity", "gzip", "x-gzip":
	default:
		return req, &batch.InputError{Field: "Content-Encoding", Reason: fmt.Sprintf("%q: an upload is read as is or as gzip", ce)}
	}
	if req.Source.Format == "" && batch.FormatOf(key) == "" {
		return req, &batch.InputError{Field: "source.object",
			Reason: fmt.Sprintf("cannot tell the format of %q: name it .jsonl, .ndjson, .json or .csv (any case, optionally .gz), or set x-amz-meta-%s", key, MetaFormat)}
	}
	if req.Pipeline == "" {
		req.Pipeline = s.DefaultPipeline
	}
	if v := get(MetaFailurePercent); v != "" {
		p, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return req, &batch.InputError{Field: "x-amz-meta-" + MetaFailurePercent, Reason: "not a number: " + v}
		}
		req.Threshold.FailurePercent = &p
	}
	if v := get(MetaFailureCount); v != "" {
		c, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return req, &batch.InputError{Field: "x-amz-meta-" + MetaFailureCount, Reason: "not a whole number: " + v}
		}
		req.Threshold.FailureCount = &c
	}
	if v := get(MetaMaxAttempts); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return req, &batch.InputError{Field: "x-amz-meta-" + MetaMaxAttempts, Reason: "not a whole number: " + v}
		}
		req.MaxAttempts = n
	}
	if v := get(MetaStopOnThreshold); v != "" {
		stop, err := strconv.ParseBool(v)
		if err != nil {
			return req, &batch.InputError{Field: "x-amz-meta-" + MetaStopOnThreshold, Reason: "want true or false: " + v}
		}
		req.StopOnThreshold = &stop
	}
	if v := get(MetaPipelineOptions); v != "" {
		req.Options = json.RawMessage(v)
	}
	if req.Pipeline == "" {
		return req, &batch.InputError{Field: "x-amz-meta-" + MetaPipeline, Reason: "required (the stack sets no default pipeline)"}
	}
	if err := s.Submitter.Validate(&req); err != nil {
		return req, err
	}
	return req, nil
}
