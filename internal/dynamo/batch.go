package dynamo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/internal/dynamo/layout"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// batchUpdate is a transaction operation updating the batch row with expr.
func (s *Store) batchUpdate(id string, expr expression.Expression) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName: &s.table, Key: layout.Key(layout.BatchPK(id), layout.SKBatch),
		ConditionExpression: expr.Condition(), UpdateExpression: expr.Update(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	}}
}

// putRunning is a transaction operation putting the running marker of run.
func (s *Store) putRunning(id string, run int) types.TransactWriteItem {
	return types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: map[string]types.AttributeValue{
		config.AttrPK:  &types.AttributeValueMemberS{Value: layout.PKRunning},
		config.AttrSK:  &types.AttributeValueMemberS{Value: id},
		layout.AttrRun: &types.AttributeValueMemberN{Value: strconv.Itoa(run)},
	}}}
}

// CreateBatch puts the batch row and its running marker in one transaction,
// only if no row has the batch's id; otherwise it returns the stored batch
// and api.ErrBatchExists.
func (s *Store) CreateBatch(ctx context.Context, b ledger.Batch) (ledger.Batch, error) {
	row, err := layout.ToBatchRow(b)
	if err != nil {
		return ledger.Batch{}, err
	}
	av, err := attributevalue.MarshalMap(row)
	if err != nil {
		return ledger.Batch{}, fmt.Errorf("create batch %s: %w", b.ID, err)
	}
	cond, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name(config.AttrPK))).Build()
	if err != nil {
		return ledger.Batch{}, err
	}
	old, err := s.transact(ctx, types.TransactWriteItem{Put: &types.Put{
		TableName: &s.table, Item: av,
		ConditionExpression:                 cond.Condition(),
		ExpressionAttributeNames:            cond.Names(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}, s.putRunning(b.ID, b.Run))
	switch {
	case err == nil:
		return b, nil
	case !errors.Is(err, api.ErrConflict):
		return ledger.Batch{}, fmt.Errorf("create batch %s: %w", b.ID, err)
	}
	if len(old) > 0 {
		var r layout.BatchRow
		if uerr := attributevalue.UnmarshalMap(old, &r); uerr == nil {
			if stored, uerr := layout.FromBatchRow(r); uerr == nil {
				return stored, api.ErrBatchExists
			}
		}
	}
	stored, gerr := s.GetBatch(ctx, b.ID)
	if gerr != nil {
		return ledger.Batch{}, fmt.Errorf("create batch %s: exists, but: %w", b.ID, gerr)
	}
	return stored, api.ErrBatchExists
}

// GetBatch reads the batch row with a strongly consistent read.
func (s *Store) GetBatch(ctx context.Context, id string) (ledger.Batch, error) {
	return s.getBatch(ctx, id, true)
}

// GetBatchEventually reads the batch row with an eventually consistent
// read (half the read units of GetBatch); it may miss a write of the last
// second (see worker.EventualBatchReader).
func (s *Store) GetBatchEventually(ctx context.Context, id string) (ledger.Batch, error) {
	return s.getBatch(ctx, id, false)
}

func (s *Store) getBatch(ctx context.Context, id string, consistent bool) (ledger.Batch, error) {
	c, cancel := s.ctx(ctx)
	defer cancel()
	out, err := s.db.GetItem(c, &dynamodb.GetItemInput{TableName: &s.table, Key: layout.Key(layout.BatchPK(id), layout.SKBatch), ConsistentRead: aws.Bool(consistent)})
	if err != nil {
		return ledger.Batch{}, fmt.Errorf("get batch %s: %w", id, err)
	}
	if len(out.Item) == 0 {
		return ledger.Batch{}, fmt.Errorf("batch %s: %w", id, api.ErrNotFound)
	}
	var r layout.BatchRow
	if err := attributevalue.UnmarshalMap(out.Item, &r); err != nil {
		return ledger.Batch{}, fmt.Errorf("get batch %s: %w", id, err)
	}
	return layout.FromBatchRow(r)
}

// submitting is the condition status = submitting.
func submitting() expression.ConditionBuilder {
	return expression.Name(layout.AttrStatus).Equal(expression.Value(string(api.StatusSubmitting)))
}

// BeginSubmit adds 1 to submit_attempts and sets submit_deadline_ms under
// the condition status = submitting (see ledger.Store).
func (s *Store) BeginSubmit(ctx context.Context, id string, deadline time.Time) (ledger.Batch, error) {
	expr, err := expression.NewBuilder().WithCondition(submitting()).
		WithUpdate(expression.Add(expression.Name(layout.AttrSubmitAttempts), expression.Value(1)).
			Set(expression.Name(layout.AttrSubmitDeadlineMs), expression.Value(deadline.UnixMilli()))).Build()
	if err != nil {
		return ledger.Batch{}, err
	}
	attrs, _, err := s.updateRow(ctx, layout.Key(layout.BatchPK(id), layout.SKBatch), expr, types.ReturnValueAllNew)
	if err != nil {
		return ledger.Batch{}, fmt.Errorf("begin submit %s: %w", id, err)
	}
	var r layout.BatchRow
	if err := attributevalue.UnmarshalMap(attrs, &r); err != nil {
		return ledger.Batch{}, fmt.Errorf("begin submit %s: %w", id, err)
	}
	return layout.FromBatchRow(r)
}

// Freeze writes the manifest fields and status running under the
// condition status = submitting (see ledger.Store).
func (s *Store) Freeze(ctx context.Context, b ledger.Batch) error {
	upd := expression.Set(expression.Name(layout.AttrStatus), expression.Value(string(api.StatusRunning)))
	if b.Checked != nil {
		c, err := json.Marshal(b.Checked)
		if err != nil {
			return err
		}
		upd = upd.Set(expression.Name(layout.AttrChecked), expression.Value(string(c)))
	}
	if b.CSV != nil {
		c, err := json.Marshal(b.CSV)
		if err != nil {
			return err
		}
		upd = upd.Set(expression.Name(layout.AttrCSV), expression.Value(string(c)))
	}
	expr, err := expression.NewBuilder().WithCondition(submitting()).
		WithUpdate(upd.
			Set(expression.Name(layout.AttrManifestDigest), expression.Value(b.Digest)).
			Set(expression.Name(layout.AttrManifestKey), expression.Value(b.ManifestKey)).
			Set(expression.Name(layout.AttrManifestBytes), expression.Value(b.ManifestBytes)).
			Set(expression.Name(layout.AttrItemCount), expression.Value(b.ItemCount)).
			Set(expression.Name(layout.AttrListShards), expression.Value(b.ListShards)).
			Set(expression.Name(layout.AttrCounterShards), expression.Value(b.CounterShards)).
			Set(expression.Name(layout.AttrCounterLanes), expression.Value(b.CounterLanes)).
			Set(expression.Name(layout.AttrChunks), expression.Value(b.Chunks)).
			Set(expression.Name(layout.AttrFanRows), expression.Value(b.FanRows)).
			Set(expression.Name(layout.AttrFannedOut), expression.Value(false)).
			Set(expression.Name(layout.AttrRunStartedAtMs), expression.Value(layout.Ms(b.RunStartedAt)))).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, layout.Key(layout.BatchPK(b.ID), layout.SKBatch), expr, types.ReturnValueNone); err != nil {
		return fmt.Errorf("freeze %s: %w", b.ID, err)
	}
	return nil
}

