// Package formats pins what crosses a deploy: the items-queue messages and
// the ledger rows that a release leaves behind for the next one. It writes
// them as golden files from a scenario run through the code of the day
// (Capture), and puts a golden scenario back into a table (Load), so that
// a test can finish with today's code a batch that an earlier release
// half ran (integration's TestUpgradeFinishesOldFormats). Not API.
//
// testdata/v0 holds the formats of the release before format versions,
// testdata/v1 those of version 1 (per-chunk counters), and
// testdata/v{ledger.FormatVersion} today's. Every version's directory is
// frozen once a newer one exists.
package formats

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/bulkrun/bulkrun/integration/testbed/dynjson"
	"github.com/bulkrun/bulkrun/internal/dynamo"
	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/eta"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline"
	"github.com/bulkrun/bulkrun/shared/source"
)

// T0 is the scenario's clock: every write is stamped from it.
var T0 = time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)

// The scenario's batches: Items items each, one item per message and four.
// BatchExtra holds the row shapes a half-run batch does not (written
// after the scenario's rows are taken, so that they are golden files only).
const (
	BatchOne   = "upgrade-k1"
	BatchPack  = "upgrade-k4"
	BatchExtra = "golden-extra"
	Items      = 8
	PackK      = 4
	// The scenario's corrected batches (version 2 on): item 1 failed in
	// run 1, corrected by revision 2, whose run 2 has started.
	BatchFixOne  = "upgrade-fix-k1"
	BatchFixPack = "upgrade-fix-k4"
	// Lease is the leases the scenario takes; the interrupted item's has
	// ended by T0 + Lease.
	Lease = time.Minute
	// RowTTL is the row TTL of the scenario's store.
	RowTTL = 30 * 24 * time.Hour
)

// Key is the scenario's item i.
func Key(i int) string { return fmt.Sprintf("item-%010d", i) }

// Input is item i's input.
func Input(i int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)) }

// Manifest is the scenario's manifest (the same for both batches) and the
// offset and length of each line.
func Manifest() ([]byte, [][2]int64) {
	var b bytes.Buffer
	var at [][2]int64
	for i := range Items {
		line, _ := json.Marshal(source.ManifestLine{Key: Key(i), Input: Input(i)})
		at = append(at, [2]int64{int64(b.Len()), int64(len(line) + 1)})
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes(), at
}

// ManifestKey is where batch id's manifest lives.
func ManifestKey(id string) string { return "batches/" + id + "/manifests/golden.jsonl" }

// Batch is the scenario's batch id at T0, running run 1.
func Batch(id string, k int) ledger.Batch {
	m, _ := Manifest()
	return ledger.Batch{
		Batch: api.Batch{
			ID:            id,
			Plan:          api.Plan{Pipeline: "echo", Digest: digest(m), Threshold: api.Threshold{}, MaxAttempts: 3, ItemsPerMessage: k, OnInterrupt: api.InterruptRetry, Options: json.RawMessage(`{}`)},
			ManifestKey:   ManifestKey(id),
			ManifestBytes: int64(len(m)),
			ItemCount:     Items,
			ListShards:    2,
			CounterShards: 1,
			Run:           1,
			Status:        api.StatusRunning,
			Source:        "inline",
			CreatedAt:     T0,
			RunStartedAt:  T0,
		},
		CounterLanes: 1,
		Chunks:       1,
	}
}

// Chunk is the scenario's one fan-out chunk.
func Chunk() source.Chunk {
	m, _ := Manifest()
	return source.Chunk{Offset: 0, Length: int64(len(m)), FirstIndex: 0, Count: Items}
}

// Message is one queue message of the scenario: its batch and exact body.
type Message struct {
	BatchID string `json:"batch_id"`
	Body    string `json:"body"`
}

// Scenario is a golden scenario: the table's rows after half a run, and
// the messages still on the queue.
type Scenario struct {
	Rows     []dynjson.Row `json:"rows"`
	Messages []Message     `json:"messages"`
}

// Capture runs the scenario's first half with today's code into table
// (which it expects empty) and writes the golden files into dir: the
// scenario, the manifest, and one file per shape (a message of each kind,
// a row of each kind).
func Capture(ctx context.Context, db *dynamodb.Client, table, dir string) error {
	s := dynamo.New(db, table)
	s.RowTTL = RowTTL
	if err := half(ctx, s); err != nil {
		return err
	}
	if err := corrected(ctx, s); err != nil {
		return err
	}
	msgs, shapes, err := messages()
	if err != nil {
		return err
	}
	rows, err := scan(ctx, db, table)
	if err != nil {
		return err
	}
	if err := extras(ctx, s); err != nil {
		return err
	}
	all, err := scan(ctx, db, table)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	m, _ := Manifest()
	if err := os.WriteFile(filepath.Join(dir, "manifest.jsonl"), m, 0o644); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "scenario.json"), Scenario{Rows: rows, Messages: msgs}); err != nil {
		return err
	}
	for name, body := range shapes {
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := writeJSON(filepath.Join(dir, name+".json"), v); err != nil {
			return err
		}
	}
	for name, want := range rowShapes {
		for _, r := range all {
			if want(r) {
				if err := writeJSON(filepath.Join(dir, name+".json"), r); err != nil {
					return err
				}
				break
			}
		}
	}
	return nil
}

