package function

import (
	"os"
	"runtime/debug"
	"strconv"
)

// Memory limit of the Go runtime in a function. Lambda gives every
// function its configured memory in AWS_LAMBDA_FUNCTION_MEMORY_SIZE (MB,
// i.e. MiB as Lambda allocates it: AWS Lambda developer guide, "Defined
// runtime environment variables",
// https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html),
// and ends an invocation that goes past it. Without a limit the Go
// collector lets the heap grow to twice what is live (GOGC=100) whatever
// the function's memory; with one it collects harder as the heap nears it
// (runtime/debug.SetMemoryLimit, "A Guide to the Go Garbage Collector",
// https://go.dev/doc/gc-guide#Memory_limit).
const (
	// EnvFunctionMemory names the variable Lambda sets to the function's
	// memory in MB.
	EnvFunctionMemory = "AWS_LAMBDA_FUNCTION_MEMORY_SIZE"
	// MemoryLimitPercent is the share of the function's memory given to
	// the Go runtime (heap, stacks, runtime structures); the rest is left
	// to what the runtime does not count: the mapped executable, the
	// Lambda runtime client's buffers, C allocations.
	MemoryLimitPercent = 90
)

// MemoryLimit returns the Go runtime's soft memory limit in bytes for a
// function of mb MB: MemoryLimitPercent of it. It returns 0 (no limit) for
// mb ≤ 0.
func MemoryLimit(mb int64) int64 {
	if mb <= 0 {
		return 0
	}
	return mb << 20 * MemoryLimitPercent / 100
}

// SetMemoryLimit sets the Go runtime's soft memory limit
// (debug.SetMemoryLimit) from the function's memory, EnvFunctionMemory,
// unless GOMEMLIMIT is set (the operator's choice wins) or the variable is
// absent or not a number (outside Lambda). It returns the limit now in
// force (math.MaxInt64: none). Build calls it, so every function built on
// this package, bulkrun's own and an embedder's, gets it without any
// setting in the stack.
func SetMemoryLimit() int64 {
	if os.Getenv("GOMEMLIMIT") == "" {
		mb, err := strconv.ParseInt(os.Getenv(EnvFunctionMemory), 10, 64)
		if limit := MemoryLimit(mb); err == nil && limit > 0 {
			debug.SetMemoryLimit(limit)
		}
	}
	return debug.SetMemoryLimit(-1)
}
