package dynamo

import "github.com/bulkrun/bulkrun/shared/worker"

// The adapter answers the item engine's eventually consistent batch reads
// (a compile-time check, kept in a test so that the adapter imports no
// engine: .golangci.yml, adapters-no-engine).
var _ worker.EventualBatchReader = (*Store)(nil)
