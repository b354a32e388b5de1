package cli

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/spf13/cobra"

	"github.com/bulkrun/bulkrun/cmd/bulkrun/cli/describe"
	"github.com/bulkrun/bulkrun/internal/blob"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/source"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// UploadWait is how long `bulkrun upload` waits for the upload's batch to
// appear (the S3 notification, then submit reading the file).
const UploadWait = 2 * time.Minute

// UploadKey is the key a file is uploaded under: incoming/ and name (a
// name without incoming/ gets it; "" is the file's base name).
func UploadKey(file, name string) string {
	if name == "" {
		name = filepath.Base(file)
	}
	name = strings.TrimPrefix(path.Clean("/"+filepath.ToSlash(name)), "/")
	if strings.HasPrefix(name, config.IncomingPrefix) {
		return name
	}
	return config.IncomingPrefix + name
}

// uploadOptions are the flags of `bulkrun upload`.
type uploadOptions struct {
	name, pipeline, keyField, format, delim, options, id string
	corrects                                             string
	percent, budget                                      float64
	ceilingSpend, ceilingTokens                          float64
	count                                                int64
	maxAttempts, priority, sample                        int
	autoApprove                                          float64
	retry                                                string
	rate                                                 string
	stop, rerun, watch                                   bool
}

// metadata is the object metadata (x-amz-meta-<name>, wire.Meta*) that
// asks submit for what the flags say; only the flags given are set.
func (o uploadOptions) metadata(changed func(string) bool) (map[string]string, error) {
	m := map[string]string{wire.MetaPipeline: o.pipeline}
	set := func(flag, name, value string) {
		if changed(flag) && value != "" {
			m[name] = value
		}
	}
	if o.corrects != "" {
		// A correction runs with its batch's settings: it reads only the
		// key field, format and delimiter of the corrections.
		for _, flag := range []string{"pipeline", "options", "id", "tolerated-failure-percent", "tolerated-failure-count", "max-attempts", "retry", "rate", "priority", "sample", "auto-approve-usd", "stop-on-threshold", "budget", "ceiling-spend-usd", "ceiling-tokens", "rerun"} {
			if changed(flag) {
				return nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--%s: corrections (--corrects) run with the settings of the batch they correct", flag)}
			}
		}
		m = map[string]string{wire.MetaCorrects: o.corrects}
		set("key-field", wire.MetaKeyField, o.keyField)
		set("format", wire.MetaFormat, o.format)
		set("csv-delimiter", wire.MetaCSVDelimiter, o.delim)
		return m, nil
	}
	if o.pipeline == "" {
		return nil, &ExitError{Code: ExitUsage, Err: errors.New("--pipeline is required (or --corrects ID for corrections)")}
	}
	set("key-field", wire.MetaKeyField, o.keyField)
	set("format", wire.MetaFormat, o.format)
	set("csv-delimiter", wire.MetaCSVDelimiter, o.delim)
	set("id", wire.MetaBatchID, o.id)
	set("tolerated-failure-percent", wire.MetaFailurePercent, strconv.FormatFloat(o.percent, 'f', -1, 64))
	set("tolerated-failure-count", wire.MetaFailureCount, strconv.FormatInt(o.count, 10))
	set("max-attempts", wire.MetaMaxAttempts, strconv.Itoa(o.maxAttempts))
	set("priority", wire.MetaPriority, strconv.Itoa(o.priority))
	set("sample", wire.MetaSample, strconv.Itoa(o.sample))
	if changed("auto-approve-usd") {
		if err := api.CheckBudget("--auto-approve-usd", o.autoApprove); err != nil {
			return nil, &ExitError{Code: ExitUsage, Err: err}
		}
		m[wire.MetaAutoApproveUSD] = strconv.FormatFloat(o.autoApprove, 'f', -1, 64)
	}
	if o.retry != "" {
		p, err := api.ParseRetryPolicy(o.retry)
		if err != nil {
			return nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--retry: %w", err)}
		}
		m[wire.MetaRetry] = p.String()
	}
	if o.rate != "" {
		r, err := api.ParseRate("--rate", o.rate)
		if err != nil {
			return nil, &ExitError{Code: ExitUsage, Err: err}
		}
		m[wire.MetaRate] = r.Spec()
	}
	set("stop-on-threshold", wire.MetaStopOnThreshold, strconv.FormatBool(o.stop))
	if changed("budget") {
		if err := api.CheckBudget("--budget", o.budget); err != nil {
			return nil, &ExitError{Code: ExitUsage, Err: err}
		}
		m[wire.MetaBudgetUSD] = strconv.FormatFloat(o.budget, 'f', -1, 64)
	}
	c := api.Ceilings{SpendUSD: o.ceilingSpend, Tokens: o.ceilingTokens}
	if err := c.Check("ceilings"); err != nil {
		return nil, &ExitError{Code: ExitUsage, Err: err}
	}
	if changed("ceiling-spend-usd") {
		m[wire.MetaCeilingSpendUSD] = strconv.FormatFloat(o.ceilingSpend, 'f', -1, 64)
	}
	if changed("ceiling-tokens") {
		m[wire.MetaCeilingTokens] = strconv.FormatFloat(o.ceilingTokens, 'f', -1, 64)
	}
	if o.rerun {
		m[wire.MetaRerun] = "true"
	}
	if o.options != "" {
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(o.options)); err != nil {
			return nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--options: not valid JSON: %v", err)}
		}
		m[wire.MetaPipelineOptions] = compact.String()
	}
	return m, nil
}

