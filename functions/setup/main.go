// Command setup serves the stack's custom resources: the account's API
// Gateway CloudWatch role where none is set, and the table's deletion
// protection once the stack's first create got that far. Wiring only
// (package internal/setup).
package main

import (
	"context"
	"log"

	"github.com/bulkrun/bulkrun/internal/setup"
)

func main() {
	if err := setup.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
}
