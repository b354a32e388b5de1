// Package cli is the bulkrun command line (spf13/cobra).
package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/smithy-go/logging"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/bulkrun/bulkrun/cmd/bulkrun/cli/describe"
	"github.com/bulkrun/bulkrun/internal/blob"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/source"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// ExitError carries the process exit code (and an error to print, if any).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}

// Exit codes.
const (
	ExitFailure    = 1
	ExitUsage      = 2
	ExitNeedsCheck = 3 // finished with failures, quarantined items, threshold_exceeded or cancelled
	// ExitInterrupted is a watch stopped by Ctrl-C (SIGINT): 128 + 2, as a
	// shell reports a command SIGINT ended. The batch goes on.
	ExitInterrupted = 130
)

type app struct {
	out, errw io.Writer
	in        io.Reader // forget's confirmation; New sets os.Stdin
	stack     string
	profile   string
	region    string
	output    string

	aws    aws.Config
	outs   client.Stack
	api    *client.Client
	loaded bool

	// interrupt returns a context that ends when the user presses Ctrl-C
	// (SIGINT) while a batch is watched; nil: signal.NotifyContext on
	// os.Interrupt. Tests set it.
	interrupt func(context.Context) (context.Context, context.CancelFunc)
}

// interruptible is ctx, ended also by Ctrl-C (see app.interrupt).
func (a *app) interruptible(ctx context.Context) (context.Context, context.CancelFunc) {
	if a.interrupt != nil {
		return a.interrupt(ctx)
	}
	return signal.NotifyContext(ctx, os.Interrupt)
}

// New returns the root command writing to out (results) and errw
// (progress, messages).
func New(out, errw io.Writer) *cobra.Command {
	a := &app{out: out, errw: errw, in: os.Stdin}
	root := &cobra.Command{
		Use:           "bulkrun",
		Short:         "Durable bulk runs on AWS serverless",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if a.output != "text" && a.output != "json" {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--output: want text or json, got %q", a.output)}
			}
			return nil
		},
	}
	stack := os.Getenv("BULKRUN_STACK")
	if stack == "" {
		stack = config.DefaultStackName
	}
	root.PersistentFlags().StringVar(&a.stack, "stack", stack, "CloudFormation stack of the deployment ($BULKRUN_STACK)")
	root.PersistentFlags().StringVar(&a.profile, "profile", "", "AWS shared-config profile (default $AWS_PROFILE)")
	root.PersistentFlags().StringVar(&a.region, "region", "", "AWS region (default from the profile or $AWS_REGION)")
	root.PersistentFlags().StringVarP(&a.output, "output", "o", "text", "output format: text or json")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &ExitError{Code: ExitUsage, Err: err} })
	root.AddCommand(a.submitCmd(), a.watchCmd(), a.statusCmd(), a.itemsCmd(), a.reportCmd(), a.resultsCmd(),
		a.resumeCmd(), a.correctCmd(), a.cancelCmd(), a.pauseCmd(), a.unpauseCmd(), a.approveCmd(), a.rejectCmd(), a.budgetCmd(), a.ceilingsCmd(), a.liftCmd(), a.signalCmd(), a.forgetCmd(), a.releaseCmd(), a.listCmd(), a.consoleCmd(), a.uploadCmd(), a.doctorCmd(), a.sweepCmd())
	return root
}

func (a *app) load(ctx context.Context) error {
	if a.loaded {
		return nil
	}
	c, err := sdkConfig(ctx, a.profile, a.region)
	if err != nil {
		return err
	}
	a.aws = c
	if a.outs, err = a.findStack(ctx, c); err != nil {
		return err
	}
	if a.api, err = client.New(c, a.outs); err != nil {
		return err
	}
	a.loaded = true
	return nil
}

// sdkConfig loads the AWS configuration every command uses: --profile
// and --region over the environment and shared files, and no SDK log
// lines. The SDK logs warnings of its own on stderr ("WARN failed to
// discard remaining HTTP response body, this may affect connection
// reuse"), in the middle of a command's output; a command says what
// went wrong itself, with the SDK's error after "cause:".
func sdkConfig(ctx context.Context, profile, region string) (aws.Config, error) {
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithLogger(logging.Nop{}), awsconfig.WithClientLogMode(0)}
	if profile != "" {
		opts = append(opts, awsconfig.WithSharedConfigProfile(profile))
	}
	if region != "" {
		opts = append(opts, awsconfig.WithRegion(region))
	}
	c, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("AWS config: %w", err)
	}
	return c, nil
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// rangeArgs accepts min to max arguments.
func rangeArgs(min, max int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < min || len(args) > max {
			return &ExitError{Code: ExitUsage, Err: fmt.Errorf("%s: want %s", cmd.Name(), names)}
		}
		return nil
	}
}

func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return &ExitError{Code: ExitUsage, Err: fmt.Errorf("%s: want %s", cmd.Name(), names)}
		}
		return nil
	}
}