// Refuse moves a submitting batch to refused, deletes its running marker
// and puts its retention marker, in one transaction (see ledger.Store).
func (s *Store) Refuse(ctx context.Context, id string, r api.SubmitRefusal, now, expiresAt time.Time) error {
	rf, err := json.Marshal(r)
	if err != nil {
		return err
	}
	expr, err := expression.NewBuilder().WithCondition(submitting()).
		WithUpdate(expression.Set(expression.Name(layout.AttrStatus), expression.Value(string(api.StatusRefused))).
			Set(expression.Name(layout.AttrRefusal), expression.Value(string(rf))).
			Set(expression.Name(layout.AttrFinishedAtMs), expression.Value(now.UnixMilli())).
			Set(expression.Name(layout.AttrExpiresAtMs), expression.Value(expiresAt.UnixMilli()))).Build()
	if err != nil {
		return err
	}
	_, err = s.transact(ctx, s.batchUpdate(id, expr),
		types.TransactWriteItem{Delete: &types.Delete{TableName: &s.table, Key: layout.Key(layout.PKRunning, id)}},
		types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: map[string]types.AttributeValue{
			config.AttrPK:      &types.AttributeValueMemberS{Value: layout.PKRetention},
			config.AttrSK:      &types.AttributeValueMemberS{Value: layout.RetentionSK(expiresAt, id)},
			layout.AttrBatchID: &types.AttributeValueMemberS{Value: id},
			layout.AttrFormat:  layout.FormatValue(),
		}}})
	if err != nil {
		return fmt.Errorf("refuse %s: %w", id, err)
	}
	return nil
}

// SetFannedOut sets fanned_out on the batch row if it is at run.
func (s *Store) SetFannedOut(ctx context.Context, id string, run int) error {
	expr, err := expression.NewBuilder().
		WithCondition(expression.Name(layout.AttrRun).Equal(expression.Value(run))).
		WithUpdate(expression.Set(expression.Name(layout.AttrFannedOut), expression.Value(true))).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, layout.Key(layout.BatchPK(id), layout.SKBatch), expr, types.ReturnValueNone); err != nil {
		return fmt.Errorf("set fanned out %s run %d: %w", id, run, err)
	}
	return nil
}

