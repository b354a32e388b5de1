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

// ReadAdapt implements pace.Rows with one strongly consistent GetItem
// of the key's adaptive row (ADAPT#{key}; no row: the zero Adapt).
func (s Rows) ReadAdapt(ctx context.Context, key string) (pace.Adapt, error) {
	attrs, err := s.get(ctx, adaptKey(key))
	if err != nil {
		return pace.Adapt{}, fmt.Errorf("read adaptive row %s: %w", key, err)
	}
	return readAdaptRow(key, attrs)
}

// CutAdapt implements pace.Rows with one UpdateItem: SET ad_limit,
// ad_step, ad_slow, ad_thresh, ad_base, ad_cut_us, ad_hold_us and
// ad_resumed (a zero time or threshold, or Restarted false, removes its
// attribute) under ad_cut_us = Was.Cut and
// ad_hold_us = Was.Hold (attribute_not_exists for a zero time); ad_booked
// is left as it is. A lost condition returns the stored row (ALL_OLD), answered
// with false.
func (s Rows) CutAdapt(ctx context.Context, c pace.AdaptCut) (pace.Adapt, bool, error) {
	cond := expression.And(adaptIs(layout.AttrAdCutUs, c.Was.Cut), adaptIs(layout.AttrAdHoldUs, c.Was.Hold))
	slow := 0 // stored as a number, as the table's other flags
	if c.Row.Slow {
		slow = 1
	}
	u := expression.Set(expression.Name(layout.AttrAdLimit), expression.Value(c.Row.Limit)).
		Set(expression.Name(layout.AttrAdStep), expression.Value(c.Row.Step)).
		Set(expression.Name(layout.AttrAdSlow), expression.Value(slow)).
		Set(expression.Name(layout.AttrAdBase), expression.Value(c.Row.Base))
	if c.Row.Thresh > 0 {
		u = u.Set(expression.Name(layout.AttrAdThresh), expression.Value(c.Row.Thresh))
	} else {
		u = u.Remove(expression.Name(layout.AttrAdThresh))
	}
	if c.Row.Restarted {
		u = u.Set(expression.Name(layout.AttrAdResumed), expression.Value(1))
	} else {
		u = u.Remove(expression.Name(layout.AttrAdResumed))
	}
	for _, a := range []struct {
		name string
		t    time.Time
	}{{layout.AttrAdCutUs, c.Row.Cut}, {layout.AttrAdHoldUs, c.Row.Hold}} {
		if a.t.IsZero() {
			u = u.Remove(expression.Name(a.name))
		} else {
			u = u.Set(expression.Name(a.name), expression.Value(a.t.UnixMicro()))
		}
	}
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(s.stamp(u, c.Now)).Build()
	if err != nil {
		return pace.Adapt{}, false, err
	}
	attrs, old, err := s.update(ctx, adaptKey(c.Key), expr, types.ReturnValueAllNew)
	if errors.Is(err, api.ErrConflict) {
		a, rerr := readAdaptRow(c.Key, old)
		return a, false, rerr
	}
	if err != nil {
		return pace.Adapt{}, false, fmt.Errorf("cut adaptive row %s: %w", c.Key, err)
	}
	a, err := readAdaptRow(c.Key, attrs)
	return a, err == nil, err
}