// ReadHeaders returns the headers of a submit: those in file (a JSON
// object of strings, or lines "Name: value"; blank lines and lines starting
// with # are skipped; "" for none), then one per NAME=ENVVAR pair of env
// with the value of ENVVAR as lookup finds it. Header values never come
// from the command line itself, where other users of the machine (ps) and
// the shell's history would see them. Errors name the file and line, or the
// pair, never a value; a header given twice is an error. nil when none.
func ReadHeaders(file string, env []string, lookup func(string) (string, bool)) (map[string]string, error) {
	var h map[string]string
	add := func(where, k, v string) error {
		if h == nil {
			h = map[string]string{}
		}
		if _, dup := h[k]; dup {
			return fmt.Errorf("%s: header %q given twice", where, k)
		}
		h[k] = v
		return nil
	}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--headers-file: %w", err)
		}
		if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
			var m map[string]string
			if err := json.Unmarshal(t, &m); err != nil {
				return nil, fmt.Errorf("--headers-file %s: want a JSON object of strings: %v", file, err)
			}
			for _, k := range slices.Sorted(maps.Keys(m)) {
				if err := add("--headers-file "+file, k, m[k]); err != nil {
					return nil, err
				}
			}
		} else {
			for i, line := range strings.Split(string(data), "\n") {
				line = strings.TrimSpace(line)
				if line == "" || strings.HasPrefix(line, "#") {
					continue
				}
				k, v, ok := strings.Cut(line, ":")
				where := fmt.Sprintf("--headers-file %s line %d", file, i+1)
				if !ok || strings.TrimSpace(k) == "" {
					return nil, fmt.Errorf("%s: want Name: value", where)
				}
				if err := add(where, strings.TrimSpace(k), strings.TrimSpace(v)); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, pair := range env {
		k, name, ok := strings.Cut(pair, "=")
		if !ok || k == "" || name == "" {
			return nil, fmt.Errorf("--header-env %q: want NAME=ENVVAR", pair)
		}
		v, ok := lookup(name)
		if !ok {
			return nil, fmt.Errorf("--header-env %s: environment variable %s is not set", k, name)
		}
		if err := add("--header-env "+k, k, v); err != nil {
			return nil, err
		}
	}
	return h, nil
}

func (a *app) submitCmd() *cobra.Command {
	var (
		req         api.SubmitRequest
		format      string
		prefix      bool
		percent     float64
		count       int64
		headerEnv   []string
		headersFile string
		options     string
		watch       bool
		delim       string
		stop        bool
		retry       string
		rate        string
		onInterrupt string
		sc          submitChecks
	)
	cmd := &cobra.Command{
		Use:   "submit FILE|DIR|s3://bucket/key|s3://bucket/prefix/ --pipeline NAME",
		Short: "Start a batch from a local file (uploaded), a local folder (uploaded, one item per file), an S3 object or, with --prefix, an S3 prefix",
		Args:  exactArgs(1, "one FILE or s3:// URI"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if options != "" && !json.Valid([]byte(options)) {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--options: not valid JSON: %s", options)}
			}
			if err := checkReadFlags(format, delim); err != nil {
				return err
			}
			if delim != "" && prefix {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--csv-delimiter applies to a CSV file or object, not a prefix")}
			}
			// Flags refused on their own are refused before --check reads
			// the source: a check that passes says the submit would run.
			policy, r, err := retryAndRateFlags(retry, rate)
			if err != nil {
				return err
			}
			if done, err := a.submitCheck(cmd, &req, &sc, args[0], prefix, format, delim); done || err != nil {
				return err
			}
			if err := a.load(ctx); err != nil {
				return err
			}
			src := args[0]
			local := false // a local file or folder: its content is known
			switch {
			case prefix:
				if !strings.HasPrefix(src, "s3://") {
					return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--prefix needs an s3:// URI")}
				}
				req.Source = api.SourceSpec{Prefix: src}
			case strings.HasPrefix(src, "s3://"):
				req.Source = api.SourceSpec{Object: src, Format: format}
			default:
				if st, err := os.Stat(src); err == nil && st.IsDir() {
					uri, n, err := a.uploadDir(ctx, src)
					if err != nil {
						return err
					}
					textf(a.errw, "uploaded %s to %s\n", api.Count(n, "file"), uri)
					req.Source = api.SourceSpec{Prefix: uri}
					local = true
					break
				}
				if err := a.checkUpload(src, format, req.KeyField, delim, sc.opts); err != nil {
					return err
				}
				uri, err := a.upload(ctx, src)
				if err != nil {
					return err
				}
				req.Source = api.SourceSpec{Object: uri, Format: format}
				local = true
			}
			if delim != "" {
				if req.Source.Object == "" {
					return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--csv-delimiter applies to a CSV file or object only")}
				}
				req.Source.CSVDelimiter = delim
			}
			if cmd.Flags().Changed("stop-on-threshold") {
				req.StopOnThreshold = &stop
			}
			req.Retry, req.Rate = policy, r
			req.OnInterrupt = api.InterruptPolicy(onInterrupt)
			if cmd.Flags().Changed("tolerated-failure-percent") {
				req.Threshold.FailurePercent = &percent
			}
			if cmd.Flags().Changed("tolerated-failure-count") {
				req.Threshold.FailureCount = &count
			}
			h, err := ReadHeaders(headersFile, headerEnv, os.LookupEnv)
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			req.Headers = h
			if options != "" {
				req.Options = json.RawMessage(options)
			}
			if req.BatchID == "" {
				// Chosen before the first try, so that every retry (and a
				// rerun of this command with --id) names the same batch.
				// A local file or folder is uploaded under its content's
				// digest, so its request names its content: the id derives
				// from it, and running the same command again is the same
				// batch, as an upload of the same name and content is.
				req.BatchID = client.NewBatchID()
				if local {
					req.BatchID = RequestBatchID(req)
				}
			}
			a.announceSubmit(ctx, req)
			v, err := a.api.Submit(ctx, req)
			if err != nil {
				return submitError(err, req.BatchID)
			}
			for _, w := range v.Warnings {
				textf(a.errw, "warning: %s\n", w)
			}
			if !watch {
				return a.submitted(ctx, v)
			}
			return a.watch(ctx, v.ID)
		},
	}
	f := cmd.Flags()
	submitRequestFlags(f, &req)
	f.StringVar(&format, "format", "", "source format: jsonl, json or csv (default from the extension)")
	f.BoolVar(&prefix, "prefix", false, "the s3:// URI is a prefix: one item per object under it")
	f.Float64Var(&percent, "tolerated-failure-percent", 0, "threshold: tolerated failures in percent of all items")
	f.Int64Var(&count, "tolerated-failure-count", 0, "threshold: tolerated number of failures")
	f.StringVar(&delim, "csv-delimiter", "", "CSV delimiter: one character, or comma, semicolon, tab, pipe (default: from a sep= first line or the header)")
	f.BoolVar(&stop, "stop-on-threshold", true, "stop the run as soon as failures exceed the threshold; =false runs every item and judges at the end")
	f.StringVar(&retry, "retry", "", retryFlagHelp)
	f.StringVar(&rate, "rate", "", rateFlagHelp)
	f.StringVar(&onInterrupt, "on-interrupt", "", "an item whose attempt was interrupted (outcome unknown): retry (the default) or quarantine, for pipelines that are not idempotent")
	f.StringVar(&headersFile, "headers-file", "", "file of headers passed to the pipeline: a JSON object {\"Name\": \"value\"} or lines \"Name: value\" (a value may be a secret reference, secret:arn:…)")
	f.StringArrayVar(&headerEnv, "header-env", nil, "NAME=ENVVAR: header NAME passed to the pipeline, its value read from environment variable ENVVAR (repeatable)")
	f.StringVar(&options, "options", "", "pipeline options, a JSON object (e.g. '{\"url\":\"https://…\"}')")
	f.BoolVar(&watch, "watch", false, "watch the batch until it finishes (as bulkrun watch)")
	sc.flags(cmd)
	_ = cmd.MarkFlagRequired("pipeline")
	return cmd
}

// submitRequestFlags binds the submit flags that set a field of req as
// they are given.
// budgetFlagHelp is --budget's help (submit, upload).
const budgetFlagHelp = "budget in US dollars per run: at it the batch pauses (the pipeline's reported usd plus its DynamoDB units' cost); bulkrun budget ID --usd N raises it (default: none)"

func submitRequestFlags(f *pflag.FlagSet, req *api.SubmitRequest) {
	f.Var(usdValue{&req.BudgetUSD, "--budget"}, "budget", budgetFlagHelp)
	f.Var(ceilingValue{&req.Ceilings, "--ceiling-spend-usd", func(c *api.Ceilings, v float64) { c.SpendUSD = v }}, "ceiling-spend-usd", ceilingSpendHelp)
	f.Var(ceilingValue{&req.Ceilings, "--ceiling-tokens", func(c *api.Ceilings, v float64) { c.Tokens = v }}, "ceiling-tokens", ceilingTokensHelp)
	f.StringVar(&req.Pipeline, "pipeline", "", "pipeline to run per item (required)")
	f.StringVar(&req.BatchID, "id", "", "batch id (1–128 of [A-Za-z0-9_-]), printed before the first try; every try, and a rerun with this id, is the same batch. Default: for a local file or folder, derived from its content and the settings (the same command again is the same batch); for an s3:// source, a new ULID")
	f.StringVar(&req.KeyField, "key-field", "", "input field (JSON) or column (CSV) holding the item key; positional keys otherwise")
	f.IntVar(&req.MaxAttempts, "max-attempts", 0, "attempts per item (default: the stack's)")
	f.IntVar(&req.MaxConcurrency, "max-concurrency", 0, "most items of the batch running at once, 1–1000 (default 0: unlimited)")
	f.IntVar(&req.Priority, "priority", 0, priorityFlagHelp)
	f.IntVar(&req.Sample, "sample", 0, sampleFlagHelp)
	f.Var(usdValue{&req.AutoApproveUSD, "--auto-approve-usd"}, "auto-approve-usd", autoApproveFlagHelp)
	f.IntVar(&req.ItemsPerMessage, "items-per-message", 0, "consecutive items packed into one queue message and one ledger row, 1–100, each with its own outcome (default 0: the stack's default, 10 unless it sets another)")
	f.BoolVar(&req.Rerun, "rerun", false, "if the batch exists with this manifest and is finished, start a new run")
	f.StringVar(&req.TaskToken, "task-token", "", "a Step Functions task token ($$.Task.Token of a .waitForTaskToken Task state): answered once, when the batch's first run ends, with SendTaskSuccess (completed, threshold_exceeded) or SendTaskFailure (docs/api.md, \"Step Functions\")")
	f.IntVar(&req.TaskHeartbeatSeconds, "task-heartbeat-seconds", 0, "with --task-token: the Task state's HeartbeatSeconds (or less), 600–99999999; SendTaskHeartbeat is sent on every 5-minute tick while the first run goes (default 0: none)")
}

// sampleFlagHelp and autoApproveFlagHelp are --sample's and
// --auto-approve-usd's help, for submit and upload.
const (
	sampleFlagHelp      = "run the first N items first (rounded up to whole messages), then hold the rest until bulkrun approve ID (or reject ID), with an estimate of the whole run's cost, failures and time from them, 1–100000 (default 0: no sample; docs/api.md, \"Sample and approve\")"
	autoApproveFlagHelp = "with --sample: approve the rest without asking when the sample's estimate of the whole run's cost is at most this many US dollars (default: ask)"
)

// usdValue is a flag of US dollars > 0 (api.CheckBudget), set on the
// request only when given; name is the flag as errors name it.
type usdValue struct {
	to   **float64
	name string
}

func (v usdValue) String() string {
	if v.to == nil || *v.to == nil {
		return ""
	}
	return api.USDText(**v.to)
}

func (v usdValue) Set(s string) error {
	usd, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("want US dollars > 0: %q", s)
	}
	if err := api.CheckBudget(v.name, usd); err != nil {
		return err
	}
	*v.to = &usd
	return nil
}

