package effects

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/shared/pipeline"
)

func key(v string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: v}}
}

// Every refusal names the write and what is wrong, and is permanent: a
// pipeline that returns it fails the item rather than retry it.
func TestStageRefusesWithTheWriteNamed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stage func(ctx context.Context) error
		want  string
	}{
		{"undeclared table", func(ctx context.Context) error { return Put(ctx, "other", key("a")) }, `write 0: table "other" is not declared`},
		{"no action", func(ctx context.Context) error { return Stage(ctx, types.TransactWriteItem{}) }, "sets 0 of Put, Update, Delete and ConditionCheck"},
		{"two actions", func(ctx context.Context) error {
			return Stage(ctx, types.TransactWriteItem{Put: &types.Put{TableName: aws.String("orders"), Item: key("a")}, Delete: &types.Delete{TableName: aws.String("orders"), Key: key("a")}})
		}, "sets 2 of"},
		{"no table", func(ctx context.Context) error { return Put(ctx, "", key("a")) }, "names no table"},
		{"no item", func(ctx context.Context) error { return Put(ctx, "orders", nil) }, `on table "orders" has no item/key`},
		{"update without expression", func(ctx context.Context) error { return Update(ctx, "orders", key("a"), types.Update{}) }, "no update or condition expression"},
		{"condition without expression", func(ctx context.Context) error {
			return ConditionCheck(ctx, "orders", key("a"), types.ConditionCheck{})
		}, "no update or condition expression"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New([]string{"orders"})
			err := tc.stage(s.Context(context.Background()))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if pipeline.Classify(err) != pipeline.ClassPermanent {
				t.Fatalf("error class %v, want permanent", pipeline.Classify(err))
			}
			if s.Len() != 0 {
				t.Fatalf("%d writes staged after a refusal", s.Len())
			}
		})
	}
}

// A context without a stager (the pipeline runs outside bulkrun, or no
// table is declared) refuses staging with ErrNoStaging.
func TestStageWithoutStaging(t *testing.T) {
	err := Put(context.Background(), "orders", key("a"))
	if !errors.Is(err, ErrNoStaging) || pipeline.Classify(err) != pipeline.ClassPermanent {
		t.Fatalf("error %v, want permanent ErrNoStaging", err)
	}
	if Staging(nil) != nil || Staging([]string{""}) != nil {
		t.Fatal("Staging with no declared table must be nil (staging refused)")
	}
}

// At most MaxWrites writes: DynamoDB's 100 actions per transaction minus
// bulkrun's outcome write. The 100th is refused with the limit named.
func TestStageLimit(t *testing.T) {
	s := New([]string{"orders"})
	ctx := s.Context(context.Background())
	for i := range MaxWrites {
		if err := Put(ctx, "orders", key(string(rune('a'+i%26))+strings.Repeat("x", i))); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	err := Put(ctx, "orders", key("one too many"))
	if err == nil || !strings.Contains(err.Error(), "write 99") || !strings.Contains(err.Error(), "at most 99") {
		t.Fatalf("the 100th write: %v, want a refusal naming write 99 and the limit", err)
	}
	if got := len(s.Seal()); got != MaxWrites {
		t.Fatalf("sealed %d writes, want %d", got, MaxWrites)
	}
}

// Seal ends staging: what a goroutine stages after Run returned is
// refused and never committed; concurrent staging keeps every write.
func TestSealEndsStaging(t *testing.T) {
	hook := Staging([]string{"orders"})
	ctx, seal := hook(context.Background())
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Put(ctx, "orders", key(strings.Repeat("k", i+1))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	staged := seal()
	if staged == nil || staged.Len() != 20 {
		t.Fatalf("staged %v, want 20 writes", staged)
	}
	if _, ok := staged.(Writes); !ok {
		t.Fatalf("staged is %T, want Writes (what the DynamoDB store commits)", staged)
	}
	err := Put(ctx, "orders", key("late"))
	if err == nil || !strings.Contains(err.Error(), "the attempt has ended") {
		t.Fatalf("late write: %v, want refused", err)
	}
	if staged.Len() != 20 {
		t.Fatal("a late write changed what was staged")
	}
	_, sealEmpty := hook(context.Background())
	if s := sealEmpty(); s != nil {
		t.Fatalf("an attempt that staged nothing gives %v, want nil (plain outcome write)", s)
	}
}

// Point 3 of the ecosystem work, staged effects ("on tables the stack
// declares"): the product line it guards is the table a staged write acts
// on. A pipeline that stages a write and then reuses its struct — points
// it at another table, bulkrun's own by ARN — must not move the staged
// write: the table checked at Stage is the table committed.
func TestStagedTableFixedAtStage(t *testing.T) {
	s := New([]string{"orders"})
	ctx := s.Context(context.Background())
	put := &types.Put{TableName: aws.String("orders"), Item: key("a")}
	upd := &types.Update{TableName: aws.String("orders"), Key: key("b"), UpdateExpression: aws.String("SET n = :n")}
	del := &types.Delete{TableName: aws.String("orders"), Key: key("c")}
	chk := &types.ConditionCheck{TableName: aws.String("orders"), Key: key("d"), ConditionExpression: aws.String("attribute_exists(pk)")}
	for _, w := range []types.TransactWriteItem{{Put: put}, {Update: upd}, {Delete: del}, {ConditionCheck: chk}} {
		if err := Stage(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	own := "arn:aws:dynamodb:us-east-1:123456789012:table/bulkrun-table"
	for _, name := range []*string{put.TableName, upd.TableName, del.TableName, chk.TableName} {
		*name = own
	}
	put.TableName, upd.TableName, del.TableName, chk.TableName = &own, &own, &own, &own
	for i, w := range s.Seal() {
		var got string
		switch {
		case w.Put != nil:
			got = aws.ToString(w.Put.TableName)
		case w.Update != nil:
			got = aws.ToString(w.Update.TableName)
		case w.Delete != nil:
			got = aws.ToString(w.Delete.TableName)
		case w.ConditionCheck != nil:
			got = aws.ToString(w.ConditionCheck.TableName)
		}
		if got != "orders" {
			t.Errorf("write %d acts on %q after the pipeline changed its struct, want orders", i, got)
		}
	}
}