// FinishRun moves the batch to f.Status under the condition
// run = :run AND status = running (setting the batch row's TTL to
// f.RowsExpireAt), deletes the running marker and writes the retention
// marker and the run's PUBLISH marker, in one transaction.
func (s *Store) FinishRun(ctx context.Context, id string, run int, f ledger.Finish) error {
	census, err := json.Marshal(f.Census)
	if err != nil {
		return err
	}
	u := expression.Set(expression.Name(layout.AttrStatus), expression.Value(string(f.Status))).
		Set(expression.Name(layout.AttrReportKey), expression.Value(f.ReportKey)).
		Set(expression.Name(layout.AttrCensus), expression.Value(string(census))).
		Set(expression.Name(layout.AttrNeedsAttention), expression.Value(f.NeedsAttention || f.Census.NeedsAttention())).
		Set(expression.Name(layout.AttrFinishedAtMs), expression.Value(f.FinishedAt.UnixMilli())).
		Set(expression.Name(layout.AttrExpiresAtMs), expression.Value(f.ExpiresAt.UnixMilli()))
	if !f.RowsExpireAt.IsZero() {
		u = u.Set(expression.Name(config.AttrExpiresAt), expression.Value(f.RowsExpireAt.Unix()))
	}
	u = u.Remove(expression.Name(layout.AttrPauseBy)) // a finished run is not paused
	expr, err := expression.NewBuilder().
		WithCondition(expression.And(
			expression.Name(layout.AttrRun).Equal(expression.Value(run)),
			expression.Name(layout.AttrStatus).Equal(expression.Value(string(api.StatusRunning))))).
		WithUpdate(u).Build()
	if err != nil {
		return err
	}
	_, err = s.transact(ctx, s.batchUpdate(id, expr),
		types.TransactWriteItem{Delete: &types.Delete{TableName: &s.table, Key: layout.Key(layout.PKRunning, id)}},
		types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: map[string]types.AttributeValue{
			config.AttrPK:      &types.AttributeValueMemberS{Value: layout.PKRetention},
			config.AttrSK:      &types.AttributeValueMemberS{Value: layout.RetentionSK(f.ExpiresAt, id)},
			layout.AttrBatchID: &types.AttributeValueMemberS{Value: id},
			layout.AttrFormat:  layout.FormatValue(),
		}}},
		types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: map[string]types.AttributeValue{
			config.AttrPK:      &types.AttributeValueMemberS{Value: layout.PKPublish},
			config.AttrSK:      &types.AttributeValueMemberS{Value: layout.PublishSK(id, run)},
			layout.AttrBatchID: &types.AttributeValueMemberS{Value: id},
			layout.AttrFormat:  layout.FormatValue(),
			layout.AttrRun:     &types.AttributeValueMemberN{Value: strconv.Itoa(run)},
		}}})
	if err != nil {
		return fmt.Errorf("finish %s run %d: %w", id, run, err)
	}
	return nil
}

// FinalizeFailed counts a failed finalize of f.Run on the batch row
// (ADD finalize_failures, under run = :run AND status = running) and, once
// the count reaches f.Limit, moves the batch to finalize_failed in one
// transaction with the running marker's delete and the retention marker's
// put (the same markers as FinishRun, without the publish marker: there is
// no report to announce).
func (s *Store) FinalizeFailed(ctx context.Context, f ledger.FinalizeFailure) (bool, error) {
	running := expression.And(
		expression.Name(layout.AttrRun).Equal(expression.Value(f.Run)),
		expression.Name(layout.AttrStatus).Equal(expression.Value(string(api.StatusRunning))))
	reason := ledger.CutError(f.Reason)
	expr, err := expression.NewBuilder().WithCondition(running).
		WithUpdate(expression.Add(expression.Name(layout.AttrFinalizeFailures), expression.Value(1)).
			Set(expression.Name(layout.AttrFailure), expression.Value(reason))).Build()
	if err != nil {
		return false, err
	}
	attrs, _, err := s.updateRow(ctx, layout.Key(layout.BatchPK(f.BatchID), layout.SKBatch), expr, types.ReturnValueUpdatedNew)
	if err != nil {
		return false, fmt.Errorf("count a failed finalize of %s run %d: %w", f.BatchID, f.Run, err)
	}
	var n struct {
		Failures int `dynamodbav:"finalize_failures"`
	}
	if err := attributevalue.UnmarshalMap(attrs, &n); err != nil {
		return false, err
	}
	if n.Failures < f.Limit {
		return false, nil
	}
	expr, err = expression.NewBuilder().
		WithCondition(expression.And(running, expression.Name(layout.AttrFinalizeFailures).GreaterThanEqual(expression.Value(f.Limit)))).
		WithUpdate(expression.Set(expression.Name(layout.AttrStatus), expression.Value(string(api.StatusFinalizeFailed))).
			Set(expression.Name(layout.AttrNeedsAttention), expression.Value(true)).
			Set(expression.Name(layout.AttrFinishedAtMs), expression.Value(f.Now.UnixMilli())).
			Set(expression.Name(layout.AttrExpiresAtMs), expression.Value(f.ExpiresAt.UnixMilli())).
			Set(expression.Name(config.AttrExpiresAt), expression.Value(f.ExpiresAt.Add(ledger.TTLGrace).Unix())).
			Remove(expression.Name(layout.AttrPauseBy))).Build()
	if err != nil {
		return false, err
	}
	_, err = s.transact(ctx, s.batchUpdate(f.BatchID, expr),
		types.TransactWriteItem{Delete: &types.Delete{TableName: &s.table, Key: layout.Key(layout.PKRunning, f.BatchID)}},
		types.TransactWriteItem{Put: &types.Put{TableName: &s.table, Item: map[string]types.AttributeValue{
			config.AttrPK:      &types.AttributeValueMemberS{Value: layout.PKRetention},
			config.AttrSK:      &types.AttributeValueMemberS{Value: layout.RetentionSK(f.ExpiresAt, f.BatchID)},
			layout.AttrBatchID: &types.AttributeValueMemberS{Value: f.BatchID},
			layout.AttrFormat:  layout.FormatValue(),
		}}})
	if err != nil {
		return false, fmt.Errorf("end %s run %d as %s: %w", f.BatchID, f.Run, api.StatusFinalizeFailed, err)
	}
	return true, nil
}

