package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/agnivade/levenshtein"
	"github.com/aws/aws-lambda-go/events"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// UploadOptions lists the x-amz-meta-<name> options an upload may carry,
// in the order docs/sources.md "Upload instead" documents them.
func UploadOptions() []string {
	return []string{wire.MetaBatchID, wire.MetaPipeline, wire.MetaKeyField, wire.MetaFormat, wire.MetaCSVDelimiter, wire.MetaFailurePercent,
		wire.MetaFailureCount, wire.MetaMaxAttempts, wire.MetaRetry, wire.MetaRate, wire.MetaPriority, wire.MetaStopOnThreshold, wire.MetaBudgetUSD,
		wire.MetaSample, wire.MetaAutoApproveUSD, wire.MetaCeilingSpendUSD, wire.MetaCeilingTokens,
		wire.MetaPipelineOptions, wire.MetaRerun, wire.MetaCorrects}
}

// correctionOptions are the upload options a correction (MetaCorrects)
// reads; the others belong to the batch it corrects.
var correctionOptions = []string{wire.MetaCorrects, wire.MetaKeyField, wire.MetaFormat, wire.MetaCSVDelimiter}

// MetaReservedPrefix marks a metadata name as meant for bulkrun: an upload
// carrying x-amz-meta-bulkrun-<anything> is refused, as no option has that
// prefix yet (it is kept for future options).
const MetaReservedPrefix = "bulkrun-"

