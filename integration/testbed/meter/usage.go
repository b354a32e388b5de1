package meter

import (
	"maps"
	"sort"
)

// Target is where DynamoDB units land: the table (Index "") or one of its
// global secondary indexes, and the kind of row, which is the row's
// partition key up to its first '#' ("ITEM", "COUNT", "BATCH", ...), so
// that figures can be split by row kind (per-item rows against per-batch
// rows).
type Target struct {
	Index string
	Kind  string
}

// Usage is what a stretch of requests is billed for. Units are DynamoDB
// request units (on demand: write request units and read request units);
// requests are billed requests of each service, not SDK calls.
type Usage struct {
	// Write and Read are DynamoDB write and read units by target.
	Write map[Target]float64
	Read  map[Target]float64
	// Retried is the part of Write made by units taken again: the writes
	// of an ITEM or PACK row whose after image counts 2 or more takes
	// (AttemptAttr), that is a redelivered unit's take and every write
	// after it, billed as DynamoDB bills them (by the row as it stands,
	// which a first take finds smaller). Refused writes are not in it.
	// A row's takes never go back, so a take given back (a late lease, a
	// throttled call) and a later run's takes count too: a comparison
	// subtracts its clean run's.
	Retried map[Target]float64
	// SQSRequests counts billed SQS requests: every call, and a call whose
	// payload exceeds 64 KiB once per started 64 KiB chunk.
	SQSRequests float64
	// S3Put counts S3 requests billed at the PUT, COPY, POST, LIST tier;
	// S3Get those billed at the GET tier (GET, HEAD and the rest but DELETE,
	// which is free).
	S3Put, S3Get float64
	// EventBridgeEvents counts billed PutEvents entries (one per started
	// 64 KiB of an entry).
	EventBridgeEvents float64
	// LambdaRequests counts Lambda Invoke calls made through the SDK.
	LambdaRequests float64
	// Calls counts SDK calls by "Service.Operation" as made (retries of one
	// call not counted again).
	Calls map[string]int
}

func (u *Usage) init() {
	if u.Write == nil {
		u.Write = map[Target]float64{}
	}
	if u.Read == nil {
		u.Read = map[Target]float64{}
	}
	if u.Retried == nil {
		u.Retried = map[Target]float64{}
	}
	if u.Calls == nil {
		u.Calls = map[string]int{}
	}
}

// Clone is a deep copy of u.
func (u Usage) Clone() Usage {
	c := u
	c.Write, c.Read, c.Retried, c.Calls = maps.Clone(u.Write), maps.Clone(u.Read), maps.Clone(u.Retried), maps.Clone(u.Calls)
	c.init()
	return c
}

// WriteUnits is the total of DynamoDB write units whose target matches
// keep (nil keeps all).
func (u Usage) WriteUnits(keep func(Target) bool) float64 { return sum(u.Write, keep) }

// RetriedWriteUnits is the total of Retried: the write units of units
// taken again.
func (u Usage) RetriedWriteUnits() float64 { return sum(u.Retried, nil) }

// ReadUnits is the total of DynamoDB read units whose target matches keep
// (nil keeps all).
func (u Usage) ReadUnits(keep func(Target) bool) float64 { return sum(u.Read, keep) }

// Indexes lists the targets' index names in order, "" (the table) first.
func (u Usage) Indexes() []string {
	seen := map[string]bool{"": true}
	for t := range u.Write {
		seen[t.Index] = true
	}
	for t := range u.Read {
		seen[t.Index] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func sum(m map[Target]float64, keep func(Target) bool) float64 {
	var s float64
	for t, v := range m {
		if keep == nil || keep(t) {
			s += v
		}
	}
	return s
}