// rowShapes picks one row of each kind from the scenario's rows.
var rowShapes = map[string]func(dynjson.Row) bool{
	"row-batch":            func(r dynjson.Row) bool { return str(r, "pk") == "BATCH#"+BatchOne && str(r, "sk") == "BATCH" },
	"row-item-succeeded":   func(r dynjson.Row) bool { return str(r, "sk") == Key(0) && prefix(r, "ITEM#"+BatchOne) },
	"row-item-failed":      func(r dynjson.Row) bool { return str(r, "sk") == Key(1) && prefix(r, "ITEM#"+BatchOne) },
	"row-item-retry":       func(r dynjson.Row) bool { return str(r, "sk") == Key(2) && prefix(r, "ITEM#"+BatchOne) },
	"row-item-in-flight":   func(r dynjson.Row) bool { return str(r, "sk") == Key(3) && prefix(r, "ITEM#"+BatchOne) },
	"row-item-quarantined": func(r dynjson.Row) bool { return str(r, "sk") == Key(4) && prefix(r, "ITEM#"+BatchOne) },
	"row-pack":             func(r dynjson.Row) bool { return prefix(r, "PACK#"+BatchPack) },
	"row-attention":        func(r dynjson.Row) bool { return prefix(r, "ATTN#"+BatchPack) },
	"row-counter-lane":     func(r dynjson.Row) bool { return prefix(r, "COUNT#"+BatchOne+"#1#") && str(r, "sk") == "LANE" },
	"row-running":          func(r dynjson.Row) bool { return str(r, "pk") == "RUNNING" && str(r, "sk") == BatchOne },
	// extras
	"row-counter-run":          func(r dynjson.Row) bool { return str(r, "pk") == "COUNT#"+BatchExtra+"#1" && str(r, "sk") == "RUN" },
	"row-counter-pace":         func(r dynjson.Row) bool { return str(r, "pk") == "COUNT#"+BatchExtra+"#1#0" && str(r, "sk") == "PACE" },
	"row-mark":                 func(r dynjson.Row) bool { return prefix(r, "MARK#"+BatchExtra+"#2#") },
	"row-slot":                 func(r dynjson.Row) bool { return prefix(r, "SLOT#"+BatchExtra+"#") },
	"row-retention":            func(r dynjson.Row) bool { return str(r, "pk") == "RETENTION" && str(r, "batch_id") == BatchExtra },
	"row-publish":              func(r dynjson.Row) bool { return str(r, "pk") == "PUBLISH" },
	"row-upload":               func(r dynjson.Row) bool { return prefix(r, "UPLOAD#") },
	"row-batch-finished":       func(r dynjson.Row) bool { return str(r, "pk") == "BATCH#"+BatchExtra },
	"row-pack-every-attribute": func(r dynjson.Row) bool { return prefix(r, "PACK#"+BatchExtra) },
	// corrections
	"row-batch-correction": func(r dynjson.Row) bool { return str(r, "pk") == "BATCH#"+BatchFixOne && str(r, "sk") == "BATCH" },
	"row-item-corrected":   func(r dynjson.Row) bool { return str(r, "sk") == Key(1) && prefix(r, "ITEM#"+BatchFixOne) },
	"row-pack-corrected":   func(r dynjson.Row) bool { return prefix(r, "PACK#"+BatchFixPack) },
}

