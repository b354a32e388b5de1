// Command bulkrun is the command-line client of a deployed bulkrun stack:
// submit a local file or an S3 URI, watch a batch with a progress bar,
// read its status, items and report, resume, cancel, release and forget.
//
// It finds the stack's API and bucket from the CloudFormation outputs of
// the stack named by --stack (default "bulkrun", or $BULKRUN_STACK),
// honours AWS profiles (--profile, $AWS_PROFILE) and AWS_ENDPOINT_URL (an
// emulator), and signs every API call with SigV4.
//
// Exit codes: 0 success; 1 an error; 2 a usage error; 3 a watched (or
// --wait'ed) batch finished with failures, quarantined items,
// threshold_exceeded or cancelled.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/bulkrun/bulkrun/cmd/bulkrun/cli"
	"github.com/bulkrun/bulkrun/cmd/bulkrun/cli/describe"
)

func main() {
	err := cli.New(os.Stdout, os.Stderr).Execute()
	var ec *cli.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ec):
		if ec.Err != nil {
			fmt.Fprintln(os.Stderr, "bulkrun:", describe.Escape(ec.Err.Error()))
		}
		os.Exit(ec.Code)
	case strings.HasPrefix(err.Error(), "unknown command") || strings.HasPrefix(err.Error(), "required flag"):
		fmt.Fprintln(os.Stderr, "bulkrun:", describe.Escape(err.Error()))
		os.Exit(cli.ExitUsage)
	default:
		fmt.Fprintln(os.Stderr, "bulkrun:", describe.Escape(err.Error()))
		os.Exit(cli.ExitFailure)
	}
}
