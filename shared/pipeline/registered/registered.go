// Package registered is the one list of pipelines a bulkrun deployment
// runs. The item function builds its registry from it (Build), submit
// checks pipeline names and options against the same registry, and the
// stack (infra/) learns the names from it (Names) for submit's
// BULKRUN_PIPELINES. Adding a pipeline is one edit: append a Declaration
// to Custom below and redeploy (`make deploy`).
package registered

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/bulkrun/bulkrun/examples/enrich"
	"github.com/bulkrun/bulkrun/shared/egress"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/pipeline/builtin"
	"github.com/bulkrun/bulkrun/shared/pipeline/lambdafn"
	"github.com/bulkrun/bulkrun/shared/pipeline/thumbnail"
)

// Deps is what a pipeline's constructor may use, built once per process by
// the function that calls Build.
type Deps struct {
	// Source reads S3 objects an item names, limited to the stack's sources
	// (batch.GuardedSource in the item function). Required.
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

// Custom is the list of pipelines beyond the built-ins (builtin.Names).
// THIS IS THE ONE PLACE TO REGISTER A PIPELINE: add a Declaration here; the
// item binary runs it, submit accepts its name (and checks its options when
// it implements pipeline.OptionsValidator), and the stack names it in
// BULKRUN_PIPELINES. See README "Write your own pipeline".
var Custom = []Declaration{
	{Name: enrich.Name, New: func(Deps) (pipeline.Pipeline, error) { return enrich.New(), nil }},
}

// Names returns the names of every registered pipeline, built-in and
// Custom, in byte order. The slice is new on every call. It does not check
// the names; Check and Build do.
func Names() []string {
	names := builtin.Names()
	for _, d := range Custom {
		names = append(names, d.Name)
	}
	slices.Sort(names)
	return names
}

// Check reports the first bad Custom declaration: an invalid or duplicate
// name (built-ins included) or a nil New. The stack's synth runs it, so a
// bad declaration fails `make deploy` before anything is deployed.
func Check() error {
	seen := map[string]bool{}
	for _, n := range builtin.Names() {
		seen[n] = true
	}
	for i, d := range Custom {
		switch {
		case !pipeline.ValidName(d.Name):
			return fmt.Errorf("registered: Custom[%d]: %q is not a valid pipeline name (see pipeline.ValidName)", i, d.Name)
		case seen[d.Name]:
			return fmt.Errorf("registered: Custom[%d]: %q is declared twice", i, d.Name)
		case d.New == nil:
			return fmt.Errorf("registered: Custom[%d] %q: nil New", i, d.Name)
		}
		seen[d.Name] = true
	}
	return nil
}

// Build returns a registry holding the built-in pipelines and every Custom
// one, each built once from deps. It fails on a bad declaration (Check), a
// nil deps.Source or a constructor's error, naming the pipeline.
func Build(deps Deps) (*pipeline.Registry, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	r := &pipeline.Registry{}
	if err := builtin.Register(r, deps.Source, deps.Client, deps.WebhookAllow, lambdafn.New(deps.Lambda, deps.LambdaFunctions)); err != nil {
		return nil, err
	}
	for _, d := range Custom {
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