func (v usdValue) Type() string { return "usd" }

// priorityFlagHelp is --priority's help, for submit and upload.
const priorityFlagHelp = "the batch's weight in the items queue's fair share while other batches wait with it, 1–10: at 3 it gets about 3 calls for another batch's 1 (default 0: 1; docs/api.md, \"Priority\")"

// retryAndRateFlags reads --retry and --rate ("": nil each), a usage
// error naming the flag when one is bad.
func retryAndRateFlags(retry, rate string) (*api.RetryPolicy, *api.Rate, error) {
	var policy *api.RetryPolicy
	if retry != "" {
		p, err := api.ParseRetryPolicy(retry)
		if err != nil {
			return nil, nil, &ExitError{Code: ExitUsage, Err: fmt.Errorf("--retry: %w", err)}
		}
		policy = &p
	}
	r, err := rateFlag(rate)
	return policy, r, err
}

// rateFlag reads --rate ("": nil), a usage error when bad.
func rateFlag(s string) (*api.Rate, error) {
	if s == "" {
		return nil, nil
	}
	r, err := api.ParseRate("--rate", s)
	if err != nil {
		return nil, &ExitError{Code: ExitUsage, Err: err}
	}
	return &r, nil
}

// rateFlagHelp is --rate's help, for submit and upload.
const rateFlagHelp = "pace to the downstream, shared by every batch naming the same key: most calls a second (0.01–10000), a token budget (tokens the pipeline reports as cost \"tokens\", a second or a minute), or both, comma-separated, then @KEY: e.g. 50@api.example.com, 50,90000tokens/min@api.openai.com, 300tokens/s (no key: this batch alone). Default: unpaced"

// retryFlagHelp is --retry's help, for submit and upload.
const retryFlagHelp = "retry policy after transient errors, name=value pairs (names not given keep the default): interval_seconds (wait before the first retry), backoff_rate (×, 1–10), max_delay_seconds (cap of one wait), jitter (0–1: each wait × [1, 1+jitter]); e.g. interval_seconds=60,backoff_rate=2,max_delay_seconds=600. Default: the stack's (" + "interval_seconds=300,backoff_rate=2,max_delay_seconds=900,jitter=0.5 unless the stack sets another)"

// errFirstItem stops CheckLocalSource's read at the first item.
var errFirstItem = errors.New("first item read")

// CheckLocalSource reads a local file as submit will read it once
// uploaded — its encoding (gzip, UTF-8, a BOM), its format (format, or its
// name's extension), a CSV's delimiter (delim, or as the file says) and
// header — up to its first item, and checks that the first item has the
// key field keyField ("" for positional keys). It returns the source
// reader's error, which names the line and the field (a CSV header without
// the key column, a first line that is not JSON, a file that is not
// UTF-8), so that a file submit would refuse is refused before any byte is
// uploaded. The rest of the file is checked by submit, as it reads it
// whole. A file whose format cannot be told is an error naming --format.
func CheckLocalSource(path, format, keyField, delim string) error {
	err := readLocalSource(path, format, keyField, delim, func(source.SourceItem) error { return errFirstItem })
	if errors.Is(err, errFirstItem) {
		return nil
	}
	if err == nil {
		return errNoItems
	}
	return err
}

var errNoItems = errors.New("holds no items (blank and whitespace-only lines are not items)")

