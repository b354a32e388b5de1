package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bulkrun/bulkrun/cmd/bulkrun/doctor"
)

// doctorOptions are doctor's flags beyond the plan's.
type doctorOptions struct {
	preflight     bool               // only the checks of the account about to receive the stack
	template      string             // the synthesized template of the stack about to be deployed
	target        string             // TargetAWS or "emulator"
	skipPreflight bool               // report, never refuse
	given         func(*doctor.Plan) // applies the plan's flags given over a deployed stack's
}

func (a *app) doctorCmd() *cobra.Command {
	var plan doctor.Plan
	var opts doctorOptions
	var reserved string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check a deployed (or about-to-be-deployed) stack against its account and say what to fix",
		Long: `doctor checks the stack --stack (deployed, or about to be: then --template,
or the flags, say what it will ask for) against the account it runs in:

  target               where it is: an AWS account and region, or the local
                       emulator (AWS_ENDPOINT_URL set, account 000000000000),
                       where findings only an AWS account can fix (its API
                       Gateway role, its Lambda quota) are informational
  concurrency          the account's Lambda concurrency quota and what is left
                       unreserved (GetAccountSettings) against what the item
                       function's two event sources and the reservations need
  api-gateway-logging  the account's API Gateway CloudWatch role, which the
                       stage's logs need (the stack sets one where none is)
  bucket               the bucket exists and is the stack's; a fixed name is free
  source-buckets       each SourceBuckets bucket is in the stack's Region, and
                       its default encryption key is one the functions may use
  alarm-topic          the alarm topic is in the stack's Region, and CloudWatch
                       and EventBridge may publish to it (its key and policy)
  alarms               the stack's alarms in ALARM
  queues               depth of the items, dead-letter, parking and failed-start
                       queues, and the items queue's oldest message
  batches              running batches that do not move

--preflight runs the first five only, for the stack about to be deployed
(--template: the synthesized template; make deploy runs it before every
deploy). On the emulator (--target emulator, the default when
AWS_ENDPOINT_URL is set) the account's own findings (concurrency,
api-gateway-logging) are informational.

Each line says ok, info, warn or fix, and what to do. Exit status 1 when
any says fix, unless --skip-preflight (the findings are printed, the
deploy goes ahead).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if plan.Reserved, err = parseReserved(reserved); err != nil {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--reserved-concurrency: %w", err)}
			}
			if opts.target != TargetAWS && opts.target != targetEmulator {
				return &ExitError{Code: ExitUsage, Err: fmt.Errorf("--target %q: want %s or %s", opts.target, TargetAWS, targetEmulator)}
			}
			if opts.template != "" {
				if err := doctor.ReadTemplate(opts.template, &plan); err != nil {
					return &ExitError{Code: ExitUsage, Err: err}
				}
			}
			changed := cmd.Flags().Changed
			given := plan // the flags' values, applied over a deployed stack's own
			opts.given = func(p *doctor.Plan) {
				if changed("items-max-concurrency") {
					p.ItemsMaxConcurrency = given.ItemsMaxConcurrency
				}
				if changed("items-minimum-pollers") {
					p.ItemsMinimumPollers = given.ItemsMinimumPollers
				}
				if changed("items-maximum-pollers") {
					p.ItemsMaximumPollers = given.ItemsMaximumPollers
				}
				if changed("reserved-concurrency") {
					p.Reserved = given.Reserved
				}
			}
			checks, err := a.doctor(cmd.Context(), plan, opts)
			if err != nil {
				return err
			}
			return a.printChecks(checks, opts)
		},
	}
	cmd.Flags().IntVar(&plan.ItemsMaxConcurrency, "items-max-concurrency", 100, "about to deploy: the stack's ItemsMaxConcurrency (a deployed stack's is read from it)")
	cmd.Flags().IntVar(&plan.ItemsMinimumPollers, "items-minimum-pollers", 0, "about to deploy: the stack's ItemsMinimumPollers, 0 for the standard mode (a deployed stack's is read from it)")
	cmd.Flags().IntVar(&plan.ItemsMaximumPollers, "items-maximum-pollers", 0, "about to deploy: the stack's ItemsMaximumPollers, 0 for the standard mode (a deployed stack's is read from it)")
	cmd.Flags().StringVar(&reserved, "reserved-concurrency", "", `about to deploy: the stack's ReservedConcurrency, "item=200,submit=5"`)
	cmd.Flags().StringVar(&plan.BucketName, "bucket-name", "", "about to deploy: a fixed BucketName to check is free")
	cmd.Flags().BoolVar(&plan.APIGatewayAccount, "api-gateway-account", false, "about to deploy: the stack replaces the account's API Gateway CloudWatch role whatever it is (ApiGatewayAccount)")
	cmd.Flags().BoolVar(&opts.preflight, "preflight", false, "only the checks of the account about to receive the stack (concurrency, api-gateway-logging, bucket, source-buckets, alarm-topic)")
	cmd.Flags().StringVar(&opts.template, "template", "", "about to deploy: the stack's synthesized template (cdk.out/{stack}.template.json), which says what it will ask")
	defTarget := TargetAWS
	if os.Getenv("AWS_ENDPOINT_URL") != "" {
		defTarget = targetEmulator
	}
	cmd.Flags().StringVar(&opts.target, "target", defTarget, "aws or emulator: on the emulator the account's own findings are informational")
	cmd.Flags().BoolVar(&opts.skipPreflight, "skip-preflight", false, "print the findings and exit 0 whatever they are (make deploy SKIP_PREFLIGHT=1)")
	return cmd
}