// Stop marks the run as stopping (status cancelled or threshold_exceeded)
// under the condition run = :run AND status = running AND
// attribute_not_exists(stop); else api.ErrConflict. Idempotent in effect:
// the first stop wins.
func (s *Store) Stop(ctx context.Context, m ledger.StopMark) error {
	id, run := m.BatchID, m.Run
	expr, err := expression.NewBuilder().
		WithCondition(expression.And(
			expression.Name(layout.AttrRun).Equal(expression.Value(run)),
			expression.Name(layout.AttrStatus).Equal(expression.Value(string(api.StatusRunning))),
			expression.AttributeNotExists(expression.Name(layout.AttrStop)))).
		WithUpdate(expression.Set(expression.Name(layout.AttrStop), expression.Value(string(m.Status))).
			Set(expression.Name(layout.AttrStopDetail), expression.Value(m.Detail)).
			Set(expression.Name(layout.AttrStopRan), expression.Value(m.Ran)).
			Set(expression.Name(layout.AttrStopFailures), expression.Value(m.Failures))).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, layout.Key(layout.BatchPK(id), layout.SKBatch), expr, types.ReturnValueNone); err != nil {
		return fmt.Errorf("stop %s run %d: %w", id, run, err)
	}
	return nil
}

// Pause sets the pause's attributes (pause_by, paused_at_ms, pause_class,
// pause_error, probes 0; ADD pauses 1) under the condition run = :run AND
// status = running AND attribute_not_exists(stop) AND
// attribute_not_exists(pause_by) — or, for a caller's pause that
// replaces an outage pause (m.Replaces), pause_by = outage AND
// paused_at_ms = its start, also ADDing its time to paused_ms and
// setting last_pause; else api.ErrConflict (see ledger.Store).
func (s *Store) Pause(ctx context.Context, m ledger.PauseMark) error {
	free := expression.AttributeNotExists(expression.Name(layout.AttrPauseBy))
	u := expression.Set(expression.Name(layout.AttrPauseBy), expression.Value(string(m.By))).
		Set(expression.Name(layout.AttrPausedAtMs), expression.Value(m.Now.UnixMilli())).
		Set(expression.Name(layout.AttrProbes), expression.Value(0)).
		Add(expression.Name(layout.AttrPauses), expression.Value(1))
	if r := m.Replaces; m.By == api.PauseByCaller && r != nil {
		// The outage pause it replaces, as read: its time kept.
		span := m.Replaced()
		text, err := json.Marshal(span)
		if err != nil {
			return err
		}
		free = expression.And(expression.Name(layout.AttrPauseBy).Equal(expression.Value(string(api.PauseByOutage))),
			expression.Name(layout.AttrPausedAtMs).Equal(expression.Value(r.Since.UnixMilli())))
		u = u.Add(expression.Name(layout.AttrPausedMs), expression.Value(max(0, span.Until.Sub(span.Since).Milliseconds()))).
			Set(expression.Name(layout.AttrLastPause), expression.Value(string(text)))
	}
	if m.Class != "" {
		u = u.Set(expression.Name(layout.AttrPauseClass), expression.Value(m.Class)).
			Set(expression.Name(layout.AttrPauseError), expression.Value(ledger.CutError(m.Error)))
	} else {
		u = u.Remove(expression.Name(layout.AttrPauseClass)).Remove(expression.Name(layout.AttrPauseError))
	}
	if m.By == api.PauseByBudget {
		free = expression.And(free, expression.Name(layout.AttrBudgetUSD).Equal(expression.Value(m.BudgetUSD)))
	}
	expr, err := expression.NewBuilder().
		WithCondition(expression.And(
			expression.Name(layout.AttrRun).Equal(expression.Value(m.Run)),
			expression.Name(layout.AttrStatus).Equal(expression.Value(string(api.StatusRunning))),
			expression.AttributeNotExists(expression.Name(layout.AttrStop)), free)).
		WithUpdate(u).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, layout.Key(layout.BatchPK(m.BatchID), layout.SKBatch), expr, types.ReturnValueNone); err != nil {
		return fmt.Errorf("pause %s run %d: %w", m.BatchID, m.Run, err)
	}
	return nil
}