// readLocalSource reads the items of a local file with the readers submit
// uses for an object (source.SourceText, then the format's reader), in
// format (or its name's extension's) and delimiter delim, calling emit
// with each.
func readLocalSource(path, format, keyField, delim string, emit func(source.SourceItem) error) error {
	if format == "" {
		format = api.FormatOf(path)
	}
	if format == "" {
		return fmt.Errorf("cannot tell the format of %s: name it .jsonl, .ndjson, .json or .csv (optionally .gz), or give --format", filepath.Base(path))
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return readSourceText(f, format, keyField, delim, emit)
}

// checkReadFlags checks the --format and --csv-delimiter flags of a
// command that reads a source: a usage error naming the flag.
func checkReadFlags(format, delim string) error {
	switch format {
	case "", api.FormatJSONL, api.FormatJSON, api.FormatCSV:
	default:
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--format %q: want jsonl, json or csv", format)}
	}
	if _, err := api.ParseCSVDelimiter(delim); err != nil {
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--csv-delimiter %w", err)}
	}
	return nil
}

// readSourceText reads the items of r (a file's bytes, gzip or not) in
// format (jsonl, json or csv) with the readers submit uses for an object.
func readSourceText(r io.Reader, format, keyField, delim string, emit func(source.SourceItem) error) error {
	text, err := source.SourceText(r)
	if err != nil {
		return err
	}
	switch format {
	case api.FormatCSV:
		d, derr := api.ParseCSVDelimiter(delim)
		if derr != nil {
			return fmt.Errorf("--csv-delimiter %w", derr)
		}
		return source.ReadCSVDelimited(text, keyField, d, emit)
	case api.FormatJSON:
		return source.ReadJSONArray(text, keyField, emit)
	}
	return source.ReadJSONL(text, keyField, emit)
}

// LocalManifest reads a whole local file as submit will once it is
// uploaded (readLocalSource) into a manifest it discards, and returns its
// summary: the digest submit will compute (submit.Submitter.Digest) and
// the item count. Every line is checked — malformed lines, duplicate keys
// (spilled to the temporary directory past a few MiB) — with submit's
// errors, which name the line and key.
func LocalManifest(path, format, keyField, delim string) (source.ManifestSummary, error) {
	mw := source.NewManifestWriter(io.Discard, 0, os.TempDir())
	defer mw.Close()
	if err := readLocalSource(path, format, keyField, delim, mw.Add); err != nil {
		return source.ManifestSummary{}, err
	}
	sum, err := mw.Finish()
	if err == nil && sum.Count == 0 {
		err = errNoItems
	}
	return sum, err
}

// RequestBatchID is the default batch id of a submit of a local file or
// folder: "cli-" and the first 24 hex digits of the SHA-256 of the request
// as JSON (source URI — which holds the content's digest —, pipeline,
// options, headers, key field, threshold and the other settings; the batch
// id and --rerun left out). The same command over the same content gives the
// same id, so running it again answers the batch it started instead of
// running every item a second time; changed content or settings give
// another id. Deterministic and safe for concurrent use.
func RequestBatchID(req api.SubmitRequest) string {
	req.BatchID, req.Rerun = "", false // --rerun asks the same batch for a new run
	b, err := json.Marshal(req)
	if err != nil { // a SubmitRequest always marshals; fall back to a fresh id
		return client.NewBatchID()
	}
	sum := sha256.Sum256(b)
	return "cli-" + hex.EncodeToString(sum[:])[:24]
}

// submitError is the error of a submit that failed: one that may be sent
// again (client.Retryable: no answer, 429, 5xx but 507) says which --id
// retries it safely; a refusal (another 4xx, 507) does not, as the same
// request under that id would be answered the same.
// SubmitWait bounds how long `bulkrun submit` (without --watch) waits for
// an accepted batch's source to be read: until its manifest is frozen or
// it is refused, at most this long; then it says how to follow the batch.
const SubmitWait = 60 * time.Second

// submitted waits (at most SubmitWait, polling the batch's status) until an
// accepted batch is frozen or refused and reports it: the batch id on
// stdout (the view with -o json), its items and run on stderr. A refused
// batch is an error (exit 1) naming the refusal's line, key or field; a
// batch still being read after SubmitWait is not (exit 0), and the message
// says to follow it with `bulkrun watch`.
func (a *app) submitted(ctx context.Context, v wire.BatchView) error {
	created := v.Created != nil && *v.Created
	if v.Status == api.StatusSubmitting {
		textf(a.errw, "batch %s: accepted, reading the source (created: %v)\n", v.ID, created)
		wctx, cancel := context.WithTimeout(ctx, SubmitWait)
		w, err := a.api.Submitted(wctx, v.ID, time.Second)
		cancel()
		switch {
		case err == nil:
			w.Created = v.Created
			v = w
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			textf(a.errw, "batch %s: still reading the source after %s; follow it with: bulkrun watch %s\n", v.ID, SubmitWait, v.ID)
		default:
			return fmt.Errorf("batch %s was accepted; reading its status: %w (follow it with: bulkrun watch %s)", v.ID, err, v.ID)
		}
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
		return &ExitError{Code: ExitFailure, Err: refusedError(v)}
	case v.Status == api.StatusSubmitting:
	case !created && v.Status.Finished():
		// Nothing was submitted: the batch these items and settings
		// started answers, as it ended.
		textf(a.errw, "batch %s: %s; nothing runs again (--rerun starts a new run)\n", v.ID, describe.EndedText(v))
		return finishedExit(v)
	case !created:
		textf(a.errw, "batch %s: already submitted with these items and settings: %s, run %d is going; nothing new was submitted (follow it: bulkrun watch %s)\n",
			v.ID, api.Count(v.ItemCount, "item"), v.Run, v.ID)
	default:
		textf(a.errw, "batch %s: submitted: %s, run %d\n", v.ID, api.Count(v.ItemCount, "item"), v.Run)
	}
	return nil
}

// announceSubmit says, before the first try, what the submit is about to
// do with its batch id: submit a new batch, or — the id naming a batch
// already — ask for the batch that these items and settings started
// (nothing runs twice), or a new run of it (--rerun). The id is printed
// first in every case, so that an interrupted command can be retried
// with it. A batch that cannot be read counts as new.
func (a *app) announceSubmit(ctx context.Context, req api.SubmitRequest) {
	v, err := a.api.Status(ctx, req.BatchID)
	switch {
	case err != nil || v.Status == api.StatusRefused:
		textf(a.errw, "batch %s: submitting\n", req.BatchID)
	case req.Rerun && v.Status.Finished():
		textf(a.errw, "batch %s: exists already (%s, run %d): starting a new run of what did not succeed (--rerun)\n", req.BatchID, v.Status, v.Run)
	default:
		textf(a.errw, "batch %s: exists already (%s, run %d): the same items and settings answer it, and nothing runs twice\n", req.BatchID, v.Status, v.Run)
	}
}

// finishedExit is the exit of a command that ends on a finished batch:
// ExitNeedsCheck when it needs attention, else nil. watch, submit and
// upload end the same way on the same batch.
func finishedExit(v wire.BatchView) error {
	if describe.NeedsCheck(v) {
		return &ExitError{Code: ExitNeedsCheck}
	}
	return nil
}

// refusedError is a refused batch's error: its refusal's code, then where
// in the source (field, line, element, key) and why.
func refusedError(v wire.BatchView) error {
	return fmt.Errorf("batch %s was refused: %s", v.ID, refusalText(v.Refusal))
}

func submitError(err error, id string) error {
	if client.Retryable(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w (the batch id was %s: run the command again with --id %s to retry it safely)", err, id, id)
	}
	return err
}

// upload puts a local file under uploads/{sha256 prefix}/ in the stack's
// bucket (not incoming/, which would start a second batch) and returns its
// URI. The key derives from the content, so a retried submit of the same
// file names the same object. The file is read twice from disk (its hash,
// then the upload) and streamed through the transfer manager in parts
// (internal/blob: memory bounded by its part size × concurrency, whatever
// the file's size).
func (a *app) upload(ctx context.Context, path string) (string, error) {
	sum, err := hashFile(path)
	if err != nil {
		return "", err
	}
	return a.putFile(ctx, path, uploadFileKey(path, sum), nil)
}

// putFile streams the local file path under key in the stack's bucket
// with user metadata meta (x-amz-meta-<name>; nil for none), and returns
// its s3:// URI.
func (a *app) putFile(ctx context.Context, path, key string, meta map[string]string) (string, error) {
	bucket, err := a.outs.Get(config.OutputBucket)
	if err != nil {
		return "", err
	}
	if err := uploadFile(ctx, blob.New(blob.NewS3(a.aws), bucket), path, key, meta); err != nil {
		return "", err
	}
	return "s3://" + bucket + "/" + key, nil
}

// uploadFileKey is the key a local file whose content has SHA-256 sum is
// uploaded under: uploads/{first 16 hex digits of sum}/{base name}.
func uploadFileKey(path string, sum [32]byte) string {
	return "uploads/" + hex.EncodeToString(sum[:8]) + "/" + filepath.Base(path)
}

// hashFile is the SHA-256 of the file at path, read as a stream.
func hashFile(path string) ([32]byte, error) {
	var sum [32]byte
	f, err := os.Open(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, fmt.Errorf("read %s: %w", path, err)
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// uploadFile streams the file at path to key through the transfer
// manager, with user metadata meta (nil for none).
func uploadFile(ctx context.Context, store *blob.Store, path, key string, meta map[string]string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w, err := store.CreateObject(ctx, key, "application/octet-stream", meta)
	if err != nil {
		return fmt.Errorf("upload %s: %w", path, err)
	}
	if _, err := io.Copy(w, f); err != nil {
		w.Abort()
		return fmt.Errorf("upload %s: %w", path, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("upload %s: %w", path, err)
	}
	return nil
}

// uploadDirFiles lists the regular files under dir (recursively, sorted)
// and returns them with the prefix they are uploaded under:
// uploads/{first 16 hex digits of the SHA-256 of "{relative path}
// {SHA-256 of content}\n" per file}/. The same folder gives the same prefix.
func uploadDirFiles(dir string) ([]string, string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	if len(files) == 0 {
		return nil, "", fmt.Errorf("%s holds no files", dir)
	}
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		sum, err := hashFile(f)
		if err != nil {
			return nil, "", err
		}
		rel, _ := filepath.Rel(dir, f)
		h.Write([]byte(fmt.Sprintf("%s %x\n", filepath.ToSlash(rel), sum)))
	}
	return files, "uploads/" + hex.EncodeToString(h.Sum(nil))[:16] + "/", nil
}

// uploadDir puts every regular file under dir (recursively, keys relative
// to dir) under uploads/{digest}/ in the stack's bucket, eight at a time, and
// returns the prefix URI. The digest covers the files' names and contents,
// so the same folder gives the same prefix and, with --id, the same batch.
func (a *app) uploadDir(ctx context.Context, dir string) (string, int, error) {
	bucket, err := a.outs.Get(config.OutputBucket)
	if err != nil {
		return "", 0, err
	}
	files, prefix, err := uploadDirFiles(dir)
	if err != nil {
		return "", 0, err
	}
	store := blob.New(blob.NewS3(a.aws), bucket)
	errs := make(chan error, len(files))
	sem := make(chan struct{}, 8)
	for _, f := range files {
		sem <- struct{}{}
		go func(f string) {
			defer func() { <-sem }()
			rel, _ := filepath.Rel(dir, f)
			errs <- uploadFile(ctx, store, f, prefix+filepath.ToSlash(rel), nil)
		}(f)
	}
	var all []error
	for range files {
		if err := <-errs; err != nil {
			all = append(all, err)
		}
	}
	if err := errors.Join(all...); err != nil {
		return "", 0, err
	}
	return "s3://" + bucket + "/" + prefix, len(files), nil
}

// stoppingWaits is what a stopping run's items waiting for a retry do:
// their messages come back when the retry is due, and only then end
// stopped, never called — "; 30 items waiting for a retry end cancelled
// when it comes due, the next at 2026-12-05T19:36:00Z" ("" when none
// waits), so that a stop that takes minutes says why.
func stoppingWaits(v wire.BatchView) string {
	l := v.Live
	if l == nil {
		return ""
	}
	s := ""
	if l.RetryWaiting > 0 {
		s = fmt.Sprintf("; %s waiting for a retry end %s without a call, when it comes due at the latest", api.Count(l.RetryWaiting, "item"), v.Stop)
		if l.NextRetryAt != nil {
			s += " (the next at " + describe.Stamp(*l.NextRetryAt) + ")"
		}
		s += ", sooner when another item of their message is settled first"
	}
	if held := l.Suspended + l.Withheld + l.Exhausted; held > 0 {
		s += fmt.Sprintf("; %s held (suspended, withheld or exhausted) end %s without a call as the stop's wake reaches them, or the next finalize tick (every 5 minutes by default) for one whose message another delivery held at the stop", api.Count(held, "item"), v.Stop)
	}
	return s
}

// show prints a batch view.
func (a *app) show(v wire.BatchView) error {
	if a.output == "json" {
		return a.printJSON(v)
	}
	textf(a.out, "batch %s  run %d  %s  pipeline %s  items %d  needs_attention %v\n", v.ID, v.Run, v.Status, v.Pipeline, v.ItemCount, v.NeedsAttention)
	switch {
	case v.Stop != "" && v.Status == api.StatusRunning:
		textf(a.out, "stopping: %s (%s); items already in flight finish after the stop%s\n", v.Stop, v.StopDetail, stoppingWaits(v))
	case v.Stop != "" && v.Census != nil:
		textf(a.out, "stopped: %s\n", api.StopSummaryOf(v.Batch, *v.Census).Text())
	}
	if p := v.Pause; p != nil && v.Status == api.StatusRunning {
		textf(a.out, "%s\n", describe.PauseText(*p))
	} else if ps := v.Paused; ps != nil && (v.Status == api.StatusRunning || v.Status.Finished()) {
		textf(a.out, "%s\n", describe.PausedText(*ps))
	}
	if v.Failure != "" && v.Status == api.StatusFinalizeFailed {
		textf(a.out, "finalize failed: %s\n(the items ended; nothing is lost. Fix the cause, then: bulkrun resume %s)\n", v.Failure, v.ID)
	}
	if v.Refusal != nil {
		textf(a.out, "refused: %s\n", refusalText(v.Refusal))
	}
	if v.Live == nil || v.Status.Finished() {
		// The live view names a running batch's halts; a finished batch
		// keeps them for its next run.
		for _, s := range slices.Sorted(maps.Keys(v.Halts)) {
			textln(a.out, describe.HaltText(v.Batch, s))
		}
	}
	for _, r := range v.Revisions {
		textln(a.out, describe.RevisionText(v.Batch, r))
	}
	if c := v.Census; c != nil {
		withheld := ""
		if c.Withheld > 0 {
			withheld = fmt.Sprintf("  withheld %d", c.Withheld)
		}
		if c.Exhausted > 0 {
			withheld += fmt.Sprintf("  exhausted %d", c.Exhausted)
		}
		if c.Suspended > 0 {
			withheld += fmt.Sprintf("  suspended %d", c.Suspended)
		}
		textf(a.out, "census: succeeded %d  failed %d  quarantined %d  cancelled %d%s  in_flight %d  pending %d  (from %s)\n",
			c.Succeeded, c.Failed, c.Quarantined, c.Cancelled, withheld, c.InFlight, c.Pending, v.CensusSource)
		a.printCost("cost (ending attempts)", c.Cost)
		a.printCost("spent by this run", c.RunSpent)
	}
	if v.Status != api.StatusSubmitting && v.Status != api.StatusRefused {
		textf(a.out, "threshold: %s\n", describe.ThresholdText(v.Threshold, v.EarlyStop()))
		if v.BudgetUSD > 0 {
			textf(a.out, "budget: $%s per run (the pipeline's reported usd plus its DynamoDB units; Lambda and SQS not counted)\n", api.USDText(v.BudgetUSD))
		}
		if v.Rate != nil {
			textf(a.out, "rate: %s\n", v.Rate.String())
		}
		if line := describe.ConcurrencyText(v.Batch); line != "" {
			textf(a.out, "%s\n", line)
		}
		if w := v.Weight(); w > 1 {
			textf(a.out, "priority: %d (%d shares of the items queue while other batches wait with it)\n", w, w)
		}
		if ap := v.Approval; ap != nil {
			for _, line := range describe.ApprovalText(v.ID, *ap, v.AutoApproveUSD, v.Run == 1 && v.Status == api.StatusRunning && v.Stop == "") {
				textf(a.out, "%s\n", line)
			}
		}
		if c := v.Ceilings; c != nil {
			textf(a.out, "per-item ceilings: %s\n", describe.CeilingsText(*c))
		}
		if c := v.Census; c != nil {
			textf(a.out, "%s\n", describe.VerdictText(v.Threshold, v.Threshold.Judge(c.Failed+c.Quarantined, c.Total), !v.Status.Finished()))
		}
	}
	if v.Progress != nil {
		textf(a.out, "progress: done %d  failures %d (counters)\n", v.Progress.Done, v.Progress.Failures)
	}
	if l := v.Live; l != nil {
		textf(a.out, "%s\n", describe.LiveText(*l))
		if p := l.AdaptivePace; p != nil {
			textf(a.out, "%s\n", describe.AdaptivePaceText(*p))
		}
		if r := l.RateBooked; r != nil && v.Pause == nil {
			// Paused, none of its units leases: the pause line says why
			// nothing moves.
			textf(a.out, "%s\n", describe.RateBookedText(*r))
		}
		if c := l.RateConflict; c != nil && v.Rate != nil {
			textf(a.out, "%s\n", describe.RateConflictText(*c, *v.Rate))
		}
		if e := l.Estimate; e != nil {
			textf(a.out, "%s\n", describe.EstimateText(*e))
		} else if line := describe.ApprovedRestText(v.Batch); line != "" {
			textf(a.out, "%s\n", line)
		}
		for _, why := range l.Attention {
			textf(a.out, "needs attention: %s\n", why)
		}
	}
	for _, why := range describe.FinishedAttention(v.Batch, v.Census) {
		textf(a.out, "needs attention: %s\n", why)
	}
	if v.Report != "" {
		textf(a.out, "report: %s\n", v.Report)
	}
	return nil
}

func (a *app) statusCmd() *cobra.Command {
	return a.simple("status ID", "Show a batch's status and census", 1, "a batch ID",
		func(ctx context.Context, args []string) (any, error) { return a.api.Status(ctx, args[0]) })
}

func (a *app) itemsCmd() *cobra.Command {
	var (
		outcome string
		limit   int
		cursor  string
		all     bool
		inputs  bool
		file    string
	)
	cmd := &cobra.Command{
		Use:   "items ID [--outcome failed|quarantined|withheld|exhausted|suspended|in_flight|needs_attention] [--inputs [--file PATH]]",
		Short: "List the items needing attention, oldest key first; with --inputs, their inputs ready to correct",
		Long: `List the items of a batch with an outcome (default failed), oldest key first,
with their reason, attempts and error; a page at a time (--all: every page).

With --inputs (outcome failed or quarantined), the inputs of every item of
that outcome instead, in the source's own format — a CSV source's as CSV
with its header and delimiter, any other's as JSON Lines, each item as it
was read (a corrected item's last correction) — ready to edit and hand to
'bulkrun correct ID FILE'. They come from GET /batches/{id}/inputs, 1,000
items a page (pages in key order, each in source order); with --file they
go to PATH, written whole or not at all.`,
		Args: exactArgs(1, "a batch ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := listableOutcome(api.Outcome(outcome), args[0]); err != nil {
				return err
			}
			if !inputs && file != "" {
				return &ExitError{Code: ExitUsage, Err: errors.New("--file writes the items' inputs: give --inputs too")}
			}
			if inputs && (cursor != "" || cmd.Flags().Changed("limit")) {
				return &ExitError{Code: ExitUsage, Err: errors.New("--inputs reads every page of the items: drop --cursor and --limit")}
			}
			if err := a.load(ctx); err != nil {
				return err
			}
			if inputs {
				o := api.Outcome(outcome)
				if file == "" {
					return a.itemInputs(ctx, a.out, args[0], o)
				}
				return a.writeWhole(file, func(w io.Writer) error { return a.itemInputs(ctx, w, args[0], o) })
			}
			var items []api.Item
			var live *api.LiveView
			next := cursor
			var pageErr error // a page that failed after the client's retries
			for {
				p, err := a.api.Items(ctx, args[0], api.Outcome(outcome), next, limit)
				if err != nil {
					if len(items) == 0 {
						return err
					}
					// The pages read so far are shown, and where to go on.
					more := ""
					if all {
						more = " --all"
					}
					pageErr = fmt.Errorf("%w; the %s above were read: go on with bulkrun items %s --outcome %s --cursor %s%s",
						err, api.Count(len(items), "item"), args[0], outcome, next, more)
					break
				}
				if p.Live != nil {
					live = p.Live
				}
				items = append(items, p.Items...)
				next = p.NextCursor
				if !all || next == "" {
					break
				}
			}
			if a.output == "json" {
				if err := a.printJSON(api.ItemPage{Items: items, NextCursor: next, Live: live}); err != nil {
					return err
				}
				return pageErr
			}
			a.printItems(items)
			if pageErr != nil {
				return pageErr
			}
			if live != nil {
				// Items without a row in the run are not listed above.
				textf(a.out, "%s\n", describe.LiveText(*live))
				if live.NotFannedOut > 0 {
					textf(a.out, "%s not fanned out yet: their chunk's item messages are not all sent (its fan-out message is queued, or comes back after a failed or timed-out invocation); they have no row to list\n", api.Count(live.NotFannedOut, "item"))
				}
			}
			if next != "" {
				textf(a.errw, "more: --cursor %s\n", next)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&outcome, "outcome", "failed", "failed, quarantined, withheld, exhausted, suspended, in_flight, or needs_attention (every failed, quarantined, withheld, exhausted and suspended item, each with its next move)")
	cmd.Flags().IntVar(&limit, "limit", 100, "items per page (1–1000)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "continue after a previous page")
	cmd.Flags().BoolVar(&all, "all", false, "follow every page")
	cmd.Flags().BoolVar(&inputs, "inputs", false, "print the items' inputs in the source's format (CSV or JSON Lines), ready to edit and correct")
	cmd.Flags().StringVar(&file, "file", "", "with --inputs: write them to this file instead of stdout")
	return cmd
}

func (a *app) reportCmd() *cobra.Command {
	var run int
	cmd := &cobra.Command{
		Use:   "report ID [--run N]",
		Short: "Print the last finished run's report (--run N: run N's): status, census, cost, retries, halts, threshold and verdict, results (text; -o json: report.json as stored)",
		Args:  exactArgs(1, "a batch ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if run < 0 {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--run: want a run number of 1 or more, got %d", run)}
			}
			if err := a.load(cmd.Context()); err != nil {
				return err
			}
			r, err := a.runReport(cmd.Context(), args[0], run)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(r)
			}
			a.printReport(r)
			return nil
		},
	}
	cmd.Flags().IntVar(&run, "run", 0, "the run whose report to print (default the last finished run)")
	return cmd
}

// simple is a command of nargs arguments whose run returns what it shows:
// a wire.BatchView (shown as status shows it), a fmt.Stringer (its text,
// or its JSON with -o json; then its exit() error, when it has one, is
// the command's), or a map whose "message" is its text.
func (a *app) simple(use, short string, nargs int, names string, run func(ctx context.Context, args []string) (any, error)) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Args: exactArgs(nargs, names),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.load(cmd.Context()); err != nil {
				return err
			}
			v, err := run(cmd.Context(), args)
			if err != nil {
				return err
			}
			if bv, ok := v.(wire.BatchView); ok {
				return a.show(bv)
			}
			if t, ok := v.(fmt.Stringer); ok {
				if a.output == "text" {
					textln(a.out, t.String())
				} else if err := a.printJSON(v); err != nil {
					return err
				}
				if c, ok := v.(interface{ exit() error }); ok {
					return c.exit()
				}
				return nil
			}
			if a.output == "json" {
				return a.printJSON(v)
			}
			textln(a.out, v.(map[string]string)["message"])
			return nil
		},
	}
}

