package credential

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// FreshEvery is the least time between two reads of a subject's secrets
// past the cache by one process for items woken by a lift whose batch
// row carries no lift time (written by a release before it did; Lifts):
// 30 s. A lift wakes its items in pages, each stamped with its own time,
// for up to 20 s (control's WakeTime); one read per page would be
// processes × pages reads of a parameter store that takes about 40 a
// second (SSM GetParameter's standard throughput, "AWS Systems Manager
// endpoints and quotas"). With the batch's lift time every page shares
// one time, and a second lift, however soon, is read again.
const FreshEvery = 30 * time.Second

// FreshReadTime bounds one read past the cache for lifted items, which
// holds the process's other lifted units: 3 s, where a read takes tens
// of milliseconds.
const FreshReadTime = 3 * time.Second

// maxLiftSubjects bounds Lifts: a subject forgotten is read past the
// cache once more at its next lifted item.
const maxLiftSubjects = 256

// Lifts is when a process last read each halt subject's secrets past the
// cache for an item woken by a lift, at most maxLiftSubjects of them. A
// lift says the secret was fixed, and a value cached before it (for the
// cache's life, minutes) is the refused one, which would be sent once
// more and refused before the new one. The zero Lifts is ready; safe for
// concurrent use.
type Lifts struct {
	mu sync.Mutex
	at map[string]time.Time
}

// Resolve is Resolve for a unit of a batch whose halt on subject a
// caller lifted at lifted (the batch row's lift time; zero: none known),
// or with an item withheld under subject and woken by a lift at woken:
// past the cache (within FreshReadTime) when this process has not read
// subject so since lifted — or, with no lift time, since woken nor in the
// last FreshEvery; else from the cache, which that read refreshed. One
// read at a time per process: the units that wait for it take the value
// it left (they may have resolved theirs from the cache before it).
func (l *Lifts) Resolve(ctx context.Context, s Secrets, subject string, lifted, woken, now time.Time, headers map[string]string, options json.RawMessage) (map[string]string, json.RawMessage, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, read := l.at[subject]
	fresh := !read || at.Before(woken) && now.Sub(at) >= FreshEvery
	if !lifted.IsZero() {
		fresh = !read || at.Before(lifted)
	}
	rctx, cancel := context.WithTimeout(ctx, FreshReadTime)
	defer cancel()
	h, o, err := Resolve(rctx, s, headers, options, fresh)
	if err != nil {
		return nil, nil, err
	}
	if fresh {
		if l.at == nil || len(l.at) >= maxLiftSubjects {
			l.at = map[string]time.Time{}
		}
		l.at[subject] = now
	}
	return h, o, nil
}