// Unpause removes pause_by (the pause) under the condition run = :run AND
// attribute_exists(pause_by), and for an outage's unpause pause_by =
// outage AND paused_at_ms = :since (for a budget's, pause_by = budget);
// else api.ErrConflict. The other
// pause attributes stay, the last pause's record. With m.Now set, also
// paused_at_ms = :since, and it ADDs paused_ms m.PausedFor() and sets
// last_pause to m.Span() as JSON.
func (s *Store) Unpause(ctx context.Context, m ledger.UnpauseMark) error {
	cond := expression.And(expression.Name(layout.AttrRun).Equal(expression.Value(m.Run)),
		expression.AttributeExists(expression.Name(layout.AttrPauseBy)))
	u := expression.Remove(expression.Name(layout.AttrPauseBy))
	if !m.Now.IsZero() {
		span, err := json.Marshal(m.Span())
		if err != nil {
			return err
		}
		cond = expression.And(cond, expression.Name(layout.AttrPausedAtMs).Equal(expression.Value(m.Since.UnixMilli())))
		u = u.Add(expression.Name(layout.AttrPausedMs), expression.Value(m.PausedFor())).
			Set(expression.Name(layout.AttrLastPause), expression.Value(string(span)))
	}
	switch m.By {
	case api.PauseByOutage:
		cond = expression.And(cond, expression.Name(layout.AttrPauseBy).Equal(expression.Value(string(api.PauseByOutage))),
			expression.Name(layout.AttrPausedAtMs).Equal(expression.Value(m.Since.UnixMilli())))
	case api.PauseByBudget:
		cond = expression.And(cond, expression.Name(layout.AttrPauseBy).Equal(expression.Value(string(api.PauseByBudget))))
	case api.PauseByCaller:
		// A budget pause written since the caller read the batch stands:
		// only a raise ends it.
		cond = expression.And(cond, expression.Name(layout.AttrPauseBy).NotEqual(expression.Value(string(api.PauseByBudget))))
	}
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(u).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, layout.Key(layout.BatchPK(m.BatchID), layout.SKBatch), expr, types.ReturnValueNone); err != nil {
		return fmt.Errorf("unpause %s run %d: %w", m.BatchID, m.Run, err)
	}
	return nil
}

// MarkApproval sets sample_estimate = :json (m.Estimate, api.SampleEstimate
// as JSON text) under the condition run = :run AND attribute_exists(sample) AND
// attribute_not_exists(sample_estimate) AND
// attribute_not_exists(sample_decision); or sample_decision,
// sample_decided_by and sample_decided_ms under run = :run AND status =
// running AND attribute_not_exists(stop) AND
// attribute_not_exists(sample_decision); else api.ErrConflict. One
// UpdateItem, one write unit for a row under 1 KB.
func (s *Store) MarkApproval(ctx context.Context, m ledger.ApprovalMark) error {
	run := expression.And(expression.Name(layout.AttrRun).Equal(expression.Value(m.Run)),
		expression.AttributeExists(expression.Name(layout.AttrSample)))
	undecided := expression.AttributeNotExists(expression.Name(layout.AttrSampleDecision))
	var cond expression.ConditionBuilder
	var u expression.UpdateBuilder
	if m.Estimate != nil {
		text, err := json.Marshal(m.Estimate)
		if err != nil {
			return err
		}
		cond = expression.And(run, undecided, expression.AttributeNotExists(expression.Name(layout.AttrSampleEstimate)))
		u = expression.Set(expression.Name(layout.AttrSampleEstimate), expression.Value(string(text)))
	} else {
		cond = expression.And(run, undecided, expression.Name(layout.AttrStatus).Equal(expression.Value(string(api.StatusRunning))),
			expression.AttributeNotExists(expression.Name(layout.AttrStop)))
		u = expression.Set(expression.Name(layout.AttrSampleDecision), expression.Value(string(m.Decision))).
			Set(expression.Name(layout.AttrSampleDecidedBy), expression.Value(m.By)).
			Set(expression.Name(layout.AttrSampleDecidedMs), expression.Value(m.Now.UnixMilli()))
	}
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(u).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, layout.Key(layout.BatchPK(m.BatchID), layout.SKBatch), expr, types.ReturnValueNone); err != nil {
		return fmt.Errorf("approval of %s run %d: %w", m.BatchID, m.Run, err)
	}
	return nil
}