func str(r dynjson.Row, attr string) string {
	var v struct{ S string }
	_ = json.Unmarshal(r[attr], &v)
	return v.S
}

func prefix(r dynjson.Row, p string) bool {
	pk := str(r, "pk")
	return len(pk) >= len(p) && pk[:len(p)] == p
}

// half writes the scenario's first half: in each batch, of its 8 items,
// 0 succeeded, 1 failed, 2 waiting for a scheduled retry, 3 in flight
// under a lease that ends at T0 + Lease (its holder died), 4 quarantined,
// 5–7 not yet reserved; the run's one counter lane holds the three
// terminal ones (versions 0 and 1: the chunk counter).
func half(ctx context.Context, s ledger.Store) error {
	one, pack := Batch(BatchOne, 1), Batch(BatchPack, PackK)
	for _, b := range []ledger.Batch{one, pack} {
		if _, err := s.CreateBatch(ctx, b); err != nil {
			return fmt.Errorf("create %s: %w", b.ID, err)
		}
	}
	b := one
	cost := pipeline.Cost{"calls": 1}
	rec := func(i, attempt int, o api.Outcome, reason api.Reason, text string, out json.RawMessage) ledger.Record {
		return ledger.Record{BatchID: b.ID, Key: Key(i), RunID: ledger.RunID(b.ID, Key(i)), Run: 1, ListShards: b.ListShards,
			Attempt: attempt, Outcome: o, Reason: reason, Error: text, Output: out, Cost: cost, Spent: cost, Now: T0.Add(time.Second)}
	}
	for i := range 5 {
		it, err := s.Reserve(ctx, ledger.Reservation{BatchID: b.ID, Key: Key(i), RunID: ledger.RunID(b.ID, Key(i)), Run: 1,
			ListShards: b.ListShards, Now: T0, Lease: Lease})
		if err != nil {
			return fmt.Errorf("reserve %d: %w", i, err)
		}
		switch i {
		case 0:
			err = s.Record(ctx, rec(i, it.Attempt, api.OutcomeSucceeded, "", "", json.RawMessage(`{"n":0}`)))
		case 1:
			err = s.Record(ctx, rec(i, it.Attempt, api.OutcomeFailed, api.ReasonPermanent, "boom", nil))
		case 2:
			err = s.Release(ctx, rec(i, it.Attempt, "", "", "flaky", nil))
		case 4:
			err = s.Record(ctx, rec(i, it.Attempt, api.OutcomeQuarantined, api.ReasonQuarantine, "set aside", nil))
		}
		if err != nil {
			return fmt.Errorf("item %d: %w", i, err)
		}
	}
	now := T0.Add(time.Second)
	ref := ledger.PackRef{BatchID: pack.ID, ListShards: pack.ListShards, First: 0}
	var take, end []ledger.PackItemWrite
	for j := range PackK {
		in := ledger.ItemState{Key: Key(j), Run: 1, Outcome: api.OutcomeInFlight, Attempt: 1, FirstAttempt: 1, UpdatedAt: T0}
		take = append(take, ledger.PackItemWrite{Index: j, Item: in})
		out := in
		out.UpdatedAt, out.Spent, out.SpentRun, out.Cost = now, cost, 1, cost
		switch j {
		case 0:
			out.Outcome, out.Output = api.OutcomeSucceeded, json.RawMessage(`{"n":0}`)
		case 1:
			out.Outcome, out.Reason, out.Error = api.OutcomeFailed, api.ReasonPermanent, "boom"
		case 2:
			out.Retry, out.Error, out.Cost = true, "flaky", nil
		case 3:
			out.Outcome, out.Reason, out.Error = api.OutcomeQuarantined, api.ReasonQuarantine, "set aside"
		}
		end = append(end, ledger.PackItemWrite{Index: j, Item: out, Was: api.OutcomeInFlight})
	}
	if err := s.WritePack(ctx, ledger.PackWrite{Ref: ref, Take: true, Run: 1, LeaseUntil: T0.Add(Lease), Items: take, InFlight: PackK, Now: T0}); err != nil {
		return fmt.Errorf("take pack: %w", err)
	}
	if err := s.WritePack(ctx, ledger.PackWrite{Ref: ref, Attempt: 1, Run: 1, Items: end, InFlight: 1, Now: now}); err != nil {
		return fmt.Errorf("write pack: %w", err)
	}
	for _, b := range []ledger.Batch{one, pack} {
		_, err := s.CountLane(ctx, ledger.LaneCount{BatchID: b.ID, Run: 1, Lane: 0, Target: Items,
			Outcomes: map[api.Outcome]int64{api.OutcomeSucceeded: 1, api.OutcomeFailed: 1, api.OutcomeQuarantined: 1},
			Failures: 2, Token: "golden-" + b.ID, Now: now})
		if err != nil {
			return fmt.Errorf("count %s: %w", b.ID, err)
		}
	}
	return nil
}

