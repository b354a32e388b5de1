package pacer

import (
	"sync"
	"time"

	"github.com/bulkrun/bulkrun/shared/pace"
)

// How late the queue hands back a unit sent to wait for its rate lease.
// A unit whose lease starts past pace.LeaseSleep is sent again to come
// back a lead before the start (SQS delays are whole seconds) and sleeps
// the rest; one that comes back later than the start + pace.LeaseGrace
// finds its lease stale and leases again, at the back of the key's
// schedule. With a fixed lead of pace.LeaseSleep/2, a queue that hands
// messages over late — an item function at its concurrency behind
// another batch's backlog, an event source slow to poll, a loaded
// emulator — made every unit of a booked-ahead key stale on every
// return: a loop of sends with almost no calls (on the emulator, a
// 1,000-item batch at 50 a second sent its messages again 64,350 times
// in 15 minutes). So the process learns, per rate key, how late its
// units come back (Arrived: each unit says the lead it was sent with,
// ledger.Message.RateLeadMs) and sends them that much earlier (Lead).
// The estimate tracks a high share of the samples (a sample above it
// moves it a quarter of the way, one below a twelfth: their 0.75
// expectile, toward), because a late return costs the key a call and the unit
// its place, an early one one more send. It is the process's, lost with
// it, and at most MaxLag.

// MaxLag bounds a key's estimated lateness: 2 minutes (a queue later
// than that is not waited for by asking earlier; its units lease again).
const MaxLag = 2 * time.Minute

var lags struct {
	sync.Mutex
	by map[string]time.Duration
}

// Lag is how late this process has seen units of key come back for their
// rate leases (0: not late, or none seen).
func Lag(key string) time.Duration {
	lags.Lock()
	defer lags.Unlock()
	return lags.by[key]
}

// Lead is how long before its rate lease's start a unit of key waiting
// on the queue asks to come back: pace.LeaseSleep/2 and key's Lag.
func Lead(key string) time.Duration { return pace.LeaseSleep/2 + Lag(key) }

// Arrived records a unit of key that came back late after the time it
// asked for (its lease's start less the lead it was sent with; negative:
// before it).
func Arrived(key string, late time.Duration) {
	lags.Lock()
	defer lags.Unlock()
	if lags.by == nil {
		lags.by = map[string]time.Duration{}
	}
	lag := toward(lags.by[key], late, MaxLag)
	if lag < time.Millisecond {
		delete(lags.by, key)
		return
	}
	lags.by[key] = lag
}

// The take's time. A unit woken at its rate lease's start still takes
// its unit (a conditional write, its inputs read) before its first call:
// on a slow store longer than pace.LeaseGrace, and every call of a
// booked key was then late, given back and leased again (on the
// emulator under load, 20,740 such sends for one 1,000-item batch). So
// the process learns how long it takes from the lease's sleep to the
// first call (Took, the same high share of the samples as Lag) and
// wakes that much before the start (TakeLead); the call still waits for
// its place (Lease.WaitCall). At most MaxTakeLead.

// MaxTakeLead bounds TakeLead: pace.LeaseSleep/2, so that a unit woken
// early still sleeps within pace.LeaseSleep in all.
const MaxTakeLead = pace.LeaseSleep / 2

var takes struct {
	sync.Mutex
	est time.Duration
}

// TakeLead is how long before its rate lease's start a unit is woken to
// take its unit: the 0.75 expectile of the times Took saw (toward), at
// most MaxTakeLead.
func TakeLead() time.Duration {
	takes.Lock()
	defer takes.Unlock()
	return takes.est
}

// Took records a unit that took d from its lease's sleep to its first
// call (less the time that call slept for its place).
func Took(d time.Duration) {
	takes.Lock()
	defer takes.Unlock()
	takes.est = toward(takes.est, d, MaxTakeLead)
}

// toward moves the estimate est toward the sample d: a quarter of the
// way when d is above it, a twelfth when below, kept within [0, most].
// It settles where the samples' distance above it is a third of their
// distance below (E[(d−est)⁺]/4 = E[(est−d)⁺]/12): the samples' 0.75
// expectile. Unlike a quantile it moves further for a sample further
// off; for skewed samples it lies well below their 75th percentile
// (about the 55th for exponential ones), so a few very late returns
// move a key's lead less than a percentile would.
func toward(est, d, most time.Duration) time.Duration {
	if d > est {
		est += (d - est) / 4
	} else {
		est -= (est - d) / 12
	}
	return min(max(est, 0), most)
}

// forgetLags drops every key's lateness and the take's time (Forget).
func forgetLags() {
	lags.Lock()
	lags.by = nil
	lags.Unlock()
	takes.Lock()
	takes.est = 0
	takes.Unlock()
}