// Targets doctor knows (the stack's RunnerProps.Target).
const (
	TargetAWS      = "aws"
	targetEmulator = "emulator"
)

// printChecks prints the checks (text or JSON) and returns the exit: 1
// when one says fix, unless skipped.
func (a *app) printChecks(checks []doctor.Check, opts doctorOptions) error {
	fixes := 0
	for _, c := range checks {
		if c.Status == doctor.Fix {
			fixes++
		}
	}
	if a.output == "json" {
		if err := a.printJSON(checks); err != nil {
			return err
		}
	} else {
		for _, c := range checks {
			textf(a.out, "%-4s  %-20s %s\n", c.Status, c.Check, c.Detail)
			if c.Fix != "" {
				textf(a.out, "      %-20s → %s\n", "", c.Fix)
			}
		}
		switch {
		case opts.preflight && fixes > 0 && opts.skipPreflight:
			textf(a.out, "preflight: %d to fix, skipped (--skip-preflight): the deploy goes ahead\n", fixes)
		case opts.preflight && fixes > 0:
			textf(a.out, "preflight: %d to fix before this deploy (or deploy anyway: make deploy SKIP_PREFLIGHT=1)\n", fixes)
		case opts.preflight:
			textf(a.out, "preflight: nothing to fix\n")
		}
	}
	if fixes > 0 && !opts.skipPreflight {
		return &ExitError{Code: ExitFailure}
	}
	return nil
}

func parseReserved(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 1 {
			return nil, fmt.Errorf("%q: want function=N", kv)
		}
		out[k] = n
	}
	return out, nil
}

// doctor runs the checks (the preflight's only, with opts.preflight)
// against the stack --stack, deployed or not (doctor.Run).
func (a *app) doctor(ctx context.Context, plan doctor.Plan, opts doctorOptions) ([]doctor.Check, error) {
	c, err := sdkConfig(ctx, a.profile, a.region)
	if err != nil {
		return nil, err
	}
	outs, err := a.findStack(ctx, c)
	var setup *SetupError
	deployed := err == nil
	if !deployed && !(errors.As(err, &setup) && setup.Missing == "stack") {
		return nil, err
	}
	st := doctor.Stack{AWS: c, Name: a.stack, Outputs: outs, Deployed: deployed}
	return doctor.Run(ctx, st, plan, doctor.Options{Preflight: opts.preflight, Emulator: opts.target == targetEmulator, Given: opts.given}), nil
}