// extras writes, for BatchExtra, the rows the half-run scenario does not
// hold: a rerun count mark (run 2), a max_concurrency slot held, the run
// row (a lane done), the pace row, a pack row whose items carry every attribute an
// item of a pack can (a released quarantined item counted in run 2, a
// throttled one in flight, an output in S3), the finished run's batch
// row with its retention and publish markers, and an upload claim.
func extras(ctx context.Context, s *dynamo.Store) error {
	b := Batch(BatchExtra, PackK)
	b.MaxConcurrency = 2
	if _, err := s.CreateBatch(ctx, b); err != nil {
		return fmt.Errorf("create %s: %w", b.ID, err)
	}
	now := T0.Add(time.Second)
	if _, err := s.MarkCounted(ctx, b.ID, b.ListShards, Key(0), 2, now); err != nil {
		return fmt.Errorf("mark: %w", err)
	}
	if err := s.AcquireSlot(ctx, b.ID, 1, "golden-holder", T0, Lease); err != nil {
		return fmt.Errorf("slot: %w", err)
	}
	if _, err := s.CountRun(ctx, ledger.RunCount{BatchID: b.ID, Run: 1, LanesDone: 1, Failures: 1, Token: "golden-run", Now: now}); err != nil {
		return fmt.Errorf("run row: %w", err)
	}
	ring := []eta.Sample{{AtMs: now.Add(-eta.SampleEvery).UnixMilli(), Done: 1, Cost: pipeline.CostSum{"calls": decimal.NewFromInt(1)}}, {AtMs: now.UnixMilli(), Done: 2, NoCost: true}}
	if err := s.SamplePace(ctx, b.ID, 1, ring, now); err != nil {
		return fmt.Errorf("pace row: %w", err)
	}
	cost := pipeline.Cost{"calls": 1}
	ref := ledger.PackRef{BatchID: b.ID, ListShards: b.ListShards, First: 0}
	items := []ledger.ItemState{
		{Key: Key(0), Run: 1, Outcome: api.OutcomeQuarantined, Attempt: 1, FirstAttempt: 1, Released: true, CountedRun: 2,
			Reason: api.ReasonQuarantine, Error: "set aside", Cost: cost, Spent: cost, SpentRun: 1, UpdatedAt: now},
		{Key: Key(1), Run: 1, Outcome: api.OutcomeInFlight, Attempt: 2, FirstAttempt: 2, Retry: true, ThrottledSince: T0,
			Error: "throttled", UpdatedAt: now},
		{Key: Key(2), Run: 1, Outcome: api.OutcomeSucceeded, Attempt: 1, FirstAttempt: 1, OutputRef: "s3://bucket/batches/" + b.ID + "/outputs/x.json",
			Cost: cost, Spent: cost, SpentRun: 1, UpdatedAt: now},
	}
	var w []ledger.PackItemWrite
	for j, it := range items {
		w = append(w, ledger.PackItemWrite{Index: j, Item: it})
	}
	if err := s.WritePack(ctx, ledger.PackWrite{Ref: ref, Take: true, Run: 1, LeaseUntil: T0.Add(Lease), Items: w, InFlight: 1, Now: now}); err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	done := T0.Add(time.Minute)
	if err := s.FinishRun(ctx, b.ID, 1, ledger.Finish{Status: api.StatusCompleted, ReportKey: api.ReportKey(b.ID, 1),
		Census: api.Census{Total: Items, Succeeded: Items, Cost: pipeline.CostSum{}, RunSpent: pipeline.CostSum{}}, FinishedAt: done,
		ExpiresAt: done.Add(RowTTL), RowsExpireAt: done.Add(RowTTL + ledger.TTLGrace)}); err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	if _, err := s.ClaimUpload(ctx, api.UploadClaim{Content: digest([]byte("golden upload")), BatchID: b.ID,
		Source: "s3://bucket/incoming/golden.jsonl", ClaimedAt: T0, Until: T0.Add(Lease)}, false); err != nil {
		return fmt.Errorf("upload claim: %w", err)
	}
	return nil
}