// SetLimits sets budget_usd = :usd (l.BudgetUSD > 0) and ceilings =
// :json (l.Ceilings not nil; api.Ceilings as JSON text) under the
// condition attribute_exists(pk); else api.ErrConflict.
func (s *Store) SetLimits(ctx context.Context, id string, l ledger.Limits) error {
	var u expression.UpdateBuilder
	if l.BudgetUSD > 0 {
		u = u.Set(expression.Name(layout.AttrBudgetUSD), expression.Value(l.BudgetUSD))
	}
	if l.Ceilings != nil {
		text, err := json.Marshal(l.Ceilings)
		if err != nil {
			return err
		}
		u = u.Set(expression.Name(layout.AttrCeilings), expression.Value(string(text)))
	}
	if l.BudgetUSD <= 0 && l.Ceilings == nil {
		return nil
	}
	cond := expression.AttributeExists(expression.Name(config.AttrPK))
	if l.Ceilings != nil {
		// The ceilings as read: none, or the same JSON (json.Marshal of
		// api.Ceilings is deterministic and its float64s round-trip).
		was := expression.AttributeNotExists(expression.Name(layout.AttrCeilings))
		if l.CeilingsWas != nil {
			text, err := json.Marshal(l.CeilingsWas)
			if err != nil {
				return err
			}
			was = expression.Name(layout.AttrCeilings).Equal(expression.Value(string(text)))
		}
		cond = cond.And(was)
	}
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(u).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, layout.Key(layout.BatchPK(id), layout.SKBatch), expr, types.ReturnValueNone); err != nil {
		return fmt.Errorf("set the limits of %s: %w", id, err)
	}
	return nil
}

// ClaimProbe sets probes = :n under the condition run = :run AND
// pause_by = outage AND paused_at_ms = :since AND probes < :n; else
// api.ErrConflict.
func (s *Store) ClaimProbe(ctx context.Context, c ledger.ProbeClaim) error {
	expr, err := expression.NewBuilder().
		WithCondition(expression.And(
			expression.Name(layout.AttrRun).Equal(expression.Value(c.Run)),
			expression.Name(layout.AttrPauseBy).Equal(expression.Value(string(api.PauseByOutage))),
			expression.Name(layout.AttrPausedAtMs).Equal(expression.Value(c.Since.UnixMilli())),
			expression.Name(layout.AttrProbes).LessThan(expression.Value(c.Probe)))).
		WithUpdate(expression.Set(expression.Name(layout.AttrProbes), expression.Value(c.Probe))).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, layout.Key(layout.BatchPK(c.BatchID), layout.SKBatch), expr, types.ReturnValueNone); err != nil {
		return fmt.Errorf("claim probe %d of %s run %d: %w", c.Probe, c.BatchID, c.Run, err)
	}
	return nil
}

// StartRun starts run from+1 of a finished batch, in one transaction: the
// batch row (condition run = :from AND status <> running AND not being
// forgotten) becomes running
// with fanned_out false and no stop, and the running marker is put. It
// returns the updated batch, or api.ErrConflict when the batch is not at
// run from or still running.
func (s *Store) StartRun(ctx context.Context, id string, from int, now time.Time) (ledger.Batch, error) {
	return s.startRun(ctx, id, from, now, func(u expression.UpdateBuilder) (expression.UpdateBuilder, error) {
		return u.Remove(expression.Name(layout.AttrRunRevision)), nil
	})
}

// StartCorrection is StartRun that also appends rev to the revisions (the
// JSON list is written whole: the condition on run keeps any other
// writer of it out) and sets run_revision (see ledger.Store).
func (s *Store) StartCorrection(ctx context.Context, id string, from int, rev api.Revision, now time.Time) (ledger.Batch, error) {
	b, err := s.GetBatch(ctx, id)
	if err != nil {
		return ledger.Batch{}, fmt.Errorf("start correction of %s: %w", id, err)
	}
	revs, err := json.Marshal(append(b.Revisions, rev))
	if err != nil {
		return ledger.Batch{}, err
	}
	return s.startRun(ctx, id, from, now, func(u expression.UpdateBuilder) (expression.UpdateBuilder, error) {
		return u.Set(expression.Name(layout.AttrRunRevision), expression.Value(rev.N)).
			Set(expression.Name(layout.AttrRevisions), expression.Value(string(revs))), nil
	})
}

