package function

import (
	"math"
	"runtime/debug"
	"testing"
)

// TestGOMEMLIMITFromFunctionMemory guards "GOMEMLIMIT derived from each
// function's memory": the limit follows AWS_LAMBDA_FUNCTION_MEMORY_SIZE,
// an operator's GOMEMLIMIT wins, and outside Lambda nothing is set.
func TestGOMEMLIMITFromFunctionMemory(t *testing.T) {
	tests := []struct {
		name      string
		memory    string
		gomemlim  string
		wantLimit int64
	}{
		{name: "submit at 512 MB", memory: "512", wantLimit: 512 << 20 * 9 / 10},
		{name: "finalize at 1024 MB", memory: "1024", wantLimit: 1024 << 20 * 9 / 10},
		{name: "the smallest function", memory: "128", wantLimit: 128 << 20 * 9 / 10},
		{name: "outside Lambda", memory: "", wantLimit: math.MaxInt64},
		{name: "not a number", memory: "lots", wantLimit: math.MaxInt64},
		{name: "GOMEMLIMIT set by the operator", memory: "512", gomemlim: "300MiB", wantLimit: math.MaxInt64},
	}
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			debug.SetMemoryLimit(math.MaxInt64) // as a process starts without GOMEMLIMIT
			t.Setenv(EnvFunctionMemory, tt.memory)
			t.Setenv("GOMEMLIMIT", tt.gomemlim)
			if got := SetMemoryLimit(); got != tt.wantLimit {
				t.Fatalf("SetMemoryLimit() = %d, want %d", got, tt.wantLimit)
			}
			if got := debug.SetMemoryLimit(-1); got != tt.wantLimit {
				t.Fatalf("runtime limit %d, want %d", got, tt.wantLimit)
			}
		})
	}
}
