package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/spf13/cobra"

	"github.com/bulkrun/bulkrun/internal/blob"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
)

// resultsCmd prints or downloads a finished run's results lines (JSONL, one
// api.ResultLine per item), outcome by outcome in TerminalOutcomes order.
func (a *app) resultsCmd() *cobra.Command {
	var (
		outcomes []string
		run      int
		file     string
		partial  bool
		limit    int
		cursor   string
	)
	cmd := &cobra.Command{
		Use:   "results ID [--outcome succeeded,failed,…] [--run N | --partial] [--file PATH]",
		Short: "Print or download a finished run's results lines (JSONL), or with --partial those recorded so far",
		Long: `Print or download a finished run's results lines (JSONL): one JSON object
per item, outcome by outcome (succeeded, failed, quarantined, cancelled).
Without --run, the last finished run (the one 'bulkrun report' shows).
With --file the lines go to PATH, written whole or not at all.

With --partial, the lines the batch's current run has recorded so far,
read from the table page by page without waiting for the run to finish
(GET /batches/{id}/results/partial): the same lines as the run's results
files, only for items whose outcome is recorded (items pending or in
flight are absent), all outcomes in one stream in key byte order. Once
the run has finished they are its results: each outcome's lines in the
order of its file. (The API pages a batch with items per message > 1 in
manifest order; its lines are printed once every page is read, sorted.) A summary goes to stderr; a page that fails names the --cursor to
go on from.`,
		Args: exactArgs(1, "a batch ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			want, err := resultOutcomes(outcomes)
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			if run < 0 {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--run: want a run number ≥ 1, got %d", run)}
			}
			if !partial && (limit != 0 || cursor != "") {
				return &ExitError{Code: ExitUsage, Err: errors.New("--limit and --cursor page the partial results: give --partial too")}
			}
			if partial && run != 0 {
				return &ExitError{Code: ExitUsage, Err: errors.New("--partial reads the current run; --run reads a finished run's files: give one of them")}
			}
			if limit < 0 || limit > api.MaxListLimit {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--limit: want a page of 1 to %d, got %d", api.MaxListLimit, limit)}
			}
			ctx := cmd.Context()
			if err := a.load(ctx); err != nil {
				return err
			}
			if partial {
				if file == "" {
					return a.partialResults(ctx, a.out, args[0], want, cursor, limit)
				}
				return a.writeWhole(file, func(w io.Writer) error { return a.partialResults(ctx, w, args[0], want, cursor, limit) })
			}
			rep, err := a.runReport(ctx, args[0], run)
			if err != nil {
				return err
			}
			if file == "" {
				_, err := a.copyResults(ctx, a.out, rep, want)
				return err
			}
			return a.downloadResults(ctx, file, rep, want)
		},
	}
	cmd.Flags().StringSliceVar(&outcomes, "outcome", nil, "only these outcomes (comma-separated; default all): succeeded, failed, quarantined, cancelled")
	cmd.Flags().IntVar(&run, "run", 0, "the run whose results to read (default the last finished run)")
	cmd.Flags().StringVar(&file, "file", "", "write the lines to this file instead of stdout")
	cmd.Flags().BoolVar(&partial, "partial", false, "the lines the current run has recorded so far, without waiting for it to finish")
	cmd.Flags().IntVar(&limit, "limit", 0, "with --partial: lines per API page, 1–1000 (default the API's, 1000)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "with --partial: go on from a cursor an interrupted stream named")
	return cmd
}

// partialResults writes the results lines the batch's current run has
// recorded so far to w, page after page from cursor, keeping those of the
// wanted outcomes, and a summary to stderr. A page that fails ends the
// stream with an error naming the cursor to go on from.
//
// The API answers a batch with items per message > 1 in manifest order
// (api.ResultOrderManifest): its lines are held and written sorted by key
// once the last page is read, so that the output is in key byte order
// either way (holding the lines in memory: about their size).
func (a *app) partialResults(ctx context.Context, w io.Writer, id string, want []api.Outcome, cursor string, limit int) error {
	var lines, pages int
	var last api.ResultPage
	var held []api.ResultLine // manifest order: sorted at the end
	write := func(l api.ResultLine) error {
		b, err := json.Marshal(l)
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	for {
		p, err := a.api.PartialResults(ctx, id, cursor, limit)
		if err != nil {
			if pages == 0 {
				return err
			}
			return fmt.Errorf("%w; %s were read before it: go on with bulkrun results %s --partial --cursor %s", err, api.Count(lines, "line"), id, cursor)
		}
		pages++
		last = p
		for _, l := range p.Lines {
			if !slices.Contains(want, l.Outcome) {
				continue
			}
			lines++
			if p.Order == api.ResultOrderManifest {
				held = append(held, l)
			} else if err := write(l); err != nil {
				return err
			}
		}
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
	}
	slices.SortFunc(held, func(x, y api.ResultLine) int { return strings.Compare(x.Key, y.Key) })
	for _, l := range held {
		if err := write(l); err != nil {
			return err
		}
	}
	how := ""
	if last.Order == api.ResultOrderManifest {
		how = ", sorted here (the API pages a batch with items per message > 1 in manifest order)"
	}
	textf(a.errw, "batch %s run %d (%s): %s recorded so far, in key order%s, read in %s\n", id, last.Run, last.Status, api.Count(lines, "line"), how, api.Count(pages, "page"))
	return nil
}

// resultOutcomes checks the --outcome values (terminal outcomes only).
func resultOutcomes(names []string) ([]api.Outcome, error) {
	if len(names) == 0 {
		return api.TerminalOutcomes(), nil
	}
	var want []api.Outcome
	for _, n := range names {
		o := api.Outcome(strings.TrimSpace(n))
		if !slices.Contains(api.TerminalOutcomes(), o) {
			return nil, fmt.Errorf("--outcome: %q has no results; want succeeded, failed, quarantined or cancelled", n)
		}
		if !slices.Contains(want, o) {
			want = append(want, o)
		}
	}
	return want, nil
}

// runReport reads the report of run (0: the last finished run, through the
// API; otherwise batches/{id}/runs/{run}/report.json in the stack's bucket).
func (a *app) runReport(ctx context.Context, id string, run int) (api.Report, error) {
	if run == 0 {
		return a.api.Report(ctx, id)
	}
	bucket, err := a.outs.Get(config.OutputBucket)
	if err != nil {
		return api.Report{}, err
	}
	key := api.ReportKey(id, run)
	out, err := blob.NewS3(a.aws).GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	var nk *types.NoSuchKey
	if errors.As(err, &nk) {
		return api.Report{}, fmt.Errorf("batch %s has no report for run %d (not finished, not run, or forgotten); 'bulkrun status %s' shows its runs", id, run, id)
	} else if err != nil {
		return api.Report{}, fmt.Errorf("read s3://%s/%s: %w", bucket, key, err)
	}
	defer out.Body.Close()
	var rep api.Report
	if err := json.NewDecoder(out.Body).Decode(&rep); err != nil {
		return api.Report{}, fmt.Errorf("read s3://%s/%s: %w", bucket, key, err)
	}
	return rep, nil
}

// copyResults writes the results files of the wanted outcomes to w, as
// stored, and returns the bytes written. An outcome without items has no
// file and adds nothing.
func (a *app) copyResults(ctx context.Context, w io.Writer, rep api.Report, want []api.Outcome) (int64, error) {
	s3c := blob.NewS3(a.aws)
	var n int64
	for _, o := range want {
		loc, ok := rep.Results.Files[o]
		if !ok {
			continue
		}
		bucket, key, ok := strings.Cut(strings.TrimPrefix(loc.URI, "s3://"), "/")
		if !ok || !strings.HasPrefix(loc.URI, "s3://") {
			return n, fmt.Errorf("report of %s run %d: results %s: %q is not an s3:// URI", rep.BatchID, rep.Run, o, loc.URI)
		}
		out, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
		if err != nil {
			return n, fmt.Errorf("read %s: %w", loc.URI, err)
		}
		c, err := io.Copy(w, out.Body)
		out.Body.Close()
		n += c
		if err != nil {
			return n, fmt.Errorf("read %s: %w", loc.URI, err)
		}
	}
	return n, nil
}

// downloadResults writes the lines to path through a temporary file in the
// same folder, renamed into place only when every line is written.
func (a *app) downloadResults(ctx context.Context, path string, rep api.Report, want []api.Outcome) error {
	var n int64
	err := a.writeWhole(path, func(w io.Writer) error {
		var err error
		n, err = a.copyResults(ctx, w, rep, want)
		return err
	})
	if err != nil {
		return err
	}
	textf(a.errw, "batch %s run %d: %d bytes of results written to %s\n", rep.BatchID, rep.Run, n, path)
	return nil
}

// writeWhole writes path through a temporary file in the same folder,
// renamed into place only when write returns no error.
func (a *app) writeWhole(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}
