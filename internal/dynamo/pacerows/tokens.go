package pacerows

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pace"
)

// LeaseTokens implements pace.Rows as LeaseRate does, on the key's
// token row (TOKENS#{key}): one UpdateItem, no read, in one of two forms,
// so that leases taken at once while the row is busy never refuse each
// other:
//
//   - busy (the row's Next within the horizon): SET next_us = next_us +
//     :spacing under next_us > :now AND next_us <= :now + horizon;
//   - idle (no row, a row with no Next yet — only settled —, or Next
//     passed): SET next_us = :now + :spacing under
//     attribute_not_exists(next_us) OR next_us <= :now; the start is now.
//
// The row comes back whole (ALL_NEW): the start is its Next − spacing,
// and its tok_used and tok_calls are the usage answered. A lost
// condition returns the stored row (ReturnValuesOnConditionCheck-
// Failure ALL_OLD), which tells the right form, or that Next is past the
// horizon (not granted, nothing written, the stored usage answered). The
// busy form goes first unless the caller says it saw the row idle.
func (s Rows) LeaseTokens(ctx context.Context, l pace.TokenLease) (pace.TokenGrant, error) {
	now := l.Now.UnixMicro()
	spacing, horizon := l.Spacing.Microseconds(), l.Horizon.Microseconds()
	key := layout.Key(layout.TokensPK(l.Key), layout.SKTokens)
	next := expression.Name(layout.AttrNextUs)
	busy := !l.Idle
	for try := 0; ; try++ {
		var cond expression.ConditionBuilder
		var u expression.UpdateBuilder
		if busy {
			cond = expression.And(next.GreaterThan(expression.Value(now)), next.LessThanEqual(expression.Value(now+horizon)))
			u = expression.Set(next, expression.Plus(next, expression.Value(spacing)))
		} else {
			cond = expression.Or(expression.AttributeNotExists(next), next.LessThanEqual(expression.Value(now)))
			u = expression.Set(next, expression.Value(now+spacing))
		}
		expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(s.stamp(u, l.Now)).Build()
		if err != nil {
			return pace.TokenGrant{}, err
		}
		attrs, old, err := s.update(ctx, key, expr, types.ReturnValueAllNew)
		if err == nil {
			r, rerr := readTokenRow(attrs)
			if rerr != nil {
				return pace.TokenGrant{}, fmt.Errorf("lease tokens %s: %w", l.Key, rerr)
			}
			g := pace.RateGrant{Granted: true, Start: time.UnixMicro(r.next - spacing).UTC(), Next: time.UnixMicro(r.next).UTC()}
			return pace.TokenGrant{RateGrant: g, Used: r.used, Calls: r.calls, Drift: r.drift()}, nil
		}
		if !errors.Is(err, api.ErrConflict) {
			return pace.TokenGrant{}, fmt.Errorf("lease tokens %s: %w", l.Key, err)
		}
		r, rerr := readTokenRow(old)
		if rerr != nil {
			return pace.TokenGrant{}, fmt.Errorf("lease tokens %s: %w", l.Key, rerr)
		}
		switch {
		case r.next > now+horizon:
			return pace.TokenGrant{RateGrant: pace.RateGrant{Next: r.nextTime()}, Used: r.used, Calls: r.calls, Drift: r.drift()}, nil
		case try+1 >= rateTries:
			return pace.TokenGrant{}, fmt.Errorf("lease tokens %s: the row changed under %d tries: %w", l.Key, rateTries, ledger.ErrUnavailable)
		}
		busy = r.next > now
	}
}

