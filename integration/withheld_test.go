//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/bulkrun/bulkrun/shared/api"
	"github.com/bulkrun/bulkrun/shared/ledger"
	"github.com/bulkrun/bulkrun/shared/secretref"
)

// TestWrongSecretWithholdsThenLift guards "a refused credential withholds
// items instead of failing them" on the deployed stack: a header read
// from an SSM SecureString the receiver refuses (401) leaves every item
// withheld under a halt on the parameter (the census and the listing say
// so, the run stays running, no item failed); once the parameter holds
// the right value, the lift of the halt through the API wakes them and
// the run completes with every item succeeded, none of them sending the
// refused value again (the processes' cached copy of it).
func TestWrongSecretWithholdsThenLift(t *testing.T) {
	ctx := context.Background()
	id := newID(t)
	const n = 20
	paramName := "/bulkrun/" + id
	ssmc := ssm.NewFromConfig(env.aws)
	put := func(value string) {
		t.Helper()
		if _, err := ssmc.PutParameter(ctx, &ssm.PutParameterInput{Name: aws.String(paramName), Value: aws.String(value),
			Type: ssmtypes.ParameterTypeSecureString, Overwrite: aws.Bool(true)}); err != nil {
			t.Fatalf("put parameter: %v", err)
		}
	}
	put("Bearer wrong")
	t.Cleanup(func() {
		_, _ = ssmc.DeleteParameter(context.Background(), &ssm.DeleteParameterInput{Name: aws.String(paramName)})
	})
	var refused, answered atomic.Int64
	route := env.hook.routeRequest(id, func(r *http.Request) int {
		if r.Header.Get("Authorization") != "Bearer right" {
			refused.Add(1)
			return http.StatusUnauthorized
		}
		answered.Add(1)
		return http.StatusOK
	})
	arn := "arn:aws:ssm:us-east-1:000000000000:parameter" + paramName
	subject := ledger.SecretSubjectPrefix + arn
	opts, _ := json.Marshal(map[string]string{"url": route})
	req := api.SubmitRequest{BatchID: id, Pipeline: "webhook", Options: opts, Headers: map[string]string{"Authorization": secretref.Prefix + arn},
		Source: api.SourceSpec{Items: inlineItems(n)}}
	if _, err := env.api.Submit(ctx, req); err != nil {
		t.Fatalf("submit: %v", err)
	}

	deadline := time.Now().Add(3 * time.Minute)
	for {
		v, err := env.api.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if v.Census != nil && v.Census.Withheld == n {
			if v.Status != api.StatusRunning || v.Census.Failed != 0 || v.Live == nil || v.Live.Withheld != n {
				t.Fatalf("withheld: status %s, census %+v, live %+v; want running, none failed", v.Status, v.Census, v.Live)
			}
			if _, ok := v.Halts[subject]; !ok {
				t.Fatalf("halts %v, want one on %s", v.Halts, subject)
			}
			break
		}
		if time.Now().After(deadline) || v.Status.Finished() {
			t.Fatalf("no %d items withheld: status %s, census %+v", n, v.Status, v.Census)
		}
		time.Sleep(time.Second)
	}
	page, err := env.api.Items(ctx, id, api.OutcomeWithheld, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != n || page.Items[0].Hold == nil || page.Items[0].Hold.Subject != subject || page.Items[0].Next == "" {
		t.Fatalf("withheld listing: %d items, first %+v", len(page.Items), page.Items[0])
	}
	t.Logf("withheld after %d refused calls; first: %s", refused.Load(), page.Items[0].Next)

	put("Bearer right")
	before := refused.Load()
	res, err := env.api.LiftAll(ctx, id, subject)
	if err != nil || !res.Lifted || res.Woken != n {
		t.Fatalf("lift: %+v %v; want lifted, %d woken", res, err, n)
	}
	v := wait(t, id)
	if v.Status != api.StatusCompleted || v.Census.Succeeded != n || v.Census.Withheld != 0 || answered.Load() != n {
		t.Fatalf("after the lift: %s %+v, %d answered; want completed, %d succeeded, each answered once", v.Status, v.Census, answered.Load(), n)
	}
	// The item processes' caches held the refused value (SSM values are
	// cached for minutes); a woken item reads the secret again first.
	if got := refused.Load() - before; got != 0 {
		t.Errorf("%d calls refused after the lift, want none: a woken item sent the cached, refused value", got)
	}
	// The report keeps the lift: the halt as it stood, and when lifted.
	rep, err := env.api.Report(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if l := rep.Lifted; l == nil || l.Lifts != 1 || l.Last == nil || l.Last.Subject != subject || l.Last.Reason == "" || !l.Last.LiftedAt.After(l.Last.Since) {
		t.Fatalf("report lifted %+v; want 1 lift of the halt on %s, with its reason, lifted after it stood", l, subject)
	}
	t.Logf("report: %+v, last %+v", *rep.Lifted, *rep.Lifted.Last)
}