func (a *app) uploadCmd() *cobra.Command {
	var o uploadOptions
	cmd := &cobra.Command{
		Use:   "upload FILE --pipeline NAME [--name KEY] [--key-field F] [--options JSON] [--watch] | upload FILE --corrects ID",
		Short: "Upload a file under incoming/ with its options as object metadata, as any uploader would, and follow the batch it starts",
		Long: `Upload a local file under incoming/ in the stack's bucket, its submit options set as the object's
metadata (x-amz-meta-pipeline, -key-field, -pipeline-options, …: docs/sources.md "Upload instead"), the
way any S3 uploader starts a batch. The file is read first as submit will read it — every line, duplicate
keys included — and a file submit would refuse is refused before any byte is uploaded. It then prints the
batch id the upload starts (the name and the items decide it, as for every upload, unless --id names it),
waits until submit has read the file, and says whether the batch runs, was found (the same file under the
same name again), or was refused (a renamed copy of a file that already ran: --rerun runs it again).
--watch follows the run as bulkrun watch does.

With --corrects ID the file is corrected inputs for failed, quarantined or cancelled items of batch ID
(x-amz-meta-corrects: as bulkrun correct, through an upload): it waits for the correction's revision
and run, or prints why the upload was refused.`,
		Args: exactArgs(1, "one FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.uploadFile(cmd, args[0], o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.pipeline, "pipeline", "", "pipeline to run per item (required)")
	f.StringVar(&o.name, "name", "", "key under incoming/ (default: the file's name); incoming/ is added when missing")
	f.StringVar(&o.keyField, "key-field", "", "input field (JSON) or column (CSV) holding the item key; positional keys otherwise")
	f.StringVar(&o.format, "format", "", "source format: jsonl, json or csv (default from the extension)")
	f.StringVar(&o.delim, "csv-delimiter", "", "CSV delimiter: one character, or comma, semicolon, tab, pipe (default: from a sep= first line or the header)")
	f.StringVar(&o.options, "options", "", "pipeline options, a JSON object, set as x-amz-meta-pipeline-options")
	f.StringVar(&o.id, "id", "", "batch id, set as x-amz-meta-batch-id (default: derived from the name and the items)")
	f.Float64Var(&o.percent, "tolerated-failure-percent", 0, "threshold: tolerated failures in percent of all items")
	f.Int64Var(&o.count, "tolerated-failure-count", 0, "threshold: tolerated number of failures")
	f.IntVar(&o.maxAttempts, "max-attempts", 0, "attempts per item (default: the stack's)")
	f.StringVar(&o.retry, "retry", "", retryFlagHelp+"; set as x-amz-meta-retry")
	f.StringVar(&o.rate, "rate", "", rateFlagHelp+"; set as x-amz-meta-rate")
	f.IntVar(&o.priority, "priority", 0, priorityFlagHelp+"; set as x-amz-meta-priority")
	f.IntVar(&o.sample, "sample", 0, sampleFlagHelp+"; set as x-amz-meta-sample")
	f.Float64Var(&o.autoApprove, "auto-approve-usd", 0, autoApproveFlagHelp+"; set as x-amz-meta-auto-approve-usd")
	f.BoolVar(&o.stop, "stop-on-threshold", true, "stop the run as soon as failures exceed the threshold; =false runs every item and judges at the end")
	f.Float64Var(&o.budget, "budget", 0, budgetFlagHelp+"; set as x-amz-meta-budget-usd")
	f.Float64Var(&o.ceilingSpend, "ceiling-spend-usd", 0, ceilingSpendHelp+"; set as x-amz-meta-ceiling-spend-usd")
	f.Float64Var(&o.ceilingTokens, "ceiling-tokens", 0, ceilingTokensHelp+"; set as x-amz-meta-ceiling-tokens")
	f.BoolVar(&o.rerun, "rerun", false, "run the items even though the same items started a batch from another name (x-amz-meta-rerun: true), or start a new run of this name's finished batch")
	f.BoolVar(&o.watch, "watch", false, "watch the batch until it finishes (as bulkrun watch)")
	f.StringVar(&o.corrects, "corrects", "", "the file corrects failed, quarantined or cancelled items of this finished batch (x-amz-meta-corrects); only --name, --key-field, --format, --csv-delimiter and --watch apply")
	return cmd
}

// uploadFile is `bulkrun upload`: check, upload, find the batch, report.
func (a *app) uploadFile(cmd *cobra.Command, file string, o uploadOptions) error {
	ctx := cmd.Context()
	meta, err := o.metadata(cmd.Flags().Changed)
	if err != nil {
		return err
	}
	if o.id != "" && !api.ValidBatchID(o.id) {
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--id %q: want 1–128 of A-Z a-z 0-9 _ -", o.id)}
	}
	if o.corrects != "" {
		return a.uploadCorrections(ctx, file, o, meta)
	}
	key := UploadKey(file, o.name)
	format := o.format
	if format == "" {
		format = api.FormatOf(key) // what submit will go by: the object's name
	}
	sum, err := LocalManifest(file, format, o.keyField, o.delim)
	if err != nil {
		return &ExitError{Code: ExitFailure, Err: fmt.Errorf("%s: %w (nothing was uploaded)", file, err)}
	}
	if err := a.load(ctx); err != nil {
		return err
	}
	bucket, err := a.outs.Get(config.OutputBucket)
	if err != nil {
		return err
	}
	id := o.id
	if id == "" {
		id = api.UploadBatchID(bucket, key, sum.Digest)
	}
	md5sum, err := fileMD5(file)
	if err != nil {
		return err
	}
	// The same bytes and options already under this name: its batch
	// answers (an upload of them again would be the same batch), nothing
	// is uploaded and nothing runs again.
	if !o.rerun {
		if v, ok := a.alreadyUploaded(ctx, bucket, key, md5sum, meta, id); ok {
			if a.output == "json" {
				return a.printJSON(v)
			}
			textln(a.out, v.ID)
			textf(a.errw, "%s is already s3://%s/%s with these options: nothing was uploaded\n", file, bucket, key)
			if o.watch {
				return a.watch(ctx, v.ID)
			}
			if !v.Status.Finished() {
				textf(a.errw, "batch %s: run %d is going (follow it: bulkrun watch %s)\n", v.ID, v.Run, v.ID)
				return nil
			}
			textf(a.errw, "batch %s: exists already: %s; nothing runs again (--rerun starts a new run)\n", v.ID, describe.EndedText(v))
			return finishedExit(v)
		}
	}
	// An earlier upload's refusal under this id (a renamed copy refused,
	// now sent with --rerun; a file since corrected) does not hold it: it
	// is forgotten first, so that the refusal read below is this upload's.
	if v, err := a.api.Status(ctx, id); err == nil && v.Status == api.StatusRefused {
		if err := a.api.Forget(ctx, id); err != nil {
			return fmt.Errorf("forget the earlier refusal of batch %s: %w", id, err)
		}
		textf(a.errw, "batch %s: its earlier refusal (%s) forgotten\n", id, refusalText(v.Refusal))
	}
	uri, err := a.putFile(ctx, file, key, meta)
	if err != nil {
		return err
	}
	textf(a.errw, "uploaded %s (%s) to %s; batch %s\n", file, api.Count(sum.Count, "item"), uri, id)
	v, err := a.uploadedBatch(ctx, id)
	if err != nil {
		return err
	}
	if a.output == "json" {
		if err := a.printJSON(v); err != nil {
			return err
		}
	} else {
		textln(a.out, v.ID)
	}
	switch {
	case v.Status == api.StatusRefused:
		err := fmt.Errorf("the upload was refused: %s (report: s3://%s/%s)", refusalText(v.Refusal), bucket, config.UploadErrorKey(key))
		if v.Refusal != nil && v.Refusal.Code == api.RefusalRepeatedUpload {
			err = fmt.Errorf("%w; to run these items again anyway, upload it with --rerun: bulkrun upload %s … --rerun", err, file)
		}
		return &ExitError{Code: ExitFailure, Err: err}
	case v.Status.Finished() && !o.watch:
		// A small file's batch may have ended by the time submit has read
		// it: how it ended, and the exit a repeated upload of it gives
		// (3 when it needs attention), never a bare "completed" and 0.
		textf(a.errw, "batch %s: %s, %s\n", v.ID, api.Count(v.ItemCount, "item"), describe.EndedText(v))
		return finishedExit(v)
	default:
		textf(a.errw, "batch %s: %s, %s, run %d\n", v.ID, v.Status, api.Count(v.ItemCount, "item"), v.Run)
	}
	if o.watch && v.Status != api.StatusRefused {
		return a.watch(ctx, v.ID)
	}
	return nil
}

// alreadyUploaded reports whether key holds the file whose MD5 is sum
// (the ETag of a single-part upload, which a file under one part size is)
// with the metadata meta, and returns the batch id's view when it exists.
// A multipart object's ETag is not its MD5: such a file is uploaded again,
// and submit answers its batch all the same.
func (a *app) alreadyUploaded(ctx context.Context, bucket, key string, sum [md5.Size]byte, meta map[string]string, id string) (wire.BatchView, bool) {
	head, err := blob.NewS3(a.aws).HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return wire.BatchView{}, false
	}
	if strings.Trim(aws.ToString(head.ETag), `"`) != hex.EncodeToString(sum[:]) || len(head.Metadata) != len(meta) {
		return wire.BatchView{}, false
	}
	for k, v := range meta {
		if head.Metadata[strings.ToLower(k)] != v {
			return wire.BatchView{}, false
		}
	}
	v, err := a.api.Status(ctx, id)
	if err != nil || v.Status == api.StatusRefused || v.Status == api.StatusSubmitting {
		return wire.BatchView{}, false
	}
	return v, true
}

// fileMD5 is the MD5 of the file at path, read as a stream: what S3 gives
// as the ETag of a single-part upload (S3 user guide, "Checking object
// integrity").
func fileMD5(path string) ([md5.Size]byte, error) {
	var sum [md5.Size]byte
	f, err := os.Open(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := md5.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, fmt.Errorf("read %s: %w", path, err)
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// uploadedBatch polls the batch of an upload until submit has read the
// file: it exists and is past submitting (running or later, or refused).
func (a *app) uploadedBatch(ctx context.Context, id string) (wire.BatchView, error) {
	wctx, cancel := context.WithTimeout(ctx, UploadWait)
	defer cancel()
	var last error
	for pause := 500 * time.Millisecond; ; pause = min(2*pause, 5*time.Second) {
		v, err := a.api.Status(wctx, id)
		switch {
		case err == nil && v.Status != api.StatusSubmitting:
			return v, nil
		case err == nil:
			last = fmt.Errorf("batch %s is still reading the file", id)
		case errors.Is(err, api.ErrNotFound):
			last = fmt.Errorf("batch %s does not exist yet", id)
		default:
			return wire.BatchView{}, err
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return wire.BatchView{}, ctx.Err()
			}
			return wire.BatchView{}, fmt.Errorf("no batch after %s: %v; the upload may still start it: bulkrun status %s", UploadWait, last, id)
		case <-time.After(pause):
		}
	}
}

// uploadCorrections is `bulkrun upload FILE --corrects ID`: check the
// corrections as the batch will read them, upload them with
// x-amz-meta-corrects, and wait for their revision (found by the
// corrections' digest) or the upload's error report.
func (a *app) uploadCorrections(ctx context.Context, file string, o uploadOptions, meta map[string]string) error {
	if !api.ValidBatchID(o.corrects) {
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--corrects %q: want a batch id, 1–128 of A-Z a-z 0-9 _ -", o.corrects)}
	}
	if err := a.load(ctx); err != nil {
		return err
	}
	v, err := a.api.Status(ctx, o.corrects)
	if err != nil {
		return err
	}
	keyField := o.keyField
	if keyField == "" {
		keyField = v.KeyField
	}
	if keyField == "" {
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("batch %s has positional keys (item-0000000000, …): name the field or column holding each corrected item's key with --key-field", v.ID)}
	}
	key := UploadKey(file, o.name)
	format := o.format
	if format == "" {
		format = api.FormatOf(key)
	}
	sum, err := LocalManifest(file, format, keyField, o.delim)
	if err != nil {
		return &ExitError{Code: ExitFailure, Err: fmt.Errorf("%s: %w (nothing was uploaded)", file, err)}
	}
	bucket, err := a.outs.Get(config.OutputBucket)
	if err != nil {
		return err
	}
	var cv wire.CorrectionView
	for _, r := range v.Revisions {
		if r.Digest == sum.Digest { // the same corrections: their revision answers
			created := false
			v.Created = &created
			cv = wire.CorrectionView{Batch: v, Revision: r}
		}
	}
	if cv.Revision.N == 0 {
		if cv, err = a.putCorrections(ctx, file, bucket, key, meta, sum, v.ID); err != nil {
			return err
		}
	}
	return a.corrected(ctx, cv, o.watch)
}

// putCorrections uploads the corrections file under key with meta and
// waits for their revision of batch id.
func (a *app) putCorrections(ctx context.Context, file, bucket, key string, meta map[string]string, sum source.ManifestSummary, id string) (wire.CorrectionView, error) {
	uri, err := a.putFile(ctx, file, key, meta)
	if err != nil {
		return wire.CorrectionView{}, err
	}
	head, err := blob.NewS3(a.aws).HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return wire.CorrectionView{}, fmt.Errorf("read back %s: %w", uri, err)
	}
	etag := strings.Trim(aws.ToString(head.ETag), `"`)
	textf(a.errw, "uploaded %s (%s) to %s; corrections for batch %s\n", file, api.Count(sum.Count, "corrected item"), uri, id)
	return a.uploadedCorrection(ctx, bucket, key, etag, id, sum.Digest)
}

