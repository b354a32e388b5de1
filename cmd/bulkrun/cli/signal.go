package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bulkrun/bulkrun/shared/api"
)

// signalPayload is --payload as sent: the JSON given, or the contents of
// the file named after "@"; nil when empty. Errors name the flag.
func signalPayload(v string) (json.RawMessage, error) {
	if path, ok := strings.CutPrefix(v, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--payload: %w", err)
		}
		v = string(b)
	}
	v = strings.TrimSpace(v)
	switch {
	case v == "":
		return nil, nil
	case !json.Valid([]byte(v)):
		return nil, fmt.Errorf("--payload: not valid JSON")
	case len(v) > api.MaxSignalPayloadBytes:
		return nil, fmt.Errorf("--payload: %d bytes, more than %d", len(v), api.MaxSignalPayloadBytes)
	}
	return json.RawMessage(v), nil
}

func (a *app) signalCmd() *cobra.Command {
	var payload, token string
	cmd := &cobra.Command{
		Use:   "signal ID KEY [--payload JSON|@FILE] [--token TOKEN]",
		Short: "Resume the suspended item KEY: it runs once more, its next attempt given the payload",
		Args:  rangeArgs(2, 2, "a batch ID and the suspended item's KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			body, err := signalPayload(payload)
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			if err := a.load(ctx); err != nil {
				return err
			}
			res, err := a.api.Signal(ctx, args[0], args[1], token, body)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(res)
			}
			if res.Woken {
				textf(a.out, "batch %s: item %s signalled; it runs once more\n", args[0], res.Key)
			} else {
				textf(a.out, "batch %s: item %s was woken already (by %s); its next attempt is on its way\n", args[0], res.Key, string(res.By))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&payload, "payload", "", "JSON handed to the item's next attempt (at most 4 KiB), or @FILE to read it from a file")
	cmd.Flags().StringVar(&token, "token", "", "the token the item's suspension returned, when it returned one")
	return cmd
}
