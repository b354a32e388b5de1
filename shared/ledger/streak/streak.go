// Package streak classes a transient failure for the pause on an outage
// (docs/design/items.md, "Pause on an outage"): the failure's class
// (Class), and its slot on a counter lane (Slot), where a lane counts the
// attempts in a row that failed with one class (ledger.PauseAfter).
package streak

import (
	"context"
	"errors"
	"hash/fnv"
	"net"
	"syscall"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Class names the kind of a transient failure, for the pause's
// "same class" test: an error's own FailureClass() method (the webhook's
// StatusError: "http 502"), a throttling ("throttled http 503"), a
// connection refused or reset, a timeout, a DNS failure, or "transient".
// At most 64 bytes.
func Class(err error) string {
	var own interface{ FailureClass() string }
	var dns *net.DNSError
	var nerr net.Error
	switch t, throttled := pipeline.ThrottleOf(err); {
	case errors.As(err, &own):
		return pipeline.CutText(own.FailureClass(), 64)
	case throttled:
		return pipeline.CutText("throttled "+t.Service+" "+t.Code, 64)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &dns):
		return "dns"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &nerr) && nerr.Timeout():
		return "timeout"
	}
	return "transient"
}

// Slot is the counter lane's slot of failure class c: FNV-1a(c)
// mod 8. Two classes may share a slot; their failures then count as one
// class's.
func Slot(c string) int {
	h := fnv.New32a()
	h.Write([]byte(c))
	return int(h.Sum32() % Slots)
}

// Slots is how many failure-class slots a counter lane keeps.
const Slots = 8

// BySlot is failures, counted by class, counted by their classes' slots
// (a lane write's streaks); nil for none.
func BySlot(failures map[string]int64) map[int]int64 {
	if len(failures) == 0 {
		return nil
	}
	s := map[int]int64{}
	for c, n := range failures {
		s[Slot(c)] += n
	}
	return s
}