// SettleTokens implements pace.Rows with one UpdateItem in the common
// case, no read: ADD tok_used :used, tok_calls :calls (the row made if
// absent), the row TTL renewed, and Next moved by the settle's Delta in
// one of LeaseTokens' two forms:
//
//   - Delta > 0, busy (Next ahead of now): SET next_us = next_us +
//     :delta under next_us > :now; idle (no row, no Next, or Next
//     passed): SET next_us = :now + :delta under
//     attribute_not_exists(next_us) OR next_us <= :now. The busy form
//     goes first; a lost condition returns the stored row (ALL_OLD),
//     which tells the other.
//   - Delta < 0: the busy form alone (Next may end up before now); its
//     lost condition, an idle row that banks nothing, writes the ADDs
//     under no condition, Next left as it is.
//   - Delta = 0: the ADDs, under no condition.
//
// A form that moves next_us also ADDs its delta to drift_us.
//
// Granted always; the answer is the row after the write (ALL_NEW): its
// Next (zero when it has none) and usage.
func (s Rows) SettleTokens(ctx context.Context, st pace.TokenSettle) (pace.TokenGrant, error) {
	now, delta := st.Now.UnixMicro(), st.Delta.Microseconds()
	key := layout.Key(layout.TokensPK(st.Key), layout.SKTokens)
	next := expression.Name(layout.AttrNextUs)
	const (
		add = iota // the ADDs alone
		busy
		idle
	)
	form := add
	if delta != 0 {
		form = busy
	}
	for try := 0; ; try++ {
		u := expression.Add(expression.Name(layout.AttrTokUsed), expression.Value(st.Used)).
			Add(expression.Name(layout.AttrTokCalls), expression.Value(st.Calls))
		b := expression.NewBuilder()
		switch form {
		case busy:
			u = u.Set(next, expression.Plus(next, expression.Value(delta))).Add(expression.Name(layout.AttrDriftUs), expression.Value(delta))
			b = b.WithCondition(next.GreaterThan(expression.Value(now)))
		case idle:
			u = u.Set(next, expression.Value(now+delta)).Add(expression.Name(layout.AttrDriftUs), expression.Value(delta))
			b = b.WithCondition(expression.Or(expression.AttributeNotExists(next), next.LessThanEqual(expression.Value(now))))
		}
		expr, err := b.WithUpdate(s.stamp(u, st.Now)).Build()
		if err != nil {
			return pace.TokenGrant{}, err
		}
		attrs, old, err := s.update(ctx, key, expr, types.ReturnValueAllNew)
		if err == nil {
			r, rerr := readTokenRow(attrs)
			if rerr != nil {
				return pace.TokenGrant{}, fmt.Errorf("settle tokens %s: %w", st.Key, rerr)
			}
			return pace.TokenGrant{RateGrant: pace.RateGrant{Granted: true, Next: r.nextTime()}, Used: r.used, Calls: r.calls, Drift: r.drift()}, nil
		}
		if !errors.Is(err, api.ErrConflict) {
			return pace.TokenGrant{}, fmt.Errorf("settle tokens %s: %w", st.Key, err)
		}
		if try+1 >= rateTries {
			return pace.TokenGrant{}, fmt.Errorf("settle tokens %s: the row changed under %d tries: %w", st.Key, rateTries, ledger.ErrUnavailable)
		}
		r, rerr := readTokenRow(old)
		if rerr != nil {
			return pace.TokenGrant{}, fmt.Errorf("settle tokens %s: %w", st.Key, rerr)
		}
		switch {
		case delta < 0:
			form = add
		case r.next > now:
			form = busy
		default:
			form = idle
		}
	}
}

// tokenRow is what a token row's image tells: its Next (epoch
// microseconds, hasNext false when it has none) and the usage settled on
// it, absent attributes read as 0.
type tokenRow struct {
	next    int64
	hasNext bool
	used    float64
	calls   int64
	driftUs int64
}

// drift is the row's drift_us as a duration.
func (r tokenRow) drift() time.Duration { return time.Duration(r.driftUs) * time.Microsecond }

// nextTime is the row's Next, the zero time when it has none.
func (r tokenRow) nextTime() time.Time {
	if !r.hasNext {
		return time.Time{}
	}
	return time.UnixMicro(r.next).UTC()
}

// readTokenRow reads a token row's image (nil: no row).
func readTokenRow(attrs map[string]types.AttributeValue) (tokenRow, error) {
	var r tokenRow
	_, r.hasNext = attrs[layout.AttrNextUs]
	for _, a := range []struct {
		name string
		v    any
	}{{layout.AttrNextUs, &r.next}, {layout.AttrTokUsed, &r.used}, {layout.AttrTokCalls, &r.calls}, {layout.AttrDriftUs, &r.driftUs}} {
		if v, ok := attrs[a.name]; ok {
			if err := attributevalue.Unmarshal(v, a.v); err != nil {
				return tokenRow{}, fmt.Errorf("read %s: %w", a.name, err)
			}
		}
	}
	return r, nil
}

// ReadTokens implements pace.Rows with one strongly consistent
// GetItem of the key's token row (no row: the zero grant).
func (s Rows) ReadTokens(ctx context.Context, key string) (pace.TokenGrant, error) {
	attrs, err := s.get(ctx, layout.Key(layout.TokensPK(key), layout.SKTokens))
	if err != nil {
		return pace.TokenGrant{}, fmt.Errorf("read tokens %s: %w", key, err)
	}
	r, err := readTokenRow(attrs)
	if err != nil {
		return pace.TokenGrant{}, fmt.Errorf("read tokens %s: %w", key, err)
	}
	return pace.TokenGrant{RateGrant: pace.RateGrant{Next: r.nextTime()}, Used: r.used, Calls: r.calls, Drift: r.drift()}, nil
}