// checkUploadOptions refuses, with an *api.InputError naming the metadata
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
			return &api.InputError{Field: "x-amz-meta-" + k,
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
// (config.UploadErrorKey) and a Batch Refused event: an unknown format, a
// malformed line, a bad option, an object deleted or replaced before it was
// read. A folder placeholder (a key ending in "/", size 0), an object
// outside incoming/ (the stack's own writes included) and other event
// types are ignored with a log line saying why.
//
// The batch id is the x-amz-meta-batch-id, or api.UploadBatchID(bucket, key,
// manifest digest): the same name with the same items is the same batch
// however often and however it is uploaded (single or multipart PUT); a
// changed file under the same name is a new batch. The same items for the
// same pipeline and options under another name within the stack's window
// (submit.Submitter.UploadRepeatWindow) start nothing: the upload is
// refused as a repeated upload (code repeated_upload, its report naming
// the batch they started) unless it carries x-amz-meta-rerun: true.
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
			log.InfoContext(ctx, "object ignored: "+why, "event", rec.EventName)
			res.Ignored[key] = why
			continue
		}
		r := Refusal{Source: SourceUpload, Bucket: bucket, Key: key, ETag: etag}
		if err != nil {
			// Not what S3 sends; the raw key is the best name there is.
			err = &api.InputError{Field: "Records.s3.object.key", Reason: fmt.Sprintf("%q is not URL-encoded as S3 encodes keys", key)}
		} else {
			var created, corrects bool
			var req api.SubmitRequest
			req, created, corrects, err = s.upload(ctx, log, bucket, key, etag, UploadSubmitter(rec))
			r.BatchID = req.BatchID
			if err == nil {
				res.Started = append(res.Started, UploadStart{Key: key, BatchID: r.BatchID, Created: created, Corrects: corrects})
				continue
			}
			if !corrects { // a refused correction leaves the batch it names as it was
				r.BatchID = s.recordRefused(ctx, log, req, bucket, key, etag, err)
			}
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

// UploadStart is one upload's batch (Corrects: the upload corrected it;
// Created: it started the correction's run).
type UploadStart struct {
	Key      string `json:"key"`
	BatchID  string `json:"batch_id"`
	Created  bool   `json:"created"`
	Corrects bool   `json:"corrects,omitempty"`
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
// (as far as it was read, its BatchID when known, also on error), whether
// this call created the batch, and whether the upload is a correction
// (x-amz-meta-corrects: req.BatchID is the batch it corrects).
func (s *Submit) upload(ctx context.Context, log *slog.Logger, bucket, key, etag, by string) (api.SubmitRequest, bool, bool, error) {
	req, corr, err := s.uploadRequest(ctx, bucket, key, etag)
	req.SubmittedBy = by
	if corr != nil {
		if err != nil {
			return req, false, true, err
		}
		corr.SubmittedBy = by
		created, err := s.uploadCorrection(ctx, log, key, req.BatchID, *corr)
		return req, created, true, err
	}
	created, err := s.uploadSubmit(ctx, log, bucket, key, &req, err)
	return req, created, false, err
}

// uploadCorrection runs the corrections of an upload carrying
// x-amz-meta-corrects: id (submit.Submitter.Correct) and returns whether
// it started their run (false: the same corrections were given before).
// A batch that is unknown, expired or running is a refusal naming
// x-amz-meta-corrects (a report, no retry): the upload is not read again.
func (s *Submit) uploadCorrection(ctx context.Context, log *slog.Logger, key, id string, req api.CorrectRequest) (bool, error) {
	res, err := s.Submitter.Correct(ctx, id, req)
	field := "x-amz-meta-" + wire.MetaCorrects
	switch {
	case err == nil:
		log.InfoContext(ctx, "upload corrected", "batch_id", id, "revision", res.Revision.N, "created", res.Created, "run", res.Revision.Run, "items", res.Revision.Items)
		s.clearRetrying(ctx, log, config.UploadErrorKey(key), req.Source.ETag)
		return res.Created, nil
	case errors.Is(err, api.ErrNotFound), errors.Is(err, api.ErrExpired):
		return false, &api.InputError{Field: field, Reason: fmt.Sprintf("no batch %s to correct (%v)", id, err)}
	case errors.Is(err, api.ErrConflict):
		return false, &api.InputError{Field: field, Reason: fmt.Sprintf("%v; upload the corrections again once it has finished", err)}
	}
	return false, err
}

// uploadSubmit submits the request of an upload (reqErr: the error of
// reading its options), setting its BatchID when the upload names none,
// and returns whether this call created the batch.
func (s *Submit) uploadSubmit(ctx context.Context, log *slog.Logger, bucket, key string, req *api.SubmitRequest, reqErr error) (bool, error) {
	if reqErr != nil {
		return false, reqErr
	}
	if req.BatchID == "" || s.Submitter.UploadRepeatWindow > 0 {
		digest, err := s.Submitter.Digest(ctx, *req)
		if err != nil {
			return false, err
		}
		if req.BatchID == "" {
			req.BatchID = api.UploadBatchID(bucket, key, digest)
		}
		// The same items for the same pipeline and options under another
		// name within the window are not run again, unless asked.
		content := ledger.UploadContent(digest, req.Pipeline, req.Options)
		if err := s.Submitter.ClaimUpload(ctx, content, req.BatchID, req.Source.Object, req.Rerun); err != nil {
			return false, err
		}
	}
	res, err := s.Submitter.Submit(ctx, *req)
	if err != nil {
		return false, err
	}
	log.InfoContext(ctx, "upload submitted", "batch_id", res.Batch.ID, "created", res.Created, "items", res.Batch.ItemCount)
	if res.Created {
		// An upload has no answer to carry them: its log does.
		named := *req
		named.BatchID = res.Batch.ID
		for _, w := range s.Submitter.Warnings(ctx, named) {
			log.WarnContext(ctx, "upload submitted with a warning", "batch_id", res.Batch.ID, "warning", w)
		}
	}
	s.clearRetrying(ctx, log, config.UploadErrorKey(key), req.Source.ETag)
	req.BatchID = res.Batch.ID
	return res.Created, nil
}

// recordRefused makes an upload refused for its input (api.RefusalOf: a
// malformed line, a duplicate key, a bad option, an empty file) a refused
// batch, which `bulkrun list` and the console show like any other, and
// returns its id: req.BatchID, or, when the file could not be read far
// enough to know its digest, api.UploadBatchID of the object's ETag ("etag:"
// and the ETag in place of the digest), the same for every delivery of
// the same object. An upload whose batch id is another batch's (a
// mismatch, or an id held by a live batch) gets no row; its error report
// says why. A failure to write the row is logged; the error report and
// the event are still written.
func (s *Submit) recordRefused(ctx context.Context, log *slog.Logger, req api.SubmitRequest, bucket, key, etag string, err error) string {
	refusal, ok := api.RefusalOf(err)
	if !ok || errors.Is(err, api.ErrBatchMismatch) || s.Submitter == nil {
		return req.BatchID
	}
	if req.BatchID == "" {
		req.BatchID = api.UploadBatchID(bucket, key, "etag:"+etag)
	}
	if req.Source.Object == "" {
		req.Source = api.SourceSpec{Object: "s3://" + bucket + "/" + key, ETag: etag}
	}
	if _, rerr := s.Submitter.RecordRefused(ctx, req, refusal); rerr != nil && !errors.Is(rerr, api.ErrBatchExists) {
		log.ErrorContext(ctx, "record the refused upload as a refused batch", "batch_id", req.BatchID, "error", rerr.Error())
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

// wholeMeta reads the whole number of the metadata option name into to,
// when the upload has it; an *api.InputError naming it when it is not one.
func wholeMeta(get func(string) string, name string, to *int) error {
	v := get(name)
	if v == "" {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return &api.InputError{Field: "x-amz-meta-" + name, Reason: "not a whole number: " + v}
	}
	*to = n
	return nil
}

// uploadRequest builds the submit request of an upload from its metadata,
// read with If-Match on etag (when given): an object gone or replaced since
// the notification is an *api.InputError naming the key.
func (s *Submit) uploadRequest(ctx context.Context, bucket, key, etag string) (api.SubmitRequest, *api.CorrectRequest, error) {
	uri := "s3://" + bucket + "/" + key
	info, meta, err := s.Heads.HeadMatch(ctx, bucket, key, etag)
	switch {
	case errors.Is(err, api.ErrNotFound):
		return api.SubmitRequest{}, nil, &api.InputError{Field: "source.object", Reason: fmt.Sprintf("%s was deleted before it was read", uri)}
	case errors.Is(err, api.ErrConflict):
		return api.SubmitRequest{}, nil, &api.InputError{Field: "source.object",
			Reason: fmt.Sprintf("%s was replaced before it was read (its ETag is no longer %s); the new object has its own notification", uri, etag)}
	case err != nil:
		return api.SubmitRequest{}, nil, err
	}
	if etag == "" {
		etag = strings.Trim(info.ETag, `"`) // pin what the HEAD saw for every later read
	}
	if err := checkUploadOptions(meta); err != nil {
		return api.SubmitRequest{Source: api.SourceSpec{Object: uri, ETag: etag}}, nil, err
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
	if id := get(wire.MetaCorrects); id != "" {
		return s.correctionRequest(meta, uri, key, etag, id, get)
	}
	req := api.SubmitRequest{
		BatchID:  get(wire.MetaBatchID),
		Pipeline: get(wire.MetaPipeline),
		KeyField: get(wire.MetaKeyField),
		Source:   api.SourceSpec{Object: uri, Format: strings.ToLower(get(wire.MetaFormat)), CSVDelimiter: get(wire.MetaCSVDelimiter), ETag: etag},
	}
	// A gzip object is recognised by its bytes (source.ReadSource), whatever
	// its name or Content-Encoding; another encoding could not be read.
	switch ce := strings.ToLower(strings.TrimSpace(info.ContentEncoding)); ce {
	case "", "identity", "gzip", "x-gzip":
	default:
		return req, nil, &api.InputError{Field: "Content-Encoding", Reason: fmt.Sprintf("%q: an upload is read as is or as gzip", ce)}
	}
	if req.Source.Format == "" && api.FormatOf(key) == "" {
		return req, nil, &api.InputError{Field: "source.object",
			Reason: fmt.Sprintf("cannot tell the format of %q: name it .jsonl, .ndjson, .json or .csv (any case, optionally .gz), or set x-amz-meta-%s", key, wire.MetaFormat)}
	}
	if req.Pipeline == "" {
		req.Pipeline = s.DefaultPipeline
	}
	if v := get(wire.MetaFailurePercent); v != "" {
		p, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return req, nil, &api.InputError{Field: "x-amz-meta-" + wire.MetaFailurePercent, Reason: "not a number: " + v}
		}
		req.Threshold.FailurePercent = &p
	}
	if v := get(wire.MetaFailureCount); v != "" {
		c, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return req, nil, &api.InputError{Field: "x-amz-meta-" + wire.MetaFailureCount, Reason: "not a whole number: " + v}
		}
		req.Threshold.FailureCount = &c
	}
	if err := wholeMeta(get, wire.MetaMaxAttempts, &req.MaxAttempts); err != nil {
		return req, nil, err
	}
	if err := wholeMeta(get, wire.MetaPriority, &req.Priority); err != nil {
		return req, nil, err
	}
	if err := wholeMeta(get, wire.MetaSample, &req.Sample); err != nil {
		return req, nil, err
	}
	if v := get(wire.MetaRetry); v != "" {
		p, err := api.ParseRetryPolicy(v)
		if err != nil {
			var ie *api.InputError
			if errors.As(err, &ie) {
				ie.Field = "x-amz-meta-" + wire.MetaRetry + strings.TrimPrefix(ie.Field, "retry")
			}
			return req, nil, err
		}
		req.Retry = &p
	}
	if v := get(wire.MetaRate); v != "" {
		r, err := api.ParseRate("x-amz-meta-"+wire.MetaRate, v)
		if err != nil {
			return req, nil, err
		}
		req.Rate = &r
	}
	if v := get(wire.MetaStopOnThreshold); v != "" {
		stop, err := strconv.ParseBool(v)
		if err != nil {
			return req, nil, &api.InputError{Field: "x-amz-meta-" + wire.MetaStopOnThreshold, Reason: "want true or false: " + v}
		}
		req.StopOnThreshold = &stop
	}
	for _, m := range []struct {
		meta string
		to   **float64
	}{{wire.MetaBudgetUSD, &req.BudgetUSD}, {wire.MetaAutoApproveUSD, &req.AutoApproveUSD}} {
		if err := usdMeta(get, m.meta, m.to); err != nil {
			return req, nil, err
		}
	}
	for _, m := range []struct {
		meta, field string
		to          func(*api.Ceilings, float64)
	}{
		{wire.MetaCeilingSpendUSD, "spend_usd", func(c *api.Ceilings, v float64) { c.SpendUSD = v }},
		{wire.MetaCeilingTokens, "tokens", func(c *api.Ceilings, v float64) { c.Tokens = v }},
	} {
		v := get(m.meta)
		if v == "" {
			continue
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n <= 0 {
			return req, nil, &api.InputError{Field: "x-amz-meta-" + m.meta, Reason: "want a number > 0: " + v}
		}
		if req.Ceilings == nil {
			req.Ceilings = &api.Ceilings{}
		}
		m.to(req.Ceilings, n)
		if err := req.Ceilings.Check("x-amz-meta-ceiling"); err != nil {
			return req, nil, &api.InputError{Field: "x-amz-meta-" + m.meta, Reason: err.(*api.InputError).Reason}
		}
	}
	if v := get(wire.MetaPipelineOptions); v != "" {
		req.Options = json.RawMessage(v)
	}
	if v := get(wire.MetaRerun); v != "" {
		rerun, err := strconv.ParseBool(v)
		if err != nil {
			return req, nil, &api.InputError{Field: "x-amz-meta-" + wire.MetaRerun, Reason: "want true or false: " + v}
		}
		req.Rerun = rerun
	}
	if req.Pipeline == "" {
		return req, nil, &api.InputError{Field: "x-amz-meta-" + wire.MetaPipeline, Reason: "required (the stack sets no default pipeline)"}
	}
	if err := s.Submitter.Validate(&req); err != nil {
		return req, nil, err
	}
	return req, nil, nil
}

// correctionRequest is the request of an upload carrying
// x-amz-meta-corrects: id (the batch it corrects, as req.BatchID, with
// the corrections), reading only correctionOptions; another option is an
// *api.InputError naming it.
func (s *Submit) correctionRequest(meta map[string]string, uri, key, etag, id string, get func(string) string) (api.SubmitRequest, *api.CorrectRequest, error) {
	req := api.SubmitRequest{BatchID: id, Source: api.SourceSpec{Object: uri, ETag: etag}}
	corr := &api.CorrectRequest{KeyField: get(wire.MetaKeyField),
		Source: api.SourceSpec{Object: uri, Format: strings.ToLower(get(wire.MetaFormat)), CSVDelimiter: get(wire.MetaCSVDelimiter), ETag: etag}}
	if !api.ValidBatchID(id) {
		return req, corr, &api.InputError{Field: "x-amz-meta-" + wire.MetaCorrects, Reason: fmt.Sprintf("%q is not a batch id (1–128 of A-Z a-z 0-9 _ -)", id)}
	}
	names := make([]string, 0, len(meta))
	for k := range meta {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		n := strings.ReplaceAll(strings.ToLower(k), "_", "-")
		if slices.Contains(UploadOptions(), n) && !slices.Contains(correctionOptions, n) {
			return req, corr, &api.InputError{Field: "x-amz-meta-" + n,
				Reason: fmt.Sprintf("a correction (x-amz-meta-%s) runs with the settings of the batch it corrects; it reads only %s", wire.MetaCorrects, strings.Join(correctionOptions[1:], ", "))}
		}
	}
	if corr.Source.Format == "" && api.FormatOf(key) == "" {
		return req, corr, &api.InputError{Field: "source.object",
			Reason: fmt.Sprintf("cannot tell the format of %q: name it .jsonl, .ndjson, .json or .csv (any case, optionally .gz), or set x-amz-meta-%s", key, wire.MetaFormat)}
	}
	return req, corr, nil
}

// usdMeta reads x-amz-meta-<name> as US dollars > 0 (api.CheckBudget)
// into *to; absent leaves it nil. A bad value is an *api.InputError
// naming the header.
func usdMeta(get func(string) string, name string, to **float64) error {
	v := get(name)
	if v == "" {
		return nil
	}
	usd, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return &api.InputError{Field: "x-amz-meta-" + name, Reason: "want a number of US dollars > 0: " + v}
	}
	if err := api.CheckBudget("x-amz-meta-"+name, usd); err != nil {
		return err
	}
	*to = &usd
	return nil
}
