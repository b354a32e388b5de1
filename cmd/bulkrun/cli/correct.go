package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bulkrun/bulkrun/cmd/bulkrun/cli/describe"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/wire"
)

// correctCmd is `bulkrun correct ID FILE|s3://bucket/key`: corrected
// inputs for failed, quarantined or cancelled items of a finished batch,
// run as a new revision (docs/cli.md "Correcting items").
func (a *app) correctCmd() *cobra.Command {
	var (
		keyField, format, delim string
		watch                   bool
	)
	cmd := &cobra.Command{
		Use:   "correct ID FILE|s3://bucket/key [--key-field F] [--watch]",
		Short: "Run failed, quarantined or cancelled items of a finished batch again with corrected inputs (a new revision)",
		Long: `Give corrected inputs for items of a finished batch that failed, were quarantined or were cancelled:
a local file (read and checked first, then uploaded) or an S3 object, in any format submit reads, each
item with the key of the item it corrects. The corrections become a new revision of the batch's manifest
and a run over exactly those items starts; its results hold every item of the batch once, each line
naming the run and revision that produced it. A key the batch does not have, or an item that succeeded,
refuses the whole correction, naming it. The same corrections again answer the same revision and start
nothing, so the command is safe to repeat.`,
		Args: exactArgs(2, "a batch ID and one FILE or s3:// URI"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id, src := args[0], args[1]
			if err := checkReadFlags(format, delim); err != nil {
				return err
			}
			if err := a.load(ctx); err != nil {
				return err
			}
			req := api.CorrectRequest{KeyField: keyField, Source: api.SourceSpec{Object: src, Format: format, CSVDelimiter: delim}}
			if !strings.HasPrefix(src, "s3://") {
				if st, err := os.Stat(src); err != nil {
					return &ExitError{Code: ExitUsage, Err: err}
				} else if st.IsDir() {
					return &ExitError{Code: ExitUsage, Err: fmt.Errorf("%s is a folder: corrections are one file of items with their keys", src)}
				}
				// The key field the API will use: the batch's unless named.
				kf := keyField
				if kf == "" {
					v, err := a.api.Status(ctx, id)
					if err != nil {
						return err
					}
					if kf = v.KeyField; kf == "" {
						return &ExitError{Code: ExitUsage, Err: fmt.Errorf("batch %s has positional keys (item-0000000000, …): name the field or column holding each corrected item's key with --key-field", id)}
					}
				}
				if _, err := LocalManifest(src, format, kf, delim); err != nil {
					return &ExitError{Code: ExitFailure, Err: fmt.Errorf("%s: %w (nothing was uploaded)", src, err)}
				}
				uri, err := a.upload(ctx, src)
				if err != nil {
					return err
				}
				req.Source.Object = uri
			}
			v, err := a.api.Correct(ctx, id, req)
			if err != nil {
				return err
			}
			return a.corrected(ctx, v, watch)
		},
	}
	f := cmd.Flags()
	f.StringVar(&keyField, "key-field", "", "field (JSON) or column (CSV) holding each corrected item's key (default: the batch's key field)")
	f.StringVar(&format, "format", "", "format of the corrections: jsonl, json or csv (default from the extension)")
	f.StringVar(&delim, "csv-delimiter", "", "CSV delimiter: one character, or comma, semicolon, tab, pipe (default: from a sep= first line or the header)")
	f.BoolVar(&watch, "watch", false, "watch the correction run until it finishes (as bulkrun watch)")
	return cmd
}

// corrected prints what a correction did — the batch id on stdout (or
// the answer as JSON with -o json), describe.CorrectionText on stderr — and, with
// watch, follows its run as bulkrun watch does.
func (a *app) corrected(ctx context.Context, v wire.CorrectionView, watch bool) error {
	if a.output == "json" {
		if err := a.printJSON(v); err != nil {
			return err
		}
	} else {
		textln(a.out, v.Batch.ID)
	}
	textln(a.errw, describe.CorrectionText(v))
	if !watch {
		return nil
	}
	return a.watch(ctx, v.Batch.ID)
}