// LeaseAdapt implements pace.Rows with one UpdateItem, no read, in one
// of two forms, as LeaseRate's, so that leases taken at once never refuse
// each other while the row is busy:
//
//   - busy (Booked at least At, at most At + Ahead): SET ad_booked =
//     ad_booked + :n under ad_booked >= :at AND ad_booked <= :at + :ahead;
//   - idle (no Booked yet, or below At): SET ad_booked = :at + :n under
//     attribute_not_exists(ad_booked) OR ad_booked < :at.
//
// The row comes back whole (ALL_NEW): the lease's first position is its
// Booked − n. A lost condition returns the stored row (ALL_OLD), which
// tells the other form, or that Booked is past At + Ahead (not granted,
// nothing written). The busy form goes first.
func (s Rows) LeaseAdapt(ctx context.Context, l pace.AdaptLease) (pace.AdaptGrant, error) {
	booked := expression.Name(layout.AttrAdBooked)
	n := float64(l.N)
	busy := true
	for try := 0; ; try++ {
		var cond expression.ConditionBuilder
		var u expression.UpdateBuilder
		if busy {
			cond = expression.And(booked.GreaterThanEqual(expression.Value(l.At)), booked.LessThanEqual(expression.Value(l.At+l.Ahead)))
			u = expression.Set(booked, expression.Plus(booked, expression.Value(n)))
		} else {
			cond = expression.Or(expression.AttributeNotExists(booked), booked.LessThan(expression.Value(l.At)))
			u = expression.Set(booked, expression.Value(l.At+n))
		}
		expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(s.stamp(u, l.Now)).Build()
		if err != nil {
			return pace.AdaptGrant{}, err
		}
		attrs, old, err := s.update(ctx, adaptKey(l.Key), expr, types.ReturnValueAllNew)
		if err == nil {
			r, rerr := readAdaptRow(l.Key, attrs)
			return pace.AdaptGrant{Granted: true, Pos: r.Booked - n, Row: r}, rerr
		}
		if !errors.Is(err, api.ErrConflict) {
			return pace.AdaptGrant{}, fmt.Errorf("lease adaptive row %s: %w", l.Key, err)
		}
		r, rerr := readAdaptRow(l.Key, old)
		_, has := old[layout.AttrAdBooked]
		switch {
		case rerr != nil:
			return pace.AdaptGrant{}, rerr
		case has && r.Booked > l.At+l.Ahead:
			return pace.AdaptGrant{Row: r}, nil
		case try+1 >= rateTries:
			return pace.AdaptGrant{}, fmt.Errorf("lease adaptive row %s: the row changed under %d tries: %w", l.Key, rateTries, ledger.ErrUnavailable)
		}
		busy = has && r.Booked >= l.At
	}
}

func adaptKey(key string) map[string]types.AttributeValue {
	return layout.Key(layout.AdaptPK(key), layout.SKAdapt)
}

// adaptIs is the condition that the time attribute name holds t, at
// microseconds (the zero time: the attribute is absent).
func adaptIs(name string, t time.Time) expression.ConditionBuilder {
	if t.IsZero() {
		return expression.AttributeNotExists(expression.Name(name))
	}
	return expression.Name(name).Equal(expression.Value(t.UnixMicro()))
}

// readAdaptRow reads key's adaptive row's image (nil: no row, the zero
// Adapt).
func readAdaptRow(key string, attrs map[string]types.AttributeValue) (pace.Adapt, error) {
	var a pace.Adapt
	var cut, hold int64
	var slow, resumed int
	for _, f := range []struct {
		name string
		v    any
	}{{layout.AttrAdLimit, &a.Limit}, {layout.AttrAdStep, &a.Step}, {layout.AttrAdSlow, &slow}, {layout.AttrAdThresh, &a.Thresh}, {layout.AttrAdBase, &a.Base},
		{layout.AttrAdCutUs, &cut}, {layout.AttrAdHoldUs, &hold}, {layout.AttrAdBooked, &a.Booked}, {layout.AttrAdResumed, &resumed}} {
		if v, ok := attrs[f.name]; ok {
			if err := attributevalue.Unmarshal(v, f.v); err != nil {
				return pace.Adapt{}, fmt.Errorf("adaptive row %s: read %s: %w", key, f.name, err)
			}
		}
	}
	a.Slow, a.Restarted = slow != 0, resumed != 0
	if cut != 0 {
		a.Cut = time.UnixMicro(cut).UTC()
	}
	if hold != 0 {
		a.Hold = time.UnixMicro(hold).UTC()
	}
	return a, nil
}
