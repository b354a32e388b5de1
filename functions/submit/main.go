// Command submit is bulkrun's submit function with the built-in
// pipelines: the REST API and S3 uploads under incoming/. Wiring only
// (package shared/function); the logic is in shared/function and the
// engines (shared/submit, shared/worker). A team's own Go pipelines run in its own binary built
// with function.Start (docs/pipelines.md "Write your own pipeline").
package main

import (
	"context"
	"log"

	"github.com/bulkrun/bulkrun/shared/function"
)

func main() {
	if err := function.StartSubmit(context.Background()); err != nil {
		log.Fatal(err)
	}
}