// startRun moves a finished batch at run from to run from+1, running,
// with more (the run's revision) in the same conditional write.
func (s *Store) startRun(ctx context.Context, id string, from int, now time.Time, more func(expression.UpdateBuilder) (expression.UpdateBuilder, error)) (ledger.Batch, error) {
	u, err := more(expression.Set(expression.Name(layout.AttrRun), expression.Value(from+1)).
		Set(expression.Name(layout.AttrStatus), expression.Value(string(api.StatusRunning))).
		Set(expression.Name(layout.AttrFannedOut), expression.Value(false)).
		Set(expression.Name(layout.AttrRunStartedAtMs), expression.Value(now.UnixMilli())).
		Remove(expression.Name(layout.AttrStop)).Remove(expression.Name(layout.AttrStopDetail)).
		Remove(expression.Name(layout.AttrStopRan)).Remove(expression.Name(layout.AttrStopFailures)).
		Remove(expression.Name(layout.AttrFailure)).Remove(expression.Name(layout.AttrFinalizeFailures)).
		Remove(expression.Name(config.AttrExpiresAt)).Remove(expression.Name(layout.AttrPauses)).
		Remove(expression.Name(layout.AttrPauseBy)).Remove(expression.Name(layout.AttrPausedMs)).
		Remove(expression.Name(layout.AttrLastPause)))
	if err != nil {
		return ledger.Batch{}, err
	}
	expr, err := expression.NewBuilder().
		WithCondition(expression.And(
			expression.Name(layout.AttrRun).Equal(expression.Value(from)),
			expression.Name(layout.AttrStatus).In(expression.Value(string(api.StatusCompleted)),
				expression.Value(string(api.StatusThresholdExceeded)), expression.Value(string(api.StatusCancelled)),
				expression.Value(string(api.StatusFinalizeFailed))),
			expression.AttributeNotExists(expression.Name(layout.AttrForgetting)))).
		WithUpdate(u).Build()
	if err != nil {
		return ledger.Batch{}, err
	}
	_, err = s.transact(ctx, s.batchUpdate(id, expr), s.putRunning(id, from+1))
	if err != nil {
		return ledger.Batch{}, fmt.Errorf("start run %d of %s: %w", from+1, id, err)
	}
	return s.GetBatch(ctx, id)
}

// Halt puts m's halt in the batch row's halts map (see ledger.Store):
// SET halts.{layout.HaltKey} = :halt under
//
//	run = :run AND status = running AND attribute_exists(halts)
//	AND attribute_not_exists(halts.{layout.HaltKey}) AND size(halts) < MaxHalts
//
// or, on a row without the map, SET halts = {layout.HaltKey: :halt} under
// attribute_not_exists(halts) and the same run and status.
func (s *Store) Halt(ctx context.Context, m ledger.HaltMark) error {
	k := layout.HaltKey(m.Subject)
	row, err := attributevalue.Marshal(layout.HaltRow{Subject: m.Subject, SinceMs: m.Now.UnixMilli(), Reason: ledger.CutError(m.Reason)})
	if err != nil {
		return err
	}
	running := expression.And(expression.Name(layout.AttrRun).Equal(expression.Value(m.Run)),
		expression.Name(layout.AttrStatus).Equal(expression.Value(string(api.StatusRunning))))
	path := expression.Name(layout.AttrHalts + "." + k)
	expr, err := expression.NewBuilder().WithCondition(expression.And(running,
		expression.AttributeExists(expression.Name(layout.AttrHalts)), expression.AttributeNotExists(path),
		expression.Name(layout.AttrHalts).Size().LessThan(expression.Value(api.MaxHalts)))).
		WithUpdate(expression.Set(path, expression.Value(row))).Build()
	if err != nil {
		return err
	}
	_, old, err := s.updateRow(ctx, layout.Key(layout.BatchPK(m.BatchID), layout.SKBatch), expr, types.ReturnValueNone)
	if errors.Is(err, api.ErrConflict) && len(old) > 0 && old[layout.AttrHalts] == nil {
		expr, err = expression.NewBuilder().WithCondition(expression.And(running, expression.AttributeNotExists(expression.Name(layout.AttrHalts)))).
			WithUpdate(expression.Set(expression.Name(layout.AttrHalts), expression.Value(&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{k: row}}))).Build()
		if err != nil {
			return err
		}
		_, _, err = s.updateRow(ctx, layout.Key(layout.BatchPK(m.BatchID), layout.SKBatch), expr, types.ReturnValueNone)
	}
	if err != nil {
		return fmt.Errorf("halt %s on %s: %w", m.BatchID, m.Subject, err)
	}
	return nil
}

