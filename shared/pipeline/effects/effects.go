// Package effects lets a pipeline stage DynamoDB writes during an item's
// attempt. bulkrun commits them in the same DynamoDB transaction as the
// item's succeeded outcome, under the attempt's fence:
//
//   - the attempt succeeds and still holds the item: the outcome and every
//     staged write are applied together, once;
//   - the attempt fails, is interrupted, crashes before recording, or lost
//     the item to a later attempt: nothing staged is applied;
//   - the item's message is delivered again after its outcome: the item is
//     answered from its row, the pipeline does not run, nothing is staged.
//
// So a retried item never applies its writes twice, which a pipeline
// writing to DynamoDB directly cannot promise (a crash between its write
// and the outcome makes the next attempt write again).
//
// A pipeline stages with Put, Delete, Update, ConditionCheck or Stage,
// passing the context its Run was given:
//
//	err := effects.Put(ctx, "orders", map[string]types.AttributeValue{
//		"pk": &types.AttributeValueMemberS{Value: req.Key},
//		"status": &types.AttributeValueMemberS{Value: "settled"},
//	})
//
// Limits (each refused with a *pipeline.PermanentError naming the write,
// so a pipeline that returns the error fails the item rather than retry it):
//
//   - only tables the stack declares (the item function's
//     BULKRUN_EFFECT_TABLES; the construct's effect tables) — any other
//     table name is refused, and so is a context without staging (the
//     pipeline runs outside bulkrun, or no table is declared);
//   - at most MaxWrites writes per attempt: DynamoDB's TransactWriteItems
//     takes at most 100 actions, and bulkrun's outcome write is one of them
//     (Amazon DynamoDB developer guide, "Amazon DynamoDB Transactions: How
//     it works", https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html);
//   - DynamoDB's own rules for the transaction are checked when it is
//     committed: 4 MB in all, no two actions on the same item. A commit
//     DynamoDB refuses (ValidationException) fails the item permanently
//     with DynamoDB's message; a staged condition that does not hold makes
//     the attempt transient (the item is retried and its pipeline stages
//     again from what it reads then).
//
// Cost: transactional writes cost two write units per started KB of each
// item (DynamoDB developer guide, "Capacity and throughput for
// transactions"); an item that stages nothing is recorded with a plain
// UpdateItem, as before.
//
// This package is part of bulkrun's Go API: docs/packages.md says what
// that promises.
package effects

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// MaxWrites is the most writes one attempt may stage: 100 actions per
// DynamoDB transaction, minus bulkrun's outcome write.
const MaxWrites = 99

// ErrNoStaging is returned (wrapped as permanent) when ctx carries no
// stager: the pipeline runs outside bulkrun's worker, or the stack
// declares no effect table.
var ErrNoStaging = errors.New("effects: this context stages no writes (no effect table is declared for the item function, or the pipeline runs outside bulkrun)")

// Stager collects one attempt's staged writes. It is safe for concurrent
// use by the pipeline's goroutines. The worker makes one per attempt
// (New), hands the pipeline Context(ctx), and takes the writes with Seal
// once Run has returned; a write staged after that is refused.
type Stager struct {
	tables map[string]bool
	mu     sync.Mutex
	writes Writes
	sealed bool
}

// New returns a stager that accepts writes on the given tables (names, as
// the TransactWriteItems request names them).
func New(tables []string) *Stager {
	s := &Stager{tables: make(map[string]bool, len(tables))}
	for _, t := range tables {
		if t != "" {
			s.tables[t] = true
		}
	}
	return s
}

type ctxKey struct{}

// Context returns ctx carrying s, for the pipeline's Run.
func (s *Stager) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, ctxKey{}, s)
}

// Seal ends staging and returns the staged writes in the order they were
// staged (nil when none). Later Stage calls are refused.
func (s *Stager) Seal() Writes {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sealed = true
	return s.writes
}

// Len is the number of writes staged so far.
func (s *Stager) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.writes)
}

// Stage adds one write to the attempt carried by ctx. w must set exactly
// one of Put, Update, Delete and ConditionCheck, on a declared table. Its
// condition, if any, is checked when the outcome is committed. The error,
// when not nil, is a *pipeline.PermanentError naming the write (its index
// in staging order, from 0) and what is wrong.
func Stage(ctx context.Context, w types.TransactWriteItem) error {
	s, _ := ctx.Value(ctxKey{}).(*Stager)
	if s == nil {
		return pipeline.Permanent(ErrNoStaging)
	}
	return s.stage(w)
}

func (s *Stager) stage(w types.TransactWriteItem) error {
	table, err := tableOf(w)
	s.mu.Lock()
	defer s.mu.Unlock()
	i := len(s.writes)
	switch {
	case err != nil:
		return pipeline.Permanent(fmt.Errorf("effects: write %d: %w", i, err))
	case s.sealed:
		return pipeline.Permanent(fmt.Errorf("effects: write %d on table %q: the attempt has ended (Run returned); stage before returning", i, table))
	case !s.tables[table]:
		return pipeline.Permanent(fmt.Errorf("effects: write %d: table %q is not declared for staged writes (declared: %v)", i, table, s.declared()))
	case i >= MaxWrites:
		return pipeline.Permanent(fmt.Errorf("effects: write %d on table %q: an attempt stages at most %d writes (DynamoDB's 100 actions per transaction, one of them bulkrun's outcome)", i, table, MaxWrites))
	}
	s.writes = append(s.writes, detach(w, table))
	return nil
}