// uploadReport is what `bulkrun upload` reads of an upload's error report
// (shared/handler.UploadError).
type uploadReport struct {
	ETag     string         `json:"etag"`
	Error    wire.ErrorBody `json:"error"`
	Retrying bool           `json:"retrying"`
}

// uploadedCorrection polls until the upload of key (its ETag etag) has
// become a revision of batch id whose digest is digest (a new one: the
// answer is as the corrections route gives it, created) or has left an
// error report for etag (an error naming it).
func (a *app) uploadedCorrection(ctx context.Context, bucket, key, etag, id, digest string) (wire.CorrectionView, error) {
	wctx, cancel := context.WithTimeout(ctx, UploadWait)
	defer cancel()
	store := blob.New(blob.NewS3(a.aws), bucket)
	for pause := 500 * time.Millisecond; ; pause = min(2*pause, 5*time.Second) {
		v, err := a.api.Status(wctx, id)
		if err != nil {
			return wire.CorrectionView{}, err
		}
		for _, r := range v.Revisions {
			if r.Digest == digest {
				created := true
				v.Created = &created
				return wire.CorrectionView{Batch: v, Revision: r}, nil
			}
		}
		if body, err := store.Get(wctx, config.UploadErrorKey(key)); err == nil {
			var rep uploadReport
			if json.Unmarshal(body, &rep) == nil && strings.Trim(rep.ETag, `"`) == etag && !rep.Retrying {
				return wire.CorrectionView{}, &ExitError{Code: ExitFailure, Err: fmt.Errorf("the corrections were refused: %s: %s (report: s3://%s/%s)",
					rep.Error.Code, rep.Error.Message, bucket, config.UploadErrorKey(key))}
			}
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return wire.CorrectionView{}, ctx.Err()
			}
			return wire.CorrectionView{}, fmt.Errorf("no revision of batch %s after %s; the upload may still make it: bulkrun status %s", id, UploadWait, id)
		case <-time.After(pause):
		}
	}
}