// Lift removes m's halt from the batch row and stamps the lift:
// REMOVE halts.{layout.HaltKey} SET lifted_ms = :at, last_lift = :lifted
// ADD lifts :one under attribute_exists(halts.{layout.HaltKey}) and,
// when m.Halt.Since is set, halts.{layout.HaltKey}.since_ms = :since (the
// halt read is the one standing: one lifted and put again since is
// not lifted in its name). When that was a finished
// batch's last halt and its final census needs no look, a second write
// clears needs_attention under the condition that the batch is still
// finished with that status and holds no halt (a resume or a new halt
// in between keeps it).
func (s *Store) Lift(ctx context.Context, m ledger.LiftMark) error {
	id, subject := m.BatchID, m.Halt.Subject
	lifted, err := json.Marshal(m.Lifted())
	if err != nil {
		return err
	}
	path := expression.Name(layout.AttrHalts + "." + layout.HaltKey(subject))
	u := expression.Remove(path).Set(expression.Name(layout.AttrLiftedMs), expression.Value(layout.Ms(m.At))).
		Set(expression.Name(layout.AttrLastLift), expression.Value(string(lifted))).
		Add(expression.Name(layout.AttrLifts), expression.Value(1))
	cond := expression.AttributeExists(path)
	if !m.Halt.Since.IsZero() {
		cond = cond.And(expression.Name(layout.AttrHalts + "." + layout.HaltKey(subject) + ".since_ms").Equal(expression.Value(layout.Ms(m.Halt.Since))))
	}
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(u).Build()
	if err != nil {
		return err
	}
	key := layout.Key(layout.BatchPK(id), layout.SKBatch)
	row, _, err := s.updateRow(ctx, key, expr, types.ReturnValueAllNew)
	if err != nil {
		return fmt.Errorf("lift %s on %s: %w", id, subject, err)
	}
	var r layout.BatchRow
	if err := attributevalue.UnmarshalMap(row, &r); err != nil {
		return fmt.Errorf("lift %s on %s: %w", id, subject, err)
	}
	b, err := layout.FromBatchRow(r)
	if err != nil || !b.Status.Finished() || len(b.Halts) > 0 || !b.NeedsAttention || b.FinalCensus == nil || b.FinalCensus.NeedsAttention() {
		return nil // the lift stands; needs_attention stays as it is
	}
	halts := expression.Name(layout.AttrHalts)
	expr, err = expression.NewBuilder().
		WithCondition(expression.And(
			expression.Name(layout.AttrStatus).Equal(expression.Value(string(b.Status))),
			expression.Name(layout.AttrRun).Equal(expression.Value(b.Run)),
			expression.Or(expression.AttributeNotExists(halts), expression.Size(halts).Equal(expression.Value(0))))).
		WithUpdate(expression.Set(expression.Name(layout.AttrNeedsAttention), expression.Value(false))).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, key, expr, types.ReturnValueNone); err != nil && !errors.Is(err, api.ErrConflict) {
		return fmt.Errorf("lift %s on %s: needs_attention: %w", id, subject, err)
	}
	return nil
}

// NoteRateConflict sets rate_conflict = :json (c as JSON, without its
// count) and adds c.BatchID to rate_conflicts (ADD, a string set) on
// batch id's row under the condition
//
//	attribute_exists(pk) AND (attribute_not_exists(rate_conflicts)
//	  OR (NOT contains(rate_conflicts, :b) AND size(rate_conflicts) < api.MaxRateConflicts))
//
// A condition that fails writes nothing and is no error.
func (s *Store) NoteRateConflict(ctx context.Context, id string, c api.RateConflict) error {
	c.Batches = 0
	text, err := json.Marshal(c)
	if err != nil {
		return err
	}
	set := expression.Name(layout.AttrRateConflicts)
	u := expression.Set(expression.Name(layout.AttrRateConflict), expression.Value(string(text))).
		Add(set, expression.Value(&types.AttributeValueMemberSS{Value: []string{c.BatchID}}))
	cond := expression.AttributeExists(expression.Name(config.AttrPK)).And(expression.Or(expression.AttributeNotExists(set),
		expression.And(expression.Not(expression.Contains(set, c.BatchID)), expression.Size(set).LessThan(expression.Value(api.MaxRateConflicts)))))
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(u).Build()
	if err != nil {
		return err
	}
	if _, _, err := s.updateRow(ctx, layout.Key(layout.BatchPK(id), layout.SKBatch), expr, types.ReturnValueNone); err != nil && !errors.Is(err, api.ErrConflict) {
		return fmt.Errorf("note a rate conflict on %s: %w", id, err)
	}
	return nil
}