// messages are the scenario's messages on the queue (every item's and
// pack's, as the fan-out sent them; item 6's input by pointer) and one
// example body of each kind.
func messages() ([]Message, map[string][]byte, error) {
	m, at := Manifest()
	chunk := Chunk()
	shapes := map[string][]byte{}
	var msgs []Message
	var lines []source.ManifestLine
	if err := source.ReadManifestLines(bytes.NewReader(m), 0, func(l source.ManifestLine, _, _ int64) error {
		lines = append(lines, l)
		return nil
	}); err != nil {
		return nil, nil, err
	}
	for i, l := range lines {
		msg := ledger.ItemMessage(BatchOne, 1, ManifestKey(BatchOne), chunk, l, at[i][0], at[i][1])
		if i == 6 {
			msg.Input, msg.InputRef, msg.ManifestKey = nil, &source.Chunk{Offset: at[i][0], Length: at[i][1], Count: 1}, ManifestKey(BatchOne)
		}
		body, err := msg.Body()
		if err != nil {
			return nil, nil, err
		}
		msgs = append(msgs, Message{BatchID: BatchOne, Body: string(body)})
		switch i {
		case 5:
			shapes["message-item"] = body
		case 6:
			shapes["message-item-ref"] = body
		}
	}
	packer, err := ledger.NewPacker(BatchPack, 1, ManifestKey(BatchPack), chunk, PackK, func(body []byte, _ []string) error {
		msgs = append(msgs, Message{BatchID: BatchPack, Body: string(body)})
		shapes["message-pack"] = body
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for i, l := range lines {
		if err := packer.Add(l, at[i][0], at[i][1]); err != nil {
			return nil, nil, err
		}
	}
	if err := packer.Flush(); err != nil {
		return nil, nil, err
	}
	fan, err := ledger.Message{Kind: ledger.KindFanout, BatchID: BatchOne, Run: 1, ManifestKey: ManifestKey(BatchOne), Chunk: &chunk}.Body()
	if err != nil {
		return nil, nil, err
	}
	shapes["message-fanout"] = fan
	return msgs, shapes, nil
}

// corrected writes the scenario's corrections: two batches (one item per
// message, and four) whose run 1 ended with item 0 succeeded and item 1
// failed, corrected by revision 2: run 2 started (the batch row holds the
// revision) and item 1 marked with it (its item row's rev, its pack
// entry's rv).
func corrected(ctx context.Context, s ledger.Store) error {
	now := T0.Add(time.Second)
	cost := pipeline.Cost{"calls": 1}
	for _, k := range []int{1, PackK} {
		id := BatchFixOne
		if k > 1 {
			id = BatchFixPack
		}
		b := Batch(id, k)
		if _, err := s.CreateBatch(ctx, b); err != nil {
			return fmt.Errorf("create %s: %w", id, err)
		}
		mark := ledger.RevisionMark{Key: Key(1)}
		if k == 1 {
			for i := range 2 {
				it, err := s.Reserve(ctx, ledger.Reservation{BatchID: id, Key: Key(i), RunID: ledger.RunID(id, Key(i)), Run: 1,
					ListShards: b.ListShards, Now: T0, Lease: Lease})
				if err != nil {
					return fmt.Errorf("reserve %d: %w", i, err)
				}
				r := ledger.Record{BatchID: id, Key: Key(i), RunID: ledger.RunID(id, Key(i)), Run: 1, ListShards: b.ListShards,
					Attempt: it.Attempt, Outcome: api.OutcomeSucceeded, Output: json.RawMessage(`{"n":0}`), Cost: cost, Spent: cost, Now: now}
				if i == 1 {
					r.Outcome, r.Reason, r.Error, r.Output = api.OutcomeFailed, api.ReasonPermanent, "bad input", nil
				}
				if err := s.Record(ctx, r); err != nil {
					return fmt.Errorf("item %d: %w", i, err)
				}
			}
		} else {
			ref := ledger.PackRef{BatchID: id, ListShards: b.ListShards, First: 0}
			var take, end []ledger.PackItemWrite
			for j := range PackK {
				in := ledger.ItemState{Key: Key(j), Run: 1, Outcome: api.OutcomeInFlight, Attempt: 1, FirstAttempt: 1, UpdatedAt: T0}
				take = append(take, ledger.PackItemWrite{Index: j, Item: in})
				out := in
				out.UpdatedAt, out.Spent, out.SpentRun, out.Cost = now, cost, 1, cost
				out.Outcome, out.Output = api.OutcomeSucceeded, json.RawMessage(fmt.Sprintf(`{"n":%d}`, j))
				if j == 1 {
					out.Outcome, out.Reason, out.Error, out.Output = api.OutcomeFailed, api.ReasonPermanent, "bad input", nil
				}
				end = append(end, ledger.PackItemWrite{Index: j, Item: out, Was: api.OutcomeInFlight})
			}
			if err := s.WritePack(ctx, ledger.PackWrite{Ref: ref, Take: true, Run: 1, LeaseUntil: T0.Add(Lease), Items: take, InFlight: PackK, Now: T0}); err != nil {
				return fmt.Errorf("take pack: %w", err)
			}
			if err := s.WritePack(ctx, ledger.PackWrite{Ref: ref, Attempt: 1, Run: 1, Items: end, Now: now}); err != nil {
				return fmt.Errorf("write pack: %w", err)
			}
			mark.Pack, mark.PackFirst, mark.Index = true, 0, 1
		}
		if err := s.FinishRun(ctx, id, 1, ledger.Finish{Status: api.StatusCompleted, ReportKey: api.ReportKey(id, 1),
			Census: api.Census{Total: Items, Succeeded: Items - 1, Failed: 1}, FinishedAt: now, ExpiresAt: now.Add(RowTTL)}); err != nil {
			return fmt.Errorf("finish %s: %w", id, err)
		}
		at := T0.Add(2 * time.Second)
		rev := api.Revision{N: 2, Digest: digest([]byte(`{"key":"item-0000000001","input":{"n":1,"fixed":true}}` + "\n")), Items: 1, Run: 2,
			Source: "inline", CreatedAt: at, CorrectionsKey: "batches/" + id + "/revisions/golden.corrections.jsonl",
			ManifestKey: ledger.RevisionsKey(id, 2, "golden.manifest.jsonl"), RunKey: ledger.RevisionsKey(id, 2, "golden.run.jsonl"),
			RunItems: int64(k), RunChunks: 1}
		nb, err := s.StartCorrection(ctx, id, 1, rev, at)
		if err != nil {
			return fmt.Errorf("correct %s: %w", id, err)
		}
		if err := s.MarkRevision(ctx, nb, 2, []ledger.RevisionMark{mark}); err != nil {
			return fmt.Errorf("mark %s: %w", id, err)
		}
	}
	return nil
}

// scan reads every row of table, sorted by pk, then sk.
func scan(ctx context.Context, db *dynamodb.Client, table string) ([]dynjson.Row, error) {
	var rows []dynjson.Row
	var start map[string]types.AttributeValue
	for {
		out, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: &table, ExclusiveStartKey: start, ConsistentRead: boolp(true)})
		if err != nil {
			return nil, fmt.Errorf("scan %s: %w", table, err)
		}
		for _, it := range out.Items {
			r, err := dynjson.EncodeRow(it)
			if err != nil {
				return nil, err
			}
			rows = append(rows, r)
		}
		if start = out.LastEvaluatedKey; len(start) == 0 {
			break
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if a, b := str(rows[i], "pk"), str(rows[j], "pk"); a != b {
			return a < b
		}
		return str(rows[i], "sk") < str(rows[j], "sk")
	})
	return rows, nil
}

func boolp(b bool) *bool { return &b }

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadScenario reads the golden scenario in dir.
func ReadScenario(dir string) (Scenario, error) {
	var s Scenario
	b, err := os.ReadFile(filepath.Join(dir, "scenario.json"))
	if err != nil {
		return s, err
	}
	err = json.Unmarshal(b, &s)
	return s, err
}

// Load puts the scenario's rows into table as they are.
func Load(ctx context.Context, db *dynamodb.Client, table string, sc Scenario) error {
	for _, r := range sc.Rows {
		item, err := dynjson.DecodeRow(r)
		if err != nil {
			return err
		}
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: item}); err != nil {
			return fmt.Errorf("put %s/%s: %w", str(r, "pk"), str(r, "sk"), err)
		}
	}
	return nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