func (a *app) resumeCmd() *cobra.Command {
	var watch bool
	cmd := a.simple("resume ID", "Start a new run of a finished batch: what did not succeed runs again", 1, "a batch ID",
		func(ctx context.Context, args []string) (any, error) { return a.api.Resume(ctx, args[0]) })
	show := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if err := show(c, args); err != nil || !watch {
			return err
		}
		return a.watch(c.Context(), args[0])
	}
	cmd.Flags().BoolVar(&watch, "watch", false, "watch the new run until it finishes (as bulkrun watch)")
	return cmd
}

func (a *app) cancelCmd() *cobra.Command {
	return a.simple("cancel ID", "Stop the batch's run: items not yet started end cancelled", 1, "a batch ID",
		func(ctx context.Context, args []string) (any, error) { return a.api.Cancel(ctx, args[0]) })
}

func (a *app) pauseCmd() *cobra.Command {
	return a.simple("pause ID", "Pause the batch's run: no item starts until unpause; items running finish, waiting items use no attempt", 1, "a batch ID",
		func(ctx context.Context, args []string) (any, error) { return a.api.Pause(ctx, args[0]) })
}

func (a *app) unpauseCmd() *cobra.Command {
	return a.simple("unpause ID", "End the batch's pause (by hand or on an outage): waiting items start at the pause's next check", 1, "a batch ID",
		func(ctx context.Context, args []string) (any, error) { return a.api.Unpause(ctx, args[0]) })
}

