package dynamo

import (
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/bulkrun/bulkrun/internal/dynamo/consumed"
	"github.com/bulkrun/bulkrun/shared/api"
)

// Capacity is the DynamoDB capacity the Store's calls consumed, as DynamoDB
// reports it (ReturnConsumedCapacity INDEXES; "ConsumedCapacity" in the
// DynamoDB API Reference,
// https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_ConsumedCapacity.html).
// WriteUnits and ReadUnits are request units of the table and its indexes
// together; Indexes holds each index's part (write and read together).
// On AWS these are the billed figures; the emulator sizes them only
// roughly (see integration/testbed/meter for a client-side meter).
type Capacity struct {
	WriteUnits, ReadUnits float64
	Indexes               map[string]float64
}

// capacity sums ConsumedCapacity over the Store's calls: total since New,
// and pending since the last flush into a counter row.
type capacity struct {
	mu             sync.Mutex
	total, pending Capacity
}

// Capacity returns the capacity consumed by the Store's calls since New.
// Safe for concurrent use.
func (s *Store) Capacity() Capacity {
	s.capacity.mu.Lock()
	defer s.capacity.mu.Unlock()
	c := s.capacity.total
	c.Indexes = make(map[string]float64, len(c.Indexes))
	for k, v := range s.capacity.total.Indexes {
		c.Indexes[k] = v
	}
	return c
}

// takePending returns the units consumed since the last call and starts a
// new sum. AddProgress stores them on the counter row it writes, so that
// each unit is attributed to exactly one batch: the one whose counter is
// written next in this process (in Lambda, one invocation at a time: its own
// batch, or the first of its batches when an invocation carries several).
func (s *Store) takePending() api.Usage {
	s.capacity.mu.Lock()
	defer s.capacity.mu.Unlock()
	p := s.capacity.pending
	s.capacity.pending = Capacity{}
	return api.Usage{DynamoDBWriteUnits: p.WriteUnits, DynamoDBReadUnits: p.ReadUnits}
}

// returnPending gives back units taken for a write that failed.
func (s *Store) returnPending(u api.Usage) {
	s.capacity.mu.Lock()
	defer s.capacity.mu.Unlock()
	s.capacity.pending.WriteUnits += u.DynamoDBWriteUnits
	s.capacity.pending.ReadUnits += u.DynamoDBReadUnits
}

func (s *Store) add(write bool, cs ...types.ConsumedCapacity) {
	s.capacity.mu.Lock()
	defer s.capacity.mu.Unlock()
	for _, c := range cs {
		for _, sum := range []*Capacity{&s.capacity.total, &s.capacity.pending} {
			if write {
				sum.WriteUnits += consumed.Units(c.CapacityUnits)
			} else {
				sum.ReadUnits += consumed.Units(c.CapacityUnits)
			}
			for name, ix := range c.GlobalSecondaryIndexes {
				if sum.Indexes == nil {
					sum.Indexes = map[string]float64{}
				}
				sum.Indexes[name] += consumed.Units(ix.CapacityUnits)
			}
		}
	}
}

// consumed asks every call for ReturnConsumedCapacity INDEXES and adds
// what the response reports (failed calls report none through the SDK; a
// failed condition's units are therefore not seen here).
func (s *Store) consumed(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("bulkrunCapacity",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			consumed.Ask(in.Parameters)
			out, md, err := next.HandleInitialize(ctx, in)
			if err != nil {
				return out, md, err
			}
			if caps, write := consumed.Of(out.Result); len(caps) > 0 {
				s.add(write, caps...)
			}
			return out, md, err
		}), middleware.After)
}
