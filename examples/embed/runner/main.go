// Command runner is the team's build of bulkrun's submit and item
// functions: bulkrun's built-in pipelines plus the team's own
// (pipelines.All). The stack deploys it as both (RunnerProps.PipelineCode)
// and tells it which it is; `runner pipelines` prints the names of the
// team's pipelines. Build it for Lambda (provided.al2023) with
//
//	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -tags lambda.norpc -o build/runner/bootstrap ./runner
//
// (GOARCH of the host for the local emulator). In this repository `make
// functions` builds it into build/pipeline-code/, with the names it
// declares beside it, and `make deploy` deploys it.
package main

import (
	"context"
	"log"

	"github.com/bulkrun/bulkrun/shared/function"

	"example.com/orders/pipelines"
)

func main() {
	if err := function.Start(context.Background(), pipelines.All...); err != nil {
		log.Fatal(err)
	}
}