func (a *app) approveCmd() *cobra.Command {
	var approved api.Batch
	cmd := a.simple("approve ID", "Approve a sampled batch: the items outside its sample run (each at its message's next check: within about 14 s in the 10 minutes after the estimate, 64 s to the hour, 5 minutes later on); the sample's items do not run again", 1, "a batch ID",
		func(ctx context.Context, args []string) (any, error) {
			v, err := a.api.Approve(ctx, args[0])
			approved = v.Batch
			return v, err
		})
	show := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if err := show(c, args); err != nil || a.output != "text" {
			return err
		}
		if line := describe.RestStartsText(approved, time.Now()); line != "" {
			textln(a.out, line)
		}
		return nil
	}
	return cmd
}

func (a *app) rejectCmd() *cobra.Command {
	return a.simple("reject ID", "Reject a sampled batch: its run is cancelled; the items outside its sample end cancelled, never run", 1, "a batch ID",
		func(ctx context.Context, args []string) (any, error) { return a.api.Reject(ctx, args[0]) })
}

func (a *app) budgetCmd() *cobra.Command {
	var usd float64
	cmd := a.simple("budget ID --usd N", "Set the batch's budget in US dollars; above the run's spend, a batch paused at its budget resumes at the pause's next check", 1, "a batch ID",
		func(ctx context.Context, args []string) (any, error) {
			if err := api.CheckBudget("--usd", usd); err != nil {
				return nil, &ExitError{Code: ExitUsage, Err: err}
			}
			return a.api.SetBudget(ctx, args[0], usd)
		})
	cmd.Flags().Float64Var(&usd, "usd", 0, "the budget in US dollars, > 0 (required)")
	return cmd
}

