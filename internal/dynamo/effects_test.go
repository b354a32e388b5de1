package dynamo

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/pipeline/effects"
)

// tokenDynamo answers TransactWriteItems as DynamoDB does with a
// ClientRequestToken (API reference, TransactWriteItems,
// ClientRequestToken): the first request under a token is applied; a
// later one with the same token and the same parameters is answered as
// the first without being applied again; one with the same token and
// other parameters gets IdempotentParameterMismatchException. It counts
// the requests it applied.
type tokenDynamo struct {
	mu      sync.Mutex
	seen    map[string][32]byte // token → parameters
	applied []map[string]any
}

func (f *tokenDynamo) Do(r *http.Request) (*http.Response, error) {
	b, _ := io.ReadAll(r.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	tok, _ := m["ClientRequestToken"].(string)
	delete(m, "ClientRequestToken")
	params, _ := json.Marshal(m)
	sum := sha256.Sum256(params)
	answer := func(status int, body string) (*http.Response, error) {
		return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if prev, ok := f.seen[tok]; ok && tok != "" {
		if prev != sum {
			return answer(400, `{"__type":"com.amazonaws.dynamodb.v20120810#IdempotentParameterMismatchException","message":"Request parameters do not match the original request"}`)
		}
		return answer(200, `{}`)
	}
	if f.seen == nil {
		f.seen = map[string][32]byte{}
	}
	f.seen[tok] = sum
	f.applied = append(f.applied, m)
	return answer(200, `{}`)
}

func tokenStore(f *tokenDynamo, table string) *Store {
	db := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://dynamo.invalid"),
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""), HTTPClient: f})
	return New(db, table)
}

func stagedPut(table, pk string) effects.Writes {
	return effects.Writes{{Put: &types.Put{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk}}}}}
}

// Point 3 of the ecosystem work, staged effects ("committed in the same
// transaction as the item's succeeded outcome, fenced by the attempt"):
// the product line it guards is the commit's ClientRequestToken. A batch
// forgotten and submitted again under the same id (an upload of the same
// file; a schedule's tick id) has the same batch id, key, run 1 and
// attempt 1 as before; within DynamoDB's 10-minute window a token made of
// those alone is refused (IdempotentParameterMismatchException, the
// timestamps differ), so the item's outcome is not recorded, it waits out
// its lease and runs again (or is quarantined as interrupted). The same
// Record sent again must still carry the same token and apply once.
func TestStagedEffectsTokenPerCommit(t *testing.T) {
	f := &tokenDynamo{}
	s := tokenStore(f, "bulkrun-table")
	ctx := context.Background()
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	rec := ledger.Record{BatchID: "upload-1", Key: "k/1", RunID: ledger.RunID("upload-1", "k/1"), Run: 1, Attempt: 1,
		Outcome: api.OutcomeSucceeded, Effects: stagedPut("orders", "a"), Now: at}
	if err := s.Record(ctx, rec); err != nil {
		t.Fatalf("first commit: %v", err)
	}
	// The worker's resend of the same commit (persist): same token, same
	// parameters, answered as the first, not applied again.
	if err := s.Record(ctx, rec); err != nil {
		t.Fatalf("resend of the same commit: %v", err)
	}
	if len(f.applied) != 1 {
		t.Fatalf("the same commit sent twice was applied %d times, want 1", len(f.applied))
	}
	// The same batch id submitted again after a forget, five minutes on.
	again := rec
	again.Now = at.Add(5 * time.Minute)
	if err := s.Record(ctx, again); err != nil {
		t.Fatalf("commit of the resubmitted batch's run 1, attempt 1: %v", err)
	}
	if len(f.applied) != 2 {
		t.Errorf("the resubmitted batch's commit was applied %d times in all, want 2 (one per batch)", len(f.applied))
	}
}

// Point 3 of the ecosystem work, staged effects ("on tables the stack
// declares"): the product line it guards is the commit's refusal of
// bulkrun's own table, which DynamoDB also accepts by its ARN in
// TableName. Nothing is sent when a staged write names it either way.
func TestStagedEffectsNeverOnOwnTable(t *testing.T) {
	for _, table := range []string{
		"bulkrun-table",
		"arn:aws:dynamodb:us-east-1:123456789012:table/bulkrun-table",
		"arn:aws-cn:dynamodb:cn-north-1:123456789012:table/bulkrun-table",
	} {
		t.Run(table, func(t *testing.T) {
			f := &tokenDynamo{}
			s := tokenStore(f, "bulkrun-table")
			err := s.Record(context.Background(), ledger.Record{BatchID: "b", Key: "k", Run: 1, Attempt: 1,
				Outcome: api.OutcomeSucceeded, Effects: stagedPut(table, "ITEM#b#k"), Now: time.Now()})
			var ee *ledger.EffectsError
			if !errors.As(err, &ee) || !ee.Permanent {
				t.Fatalf("Record = %v, want a permanent *ledger.EffectsError", err)
			}
			if len(f.applied) != 0 {
				t.Errorf("%d requests sent, want none", len(f.applied))
			}
		})
	}
	// Other tables, and look-alikes of the name, are not bulkrun's.
	s := tokenStore(&tokenDynamo{}, "bulkrun-table")
	for _, table := range []string{"orders", "Bulkrun-table", "bulkrun-table2", "arn:aws:dynamodb:us-east-1:123456789012:table/bulkrun-table2", "arn:aws:dynamodb:us-east-1:123456789012:table/x"} {
		if s.ownTable(table) {
			t.Errorf("ownTable(%q) = true, want false", table)
		}
	}
}

// errDynamo answers every request with one DynamoDB error.
type errDynamo struct{ code, msg string }

func (f errDynamo) Do(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	body := `{"__type":"com.amazonaws.dynamodb.v20120810#` + f.code + `","message":"` + f.msg + `"}`
	return &http.Response{StatusCode: 400, Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
}

// Point 3 of the ecosystem work, staged effects ("refuse … with a clear
// error"): the product line it guards is the class of a commit DynamoDB
// refuses for good. A staged write on a declared table that does not
// exist, or that the item function may not write, is refused the same way
// on every try; left unclassified, the item held its lease, came back as
// an interruption (quarantined under on_interrupt=quarantine) and ran
// again until its attempts or receives ran out. It is a permanent
// *ledger.EffectsError carrying DynamoDB's message, so the item fails at
// once and says why.
func TestStagedEffectsRefusedTableIsPermanent(t *testing.T) {
	for _, f := range []errDynamo{
		{"ResourceNotFoundException", "Requested resource not found"},
		{"AccessDeniedException", "User is not authorized to perform: dynamodb:UpdateItem on resource: arn:aws:dynamodb:us-east-1:123456789012:table/orders"},
		{"ValidationException", "Transaction request cannot include multiple operations on one item"},
	} {
		t.Run(f.code, func(t *testing.T) {
			db := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://dynamo.invalid"),
				Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""), HTTPClient: f})
			err := New(db, "bulkrun-table").Record(context.Background(), ledger.Record{BatchID: "b", Key: "k", Run: 1, Attempt: 1,
				Outcome: api.OutcomeSucceeded, Effects: stagedPut("orders", "a"), Now: time.Now()})
			var ee *ledger.EffectsError
			if !errors.As(err, &ee) || !ee.Permanent || !strings.Contains(err.Error(), f.code) {
				t.Fatalf("Record = %v, want a permanent *ledger.EffectsError naming %s", err, f.code)
			}
			if errors.Is(err, ledger.ErrUnavailable) || errors.Is(err, api.ErrConflict) {
				t.Fatalf("Record = %v: classified as unavailable or conflict", err)
			}
		})
	}
}
