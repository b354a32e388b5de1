// Command item is bulkrun's item function with the built-in pipelines: it
// runs item messages from the items queue and records dead-lettered ones.
// Wiring only (package shared/function). A team's own Go pipelines run in
// its own binary built with function.Start (docs/pipelines.md "Write your own
// pipeline").
package main

import (
	"context"
	"log"

	"github.com/bulkrun/bulkrun/shared/function"
)

func main() {
	if err := function.StartItem(context.Background()); err != nil {
		log.Fatal(err)
	}
}