// detach returns w with its action copied and its table name set to a
// string of its own: a pipeline that reuses or changes its struct after
// staging (another table, bulkrun's own by ARN) cannot change which table
// the staged write acts on. Items, keys and values are shared, not copied.
func detach(w types.TransactWriteItem, table string) types.TransactWriteItem {
	switch {
	case w.Put != nil:
		a := *w.Put
		a.TableName = aws.String(table)
		return types.TransactWriteItem{Put: &a}
	case w.Update != nil:
		a := *w.Update
		a.TableName = aws.String(table)
		return types.TransactWriteItem{Update: &a}
	case w.Delete != nil:
		a := *w.Delete
		a.TableName = aws.String(table)
		return types.TransactWriteItem{Delete: &a}
	default:
		a := *w.ConditionCheck
		a.TableName = aws.String(table)
		return types.TransactWriteItem{ConditionCheck: &a}
	}
}

func (s *Stager) declared() []string {
	out := make([]string, 0, len(s.tables))
	for t := range s.tables {
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil
	}
	slices.Sort(out)
	return out
}

// tableOf checks that w sets exactly one action with a table and a key (or
// item) and returns its table.
func tableOf(w types.TransactWriteItem) (string, error) {
	var tables []*string
	var hasKey []bool
	if w.Put != nil {
		tables, hasKey = append(tables, w.Put.TableName), append(hasKey, len(w.Put.Item) > 0)
	}
	if w.Update != nil {
		tables, hasKey = append(tables, w.Update.TableName), append(hasKey, len(w.Update.Key) > 0 && aws.ToString(w.Update.UpdateExpression) != "")
	}
	if w.Delete != nil {
		tables, hasKey = append(tables, w.Delete.TableName), append(hasKey, len(w.Delete.Key) > 0)
	}
	if w.ConditionCheck != nil {
		tables, hasKey = append(tables, w.ConditionCheck.TableName), append(hasKey, len(w.ConditionCheck.Key) > 0 && aws.ToString(w.ConditionCheck.ConditionExpression) != "")
	}
	if len(tables) != 1 {
		return "", fmt.Errorf("sets %d of Put, Update, Delete and ConditionCheck; set exactly one", len(tables))
	}
	t := aws.ToString(tables[0])
	if t == "" {
		return "", errors.New("names no table")
	}
	if !hasKey[0] {
		return t, fmt.Errorf("on table %q has no item/key (or no update or condition expression)", t)
	}
	return t, nil
}

// Put stages a PutItem of item on table.
func Put(ctx context.Context, table string, item map[string]types.AttributeValue) error {
	return Stage(ctx, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(table), Item: item}})
}

// Delete stages a DeleteItem of key on table.
func Delete(ctx context.Context, table string, key map[string]types.AttributeValue) error {
	return Stage(ctx, types.TransactWriteItem{Delete: &types.Delete{TableName: aws.String(table), Key: key}})
}

// Update stages an UpdateItem of key on table. u carries the update
// expression, and optionally a condition, names and values, as
// TransactWriteItems takes them (build them with the SDK's
// feature/dynamodb/expression package); its TableName and Key are set
// from table and key.
func Update(ctx context.Context, table string, key map[string]types.AttributeValue, u types.Update) error {
	u.TableName, u.Key = aws.String(table), key
	return Stage(ctx, types.TransactWriteItem{Update: &u})
}

// ConditionCheck stages a condition on key of table that must hold for
// the outcome and every staged write to be committed. c carries the
// condition expression, names and values; its TableName and Key are set
// from table and key.
func ConditionCheck(ctx context.Context, table string, key map[string]types.AttributeValue, c types.ConditionCheck) error {
	c.TableName, c.Key = aws.String(table), key
	return Stage(ctx, types.TransactWriteItem{ConditionCheck: &c})
}

// Writes is what one attempt staged, in staging order: the
// ledger.StagedEffects that internal/dynamo commits with the outcome.
type Writes []types.TransactWriteItem

// Len is the number of staged writes.
func (w Writes) Len() int { return len(w) }

// TransactWriteItems returns the staged writes as DynamoDB transaction
// items, in staging order: what the DynamoDB adapter (internal/dynamo)
// commits with the item's outcome.
func (w Writes) TransactWriteItems() []types.TransactWriteItem { return w }

// Staging returns the worker's staging hook (worker.Worker.Staging) for
// the given declared tables: one Stager per attempt, sealed when Run
// returns. With no table declared it returns nil, and staging is refused
// with ErrNoStaging.
func Staging(tables []string) func(ctx context.Context) (context.Context, func() ledger.StagedEffects) {
	if len(New(tables).tables) == 0 {
		return nil
	}
	return func(ctx context.Context) (context.Context, func() ledger.StagedEffects) {
		s := New(tables)
		return s.Context(ctx), func() ledger.StagedEffects {
			if w := s.Seal(); len(w) > 0 {
				return w
			}
			return nil
		}
	}
}