func (a *app) forgetCmd() *cobra.Command {
	var yes bool
	cmd := a.simple("forget ID", "Delete everything the batch owns (rows, manifest, outputs, results, report) for good; asks to type the ID unless --yes", 1, "a batch ID",
		func(ctx context.Context, args []string) (any, error) {
			if !yes {
				if err := a.confirm(args[0]); err != nil {
					return nil, err
				}
			}
			if err := a.api.Forget(ctx, args[0]); err != nil {
				return nil, err
			}
			return map[string]string{"batch_id": args[0], "message": "forgotten " + args[0]}, nil
		})
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask: delete at once (scripts)")
	return cmd
}

// confirm asks on stderr to type id on standard input and reads one line:
// the id goes on; anything else, or no input (a script without --yes),
// stops with nothing deleted.
func (a *app) confirm(id string) error {
	textf(a.errw, "forget %s: its rows, manifest, outputs, results and report are deleted for good (a CLI upload under uploads/ stays until the bucket's lifecycle rule removes it). Type the batch id to go on: ", id)
	line, err := bufio.NewReader(a.in).ReadString('\n')
	if strings.TrimSpace(line) == id {
		return nil
	}
	if err != nil && strings.TrimSpace(line) == "" {
		textln(a.errw)
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("forget %s: not confirmed (no input); add --yes to forget without asking", id)}
	}
	return &ExitError{Code: ExitFailure, Err: fmt.Errorf("forget %s: not confirmed (typed %q); nothing was deleted", id, strings.TrimSpace(line))}
}

