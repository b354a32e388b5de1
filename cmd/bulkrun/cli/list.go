package cli

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bulkrun/bulkrun/cmd/bulkrun/cli/describe"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
)

func (a *app) listCmd() *cobra.Command {
	var (
		statuses  []string
		since     string
		limit     int
		cursor    string
		all       bool
		attention bool
		source    string
	)
	cmd := &cobra.Command{
		Use:   "list [--status S,…] [--since 24h|7d|2026-11-30|RFC3339] [--source FILE|KEY|s3://…] [--limit N] [--all]",
		Short: "List batches, newest first",
		Long: "List batches newest first: id, status, pipeline, items, run, created and finished (UTC), and what needs\n" +
			"a look (attention, a refusal's code, a stop, a pause and by whom, a deletion under way). Expired batches are not listed.\n" +
			"Shows --limit batches (default 20) and the cursor to go on with; --all shows every batch.\n" +
			"--source finds the batches of one file: an s3:// object or prefix (s3://bucket/images/*), a key of the\n" +
			"stack's bucket (incoming/orders.csv: an upload), or a local file or folder `bulkrun submit` uploaded.",
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			req := api.ListBatchesRequest{Cursor: cursor}
			for _, s := range statuses {
				for p := range strings.SplitSeq(s, ",") {
					if p = strings.TrimSpace(p); p != "" {
						if !slices.Contains(api.Statuses(), api.Status(p)) {
							return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--status: %q: want %s", p, strings.Join(api.StatusNames(), ", "))}
						}
						req.Statuses = append(req.Statuses, api.Status(p))
					}
				}
			}
			if since != "" {
				t, err := ParseSince(since, time.Now())
				if err != nil {
					return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--since: %w", err)}
				}
				req.Since = t
			}
			if limit < 1 || limit > api.MaxListLimit {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--limit: %d is not within 1–%d", limit, api.MaxListLimit)}
			}
			if err := a.load(ctx); err != nil {
				return err
			}
			if source != "" {
				uri, err := a.sourceURI(source)
				if err != nil {
					return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--source: %w", err)}
				}
				req.Source = uri
			}
			// A page may be short (the API reads a bounded share of the
			// index per call): follow cursors until limit batches, or
			// every one with --all.
			got := api.BatchPage{Batches: []api.BatchSummary{}}
			var pageErr error // a page that failed after the client's retries
			for {
				req.Limit = limit
				if !all {
					req.Limit = limit - len(got.Batches)
				}
				p, err := a.api.ListBatches(ctx, req)
				if err != nil {
					if len(got.Batches) == 0 {
						return err
					}
					// The pages read so far are shown, and where to go on.
					pageErr = fmt.Errorf("%w; the %s above were listed: go on with --cursor %s", err, api.Count(len(got.Batches), "batch"), req.Cursor)
					got.NextCursor = req.Cursor
					break
				}
				for _, b := range p.Batches {
					if !attention || b.NeedsAttention || b.Status != api.StatusCompleted {
						got.Batches = append(got.Batches, b)
					}
				}
				got.NextCursor = p.NextCursor
				req.Cursor = p.NextCursor
				if p.NextCursor == "" || (!all && len(got.Batches) >= limit) {
					break
				}
			}
			if a.output == "json" {
				if err := a.printJSON(got); err != nil {
					return err
				}
				return pageErr
			}
			printBatches(a, got.Batches)
			if pageErr != nil {
				return pageErr
			}
			if got.NextCursor != "" {
				textf(a.errw, "more: --cursor %s (or --all)\n", got.NextCursor)
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&statuses, "status", nil, "only these statuses (comma-separated): "+strings.Join(api.StatusNames(), ", "))
	cmd.Flags().StringVar(&since, "since", "", "only batches created since: a duration (90m, 24h, 7d), a date (2026-11-30, UTC) or an RFC 3339 time")
	cmd.Flags().IntVar(&limit, "limit", 20, "batches to show (1–1000; with --all, per request)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "continue after a previous listing")
	cmd.Flags().BoolVar(&all, "all", false, "show every batch")
	cmd.Flags().BoolVar(&attention, "needs-attention", false, "only the batches that need a look: every status but completed, and completed ones whose items failed, were quarantined or were left in flight (needs_attention)")
	cmd.Flags().StringVar(&source, "source", "", "only the batches of this source: s3://bucket/key, s3://bucket/prefix/*, a key of the stack's bucket (incoming/orders.csv), or a local file or folder submitted from this machine")
	return cmd
}

// sourceURI is the source a batch names for what --source gives: an
// s3:// URI as it is; a local file or folder, the object or prefix
// `bulkrun submit` uploads it to (its content decides where, so the same
// content finds the batches it started); anything else, a key of the
// stack's bucket ("incoming/orders.csv", a folder's "images/" as its
// prefix).
func (a *app) sourceURI(s string) (string, error) {
	if strings.HasPrefix(s, "s3://") {
		return s, nil
	}
	bucket, err := a.outs.Get(config.OutputBucket)
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(s); err == nil {
		if st.IsDir() {
			_, prefix, err := uploadDirFiles(s)
			if err != nil {
				return "", err
			}
			return "s3://" + bucket + "/" + prefix + "*", nil
		}
		sum, err := hashFile(s)
		if err != nil {
			return "", err
		}
		return "s3://" + bucket + "/" + uploadFileKey(s, sum), nil
	}
	key := strings.TrimPrefix(s, "/")
	if strings.HasSuffix(key, "/") {
		key += "*"
	}
	return "s3://" + bucket + "/" + key, nil
}

// printBatches writes the listing's table: one line per batch, times in
// UTC to the second, "-" for what does not apply.
func printBatches(a *app, bs []api.BatchSummary) {
	w := tabwriter.NewWriter(a.out, 0, 0, 2, ' ', 0)
	textf(w, "BATCH\tSTATUS\tPIPELINE\tITEMS\tRUN\tCREATED\tFINISHED\tNOTE\n")
	for _, b := range bs {
		items, run, finished := "-", "-", "-"
		if b.Status != api.StatusSubmitting && b.Status != api.StatusRefused {
			items, run = strconv.FormatInt(b.ItemCount, 10), strconv.Itoa(b.Run)
		}
		if !b.FinishedAt.IsZero() && b.Status.Finished() {
			finished = describe.Stamp(b.FinishedAt)
		}
		textf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", b.ID, b.Status, b.Pipeline, items, run,
			describe.Stamp(b.CreatedAt), finished, note(b))
	}
	_ = w.Flush()
}

// note is what needs a look in a batch, "" when nothing does.
func note(b api.BatchSummary) string {
	var n []string
	if b.Refusal != nil {
		n = append(n, "refused: "+b.Refusal.Code)
	}
	if b.Stop != "" && b.Status == api.StatusRunning {
		n = append(n, "stopping: "+string(b.Stop))
	}
	if b.NeedsAttention && b.Status.Finished() {
		n = append(n, "needs attention")
	}
	if b.Status.Finished() {
		for _, h := range b.Halts {
			n = append(n, "halt kept on "+h+": fix its secret, then bulkrun lift "+b.ID+" before a resume")
		}
	}
	if p := b.Pause; p != nil && b.Status == api.StatusRunning {
		n = append(n, fmt.Sprintf("paused by %s since %s", p.By.Who(), describe.Stamp(p.Since)))
	}
	if l := b.Live; l != nil {
		live := fmt.Sprintf("in flight %d, waiting %d", l.InFlight, l.RetryWaiting)
		if l.NextRetryAt != nil {
			live += " (next " + describe.Stamp(*l.NextRetryAt) + ")"
		}
		if l.AwaitingTrack > 0 {
			live += fmt.Sprintf(", waiting for a track %d", l.AwaitingTrack)
		}
		if a := l.AdaptivePace; a != nil {
			live += fmt.Sprintf(", paced by %s at %s requests/s", a.Key, describe.LimitText(a.LimitPerSecond))
		}
		if r := l.RateBooked; r != nil && b.Pause == nil {
			live += ", " + describe.BookedText(*r) // paused, the pause is why nothing moves
		}
		if c := l.RateConflict; c != nil {
			live += ", " + describe.RateConflictClause(*c)
		}
		if l.Interrupted > 0 {
			live += fmt.Sprintf(", interrupted %d", l.Interrupted)
		}
		if l.TimedOut > 0 {
			live += fmt.Sprintf(", timed out %d", l.TimedOut)
		}
		if l.NotFannedOut > 0 {
			live += fmt.Sprintf(", not fanned out %d", l.NotFannedOut)
		}
		n = append(n, live)
		if l.NeedsAttention() {
			// The pause is said once, above.
			att := slices.DeleteFunc(slices.Clone(l.Attention), func(a string) bool { return b.Pause != nil && strings.HasPrefix(a, "paused ") })
			if len(att) > 0 {
				n = append(n, "needs attention: "+strings.Join(att, ", "))
			}
		}
	}
	if b.PendingDeletion {
		n = append(n, "pending deletion")
	}
	return strings.Join(n, "; ")
}

var daysRE = regexp.MustCompile(`^([0-9]+)d$`)

// ParseSince reads --since: a duration before now (Go syntax, "90m",
// "24h", or whole days, "7d"), a date ("2026-11-30", midnight UTC) or an
// RFC 3339 time ("2026-11-30T08:00:00+01:00").
func ParseSince(s string, now time.Time) (time.Time, error) {
	if m := daysRE.FindStringSubmatch(s); m != nil {
		n, err := strconv.Atoi(m[1])
		if err != nil {
			return time.Time{}, fmt.Errorf("%q: too many days", s)
		}
		return now.AddDate(0, 0, -n), nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%q: a duration before now is positive", s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q: want a duration (90m, 24h, 7d), a date (2026-11-30) or an RFC 3339 time", s)
}
