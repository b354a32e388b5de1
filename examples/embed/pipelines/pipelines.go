// Package pipelines is the team's one list of Go pipelines: its binary
// (runner/) passes All to function.Start, so bulkrun's submit and item
// functions accept and run them, and its CDK app (main.go) gives their
// names to the construct (RunnerProps.CustomPipelines). A pipeline is
// added here and nowhere else.
package pipelines

import (
	"github.com/bulkrun/bulkrun/shared/pipeline/registered"

	"example.com/orders/enrich"
)

// All are the team's pipelines, beyond bulkrun's built-ins.
var All = []registered.Declaration{
	enrich.Declaration,
}
