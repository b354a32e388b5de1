// Package registered builds the registry of pipelines a bulkrun binary
// runs: the built-ins (package builtin) plus the Declarations a binary is
// given. bulkrun's own submit and item functions declare none; a team adds
// its Go pipelines by building those two functions from its own module
// with its Declarations (package shared/function, docs/pipelines.md "Write your own
// pipeline"), and the stack names them in RunnerProps.CustomPipelines.
// The item function runs what Build returns, and submit checks pipeline
// names and options against the same registry.
//
// This package is part of bulkrun's Go API: docs/packages.md says what
// that promises.
package registered

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/bulkrun/bulkrun/internal/egress"
	"github.com/bulkrun/bulkrun/internal/pipeline/builtin"
	"github.com/bulkrun/bulkrun/internal/pipeline/lambdafn"
	"github.com/bulkrun/bulkrun/internal/pipeline/thumbnail"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Deps is what a pipeline's constructor may use, built once per process by
// the function that calls Build.
type Deps struct {
	// Source reads S3 objects an item names, limited to the stack's sources
	// (source.GuardedSource in the item function). Required.
	Source thumbnail.Source
	// Client is the HTTP client for outbound calls; nil means the webhook
	// pipeline's default transport, checked against WebhookAllow.
	Client *http.Client
	// WebhookAllow is the egress allow-list (config.EnvWebhookAllow); nil
	// allows no non-public destination.
	WebhookAllow *egress.Policy
	// Lambda invokes the lambda pipeline's functions; nil fails its items
	// (submit, which only checks options, needs none).
	Lambda lambdafn.Invoker
	// LambdaFunctions is the lambda pipeline's allow-list
	// (config.EnvLambdaFunctions); none refuses every batch.
	LambdaFunctions []string
}

// Declaration names one pipeline and builds it.
type Declaration struct {
	// Name is the pipeline's name as given in a batch's "pipeline" field
	// (pipeline.ValidName: lower-case letters, digits, '-' and '_', 1–64
	// bytes, starting with a letter).
	Name string
	// New builds the pipeline once per process. An error stops the
	// function's start (it is a deployment mistake, not an item's).
	New func(Deps) (pipeline.Pipeline, error)
}

// Names returns the names of the built-in pipelines (builtin.Names) and
// of custom, in byte order. The slice is new on every call. It does not
// check the names; Check and Build do.
func Names(custom ...Declaration) []string {
	names := builtin.Names()
	for _, d := range custom {
		names = append(names, d.Name)
	}
	slices.Sort(names)
	return names
}

// Declared returns the names of custom, in order: what a stack that
// deploys a binary declaring custom gives RunnerProps.CustomPipelines.
func Declared(custom ...Declaration) []string {
	names := make([]string, len(custom))
	for i, d := range custom {
		names[i] = d.Name
	}
	return names
}

// Check reports the first bad declaration of custom: an invalid or
// duplicate name (built-ins included) or a nil New. Build runs it, so a
// bad declaration stops the function's start.
func Check(custom ...Declaration) error {
	seen := map[string]bool{}
	for _, n := range builtin.Names() {
		seen[n] = true
	}
	for i, d := range custom {
		switch {
		case !pipeline.ValidName(d.Name):
			return fmt.Errorf("registered: declaration %d: %q is not a valid pipeline name (see pipeline.ValidName)", i, d.Name)
		case seen[d.Name]:
			return fmt.Errorf("registered: declaration %d: %q is declared twice or is a built-in", i, d.Name)
		case d.New == nil:
			return fmt.Errorf("registered: declaration %d %q: nil New", i, d.Name)
		}
		seen[d.Name] = true
	}
	return nil
}

// CheckListed reports the names of listed (the stack's
// config.EnvPipelines) that the registry of custom does not hold: the
// stack names a pipeline this binary cannot run, because the binary
// deployed as the submit and item functions is not the one declaring it.
// The error names the missing pipelines, what the binary has, and where a
// pipeline is declared. Empty listed is fine (every registered name is
// accepted).
func CheckListed(listed []string, custom ...Declaration) error {
	have := Names(custom...)
	var missing []string
	for _, n := range listed {
		if !slices.Contains(have, n) {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("registered: %s names %q, which this binary does not register (it has %s): deploy the binary whose main passes their Declarations to function.Start as RunnerProps.PipelineCode",
		config.EnvPipelines, missing, strings.Join(have, ", "))
}

// Build returns a registry holding the built-in pipelines and those of
// custom, each built once from deps. It fails on a bad declaration
// (Check), a nil deps.Source or a constructor's error, naming the
// pipeline.
func Build(deps Deps, custom ...Declaration) (*pipeline.Registry, error) {
	if err := Check(custom...); err != nil {
		return nil, err
	}
	r := &pipeline.Registry{}
	if err := builtin.Register(r, deps.Source, deps.Client, deps.WebhookAllow, lambdafn.New(deps.Lambda, deps.LambdaFunctions)); err != nil {
		return nil, err
	}
	for _, d := range custom {
		p, err := d.New(deps)
		if err != nil {
			return nil, fmt.Errorf("registered: build %q: %w", d.Name, err)
		}
		if err := r.Register(d.Name, p); err != nil {
			return nil, fmt.Errorf("registered: %w", err)
		}
	}
	return r, nil
}