func (a *app) releaseCmd() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "release ID KEY | release ID --all",
		Short: "Release a quarantined item (or, with --all, every quarantined item of the batch) so that the next run runs it",
		Args: func(cmd *cobra.Command, args []string) error {
			if all {
				return exactArgs(1, "a batch ID (with --all)")(cmd, args)
			}
			return exactArgs(2, "a batch ID and an item KEY (or --all)")(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := a.load(ctx); err != nil {
				return err
			}
			keys := args[1:]
			if all {
				for cursor := ""; ; {
					p, err := a.api.Items(ctx, args[0], api.OutcomeQuarantined, cursor, 1000)
					if err != nil {
						return err
					}
					for _, it := range p.Items {
						keys = append(keys, it.Key)
					}
					if cursor = p.NextCursor; cursor == "" {
						break
					}
				}
			}
			for i, k := range keys {
				if err := a.api.Release(ctx, args[0], k); err != nil {
					return fmt.Errorf("release %s (%d of %d released before it): %w", describe.Escape(k), i, len(keys), err)
				}
			}
			msg := map[string]any{"batch_id": args[0], "released": len(keys), "keys": keys}
			if a.output == "json" {
				return a.printJSON(msg)
			}
			if len(keys) == 1 && !all {
				textf(a.out, "released %s\n", keys[0])
			} else {
				textf(a.out, "released %s of %s; bulkrun resume %s runs them\n", api.Count(len(keys), "quarantined item"), args[0], args[0])
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "release every quarantined item of the batch")
	return cmd
}

// listableOutcome is nil for an outcome bulkrun items lists (as the API's
// GET /batches/{id}/items does), else a usage error naming the ones it
// lists and, for succeeded and cancelled, where those are listed.
func listableOutcome(o api.Outcome, id string) error {
	if o == api.OutcomeFailed || o == api.OutcomeQuarantined || o.Held() || o == api.OutcomeInFlight || o == api.NeedsAttention {
		return nil
	}
	err := fmt.Errorf("--outcome %q: want failed, quarantined, withheld, exhausted, suspended, in_flight or needs_attention", o)
	if o == api.OutcomeSucceeded || o == api.OutcomeCancelled {
		err = fmt.Errorf("%w; %s items are listed in the run's results: bulkrun results %s --outcome %s (--partial while its run goes)", err, o, id, o)
	}
	return &ExitError{Code: ExitUsage, Err: err}
}

// printItems writes a header and one line per item — key, outcome,
// reason, run, revision (of the input it ran: 1 the batch's own, 2… a
// correction), attempts of that run and error — in aligned columns, each
// text escaped (describe.Escape), so that a key or an error holding a
// newline, a tab or a terminal escape stays on its line and in its
// column.
func (a *app) printItems(items []api.Item) {
	w := tabwriter.NewWriter(a.out, 0, 0, 2, ' ', 0)
	textf(w, "KEY\tOUTCOME\tREASON\tRUN\tREVISION\tATTEMPTS\tERROR\n")
	for _, it := range items {
		reason := string(it.Reason)
		if reason == "" {
			reason = "-"
		}
		textf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", it.Key, it.Outcome, reason, it.Run, max(it.Revision, 1), it.RunAttempts, it.Error)
	}
	_ = w.Flush()
	// The next move of each item that has one (failed: correct or
	// resume; withheld: the halt to lift), once per move: a listing of
	// thousands withheld under one halt, or failed, says it once.
	seen := map[string]bool{}
	for _, it := range items {
		if it.Next != "" && !seen[it.Next] {
			seen[it.Next] = true
			textf(a.out, "next move (%s): %s\n", it.Outcome, it.Next)
		}
	}
}

// printReport writes a run's report as text.
func (a *app) printReport(r api.Report) {
	c := r.Census
	textf(a.out, "batch %s run %d: %s (needs_attention %v)\n", r.BatchID, r.Run, r.Status, r.NeedsAttention)
	if rv := r.Revision; rv != nil {
		textf(a.out, "revision %d: this run ran %s; its census and results hold every item of the batch, each line naming its run and revision\n", rv.N, api.Count(rv.Items, "corrected item"))
	}
	textf(a.out, "census: total %d  succeeded %d  failed %d  quarantined %d  cancelled %d\n", c.Total, c.Succeeded, c.Failed, c.Quarantined, c.Cancelled)
	a.printCost("cost (ending attempts)", c.Cost)
	a.printCost("spent by this run", c.RunSpent)
	if r.Stop != nil {
		textf(a.out, "stopped: %s\n", r.Stop.Text())
	}
	textf(a.out, "threshold: %s\n", describe.ThresholdText(r.Threshold, true))
	textf(a.out, "%s\n", describe.VerdictText(r.Threshold, r.Verdict, false))
	if sc := r.Sample; sc != nil {
		textf(a.out, "%s\n", describe.SampleCheckText(*sc))
	}
	if rc := r.Retries; rc != nil {
		textf(a.out, "%s\n", describe.RetriesText(*rc))
	}
	if ps := r.Paused; ps != nil {
		textf(a.out, "%s\n", describe.PausedText(*ps))
	}
	for _, h := range r.Halts {
		textf(a.out, "halt kept on %s since %s: %s; fix its secret, then bulkrun lift %s before a resume\n", h.Subject, h.Since.Format(time.RFC3339), h.Reason, r.BatchID)
	}
	if l := r.Lifted; l != nil {
		textf(a.out, "%s\n", describe.LiftedText(*l))
	}
	textf(a.out, "results: %s\noutputs: %s\n", r.Results.Manifest, r.Outputs)
}

// refusalText is a refusal's code and message; the message names the
// field, line, element and key (api.InputError), and where it does not
// (an older refusal) they are added.
func refusalText(r *api.SubmitRefusal) string {
	if r == nil {
		return "no reason recorded"
	}
	var where []string
	if r.Field != "" && !strings.Contains(r.Message, r.Field) {
		where = append(where, r.Field)
	}
	if r.Line > 0 && !strings.Contains(r.Message, fmt.Sprintf("line %d", r.Line)) {
		where = append(where, fmt.Sprintf("line %d", r.Line))
	}
	if r.Key != "" && !strings.Contains(r.Message, r.Key) {
		where = append(where, fmt.Sprintf("key %q", r.Key))
	}
	if len(where) == 0 {
		return r.Code + ": " + r.Message
	}
	return r.Code + ": " + strings.Join(where, ", ") + ": " + r.Message
}

// printCost prints a census's cost sums after label, one "name amount" pair per name
// in byte order, each exact in plain decimal (no float noise); nothing
// when there are none.
func (a *app) printCost(label string, c pipeline.CostSum) {
	if len(c) == 0 {
		return
	}
	textf(a.out, "%s:", label)
	for _, k := range c.Names() {
		textf(a.out, "  %s %s", k, c.Text(k))
	}
	textln(a.out)
}
