//go:build integration

package integration

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/internal/dynamo"
)

// Guards dynamo.CreateTable, the table set-up of the test harness and the
// bench: a CreateTable whose answer is lost after the table was made (the
// SDK sends it again and is told the table already exists) succeeds, and a
// table of that name that this call did not create is still refused.
func TestCreateTableSurvivesALostAnswer(t *testing.T) {
	ctx := context.Background()
	p, cfg := faultProxy(t, faultproxy.Config{})
	setFaults(t, p, 1, faultproxy.Rule{Service: "dynamodb", Operations: []string{"CreateTable"}, Kind: faultproxy.KindResetAfter, Rate: 1, Max: 1})
	ddb := dynamodb.NewFromConfig(cfg)
	name := strings.Trim(strings.ToLower(newID(t)), "-")
	if len(name) > 60 {
		name = strings.Trim(name[len(name)-60:], "-")
	}
	t.Cleanup(func() { env.ddb.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name}) })
	if err := dynamo.CreateTable(ctx, ddb, name); err != nil {
		t.Fatalf("create with its first answer lost: %v", err)
	}
	if got := p.Status().ByCall["dynamodb.CreateTable"][faultproxy.KindResetAfter]; got != 1 {
		t.Fatalf("%d CreateTable answers lost, want 1: the test did not exercise a lost answer", got)
	}
	err := dynamo.CreateTable(ctx, ddb, name)
	var inUse *types.ResourceInUseException
	if !errors.As(err, &inUse) {
		t.Fatalf("a second create of %s: %v, want ResourceInUseException", name, err)
	}
}
