package iamlane

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
)

// tableRow renders a rule as its row in docs/design/faults.md.
func tableRow(r Rule) string {
	return "| " + r.Service + " | " + r.Operation + " | " + r.Actions + " | " + strings.ReplaceAll(r.Resource, "|", "\\|") + " |"
}

// TestRulesTableInDocs keeps the table of docs/design/faults.md ("The
// IAM-checked lane") equal to Rules, NotFoundRule and KMSRule, row for row.
func TestRulesTableInDocs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "design", "faults.md"))
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- iamlane.Rules -->", "<!-- /iamlane.Rules -->"
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("docs/design/faults.md has no %s … %s table", begin, end)
	}
	var got []string
	for _, line := range strings.Split(doc[i+len(begin):j], "\n") {
		if strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| service ") && !strings.HasPrefix(line, "| ---") {
			got = append(got, line)
		}
	}
	var want []string
	for _, r := range append(Rules, NotFoundRule, KMSRule) {
		want = append(want, tableRow(r))
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("docs/design/faults.md's table differs from iamlane.Rules; it should read:\n%s", strings.Join(want, "\n"))
	}
}

func TestNeeds(t *testing.T) {
	const acct, region = "000000000000", "us-east-1"
	req := func(method, path string, header map[string]string, body string) *http.Request {
		r := httptest.NewRequest(method, "http://localhost"+path, strings.NewReader(body))
		for k, v := range header {
			r.Header.Set(k, v)
		}
		return r
	}
	for _, tt := range []struct {
		name string
		call faultproxy.Call
		r    *http.Request
		body string
		want []Need
	}{
		{"query on an index", faultproxy.Call{Service: "dynamodb", Operation: "Query"}, nil,
			`{"TableName":"t","IndexName":"attention","KeyConditionExpression":"apk = :a","ExpressionAttributeValues":{":a":{"S":"ATTN#3"}}}`,
			[]Need{{Action: "dynamodb:Query", Resource: "arn:aws:dynamodb:us-east-1:000000000000:table/t/index/attention", Context: map[string][]string{"dynamodb:LeadingKeys": {"ATTN#3"}}}}},
		{"query, legacy key conditions", faultproxy.Call{Service: "dynamodb", Operation: "Query"}, nil,
			`{"TableName":"t","KeyConditions":{"pk":{"ComparisonOperator":"EQ","AttributeValueList":[{"S":"B#x"}]}}}`,
			[]Need{{Action: "dynamodb:Query", Resource: "arn:aws:dynamodb:us-east-1:000000000000:table/t", Context: map[string][]string{"dynamodb:LeadingKeys": {"B#x"}}}}},
		{"transaction: each operation's action", faultproxy.Call{Service: "dynamodb", Operation: "TransactWriteItems"}, nil,
			`{"TransactItems":[{"Update":{"TableName":"t"}},{"Delete":{"TableName":"t"}},{"ConditionCheck":{"TableName":"u"}}]}`,
			[]Need{{Action: "dynamodb:UpdateItem", Resource: "arn:aws:dynamodb:us-east-1:000000000000:table/t"}, {Action: "dynamodb:DeleteItem", Resource: "arn:aws:dynamodb:us-east-1:000000000000:table/t"},
				{Action: "dynamodb:ConditionCheckItem", Resource: "arn:aws:dynamodb:us-east-1:000000000000:table/u"}}},
		{"batch write is its own action", faultproxy.Call{Service: "dynamodb", Operation: "BatchWriteItem"}, nil, `{"RequestItems":{"t":[]}}`,
			[]Need{{Action: "dynamodb:BatchWriteItem", Resource: "arn:aws:dynamodb:us-east-1:000000000000:table/t"}}},
		{"list parts", faultproxy.Call{Service: "s3", Operation: "ListParts"}, req("GET", "/b/batches/x/r.jsonl?uploadId=1", nil, ""), "",
			[]Need{{Action: "s3:ListMultipartUploadParts", Resource: "arn:aws:s3:::b/batches/x/r.jsonl"}}},
		{"complete multipart upload", faultproxy.Call{Service: "s3", Operation: "CompleteMultipartUpload"}, req("POST", "/b/k%20x?uploadId=1", nil, ""), "",
			[]Need{{Action: "s3:PutObject", Resource: "arn:aws:s3:::b/k x"}}},
		{"delete objects: per key", faultproxy.Call{Service: "s3", Operation: "DeleteObjects"}, req("POST", "/b?delete", nil, ""),
			`<Delete><Object><Key>a/1</Key></Object><Object><Key>a/2</Key></Object></Delete>`,
			[]Need{{Action: "s3:DeleteObject", Resource: "arn:aws:s3:::b/a/1"}, {Action: "s3:DeleteObject", Resource: "arn:aws:s3:::b/a/2"}}},
		{"send message batch", faultproxy.Call{Service: "sqs", Operation: "SendMessageBatch"}, nil, `{"QueueUrl":"http://localhost:14600/000000000000/q"}`,
			[]Need{{Action: "sqs:SendMessage", Resource: "arn:aws:sqs:us-east-1:000000000000:q"}}},
		{"invoke", faultproxy.Call{Service: "lambda", Operation: "Invoke"}, req("POST", "/2015-03-31/functions/fin/invocations", nil, ""), "",
			[]Need{{Action: "lambda:InvokeFunction", Resource: "arn:aws:lambda:us-east-1:000000000000:function:fin"}}},
		{"put events: default bus", faultproxy.Call{Service: "events", Operation: "PutEvents"}, nil, `{"Entries":[{},{}]}`,
			[]Need{{Action: "events:PutEvents", Resource: "arn:aws:events:us-east-1:000000000000:event-bus/default"}}},
		{"ssm parameter", faultproxy.Call{Service: "ssm", Operation: "GetParameter"}, nil, `{"Name":"/bulkrun/x"}`,
			[]Need{{Action: "ssm:GetParameter", Resource: "arn:aws:ssm:us-east-1:000000000000:parameter/bulkrun/x"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.r
			if r == nil {
				r = req("POST", "/", nil, tt.body)
			}
			rule, ok := ruleFor(tt.call)
			if !ok {
				t.Fatalf("no rule for %s", tt.call)
			}
			got, err := rule.needs(&request{call: tt.call, http: r, body: []byte(tt.body), region: region, account: acct})
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("needs = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// template is a deployed stack's template in the shape CDK writes.
const template = `{
 "Resources": {
  "Table": {"Type": "AWS::DynamoDB::Table", "Properties": {}},
  "Queue": {"Type": "AWS::SQS::Queue", "Properties": {}},
  "Role": {"Type": "AWS::IAM::Role", "Properties": {"ManagedPolicyArns": [{"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"]]}]}},
  "Policy": {"Type": "AWS::IAM::Policy", "Properties": {"Roles": [{"Ref": "Role"}], "PolicyDocument": {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": ["dynamodb:GetItem", "dynamodb:Query"], "Resource": [{"Fn::GetAtt": ["Table", "Arn"]}, {"Fn::Join": ["", [{"Fn::GetAtt": ["Table", "Arn"]}, "/index/*"]]}]},
    {"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": {"Fn::GetAtt": ["Queue", "Arn"]}},
    {"Effect": "Allow", "Action": "s3:GetObject", "Resource": {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::bucket-", {"Ref": "AWS::AccountId"}, "/*"]]}},
    {"Effect": "Allow", "Action": "s3:PutObject", "Resource": {"Fn::Join": ["", ["arn:aws:s3:::bulkrun-", {"Fn::Select": [2, {"Fn::Split": ["/", {"Ref": "AWS::StackId"}]}]}, "/batches/*"]]}}]}}},
  "Fn": {"Type": "AWS::Lambda::Function", "Properties": {"Role": {"Fn::GetAtt": ["Role", "Arn"]}}},
  "BucketPolicy": {"Type": "AWS::S3::BucketPolicy", "Properties": {"Bucket": {"Fn::Join": ["", ["bucket-", {"Ref": "AWS::AccountId"}]]}, "PolicyDocument": {"Statement": [
    {"Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "s3:*", "Resource": "*", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]}}}
 },
 "Outputs": {
  "SubmitFunctionName": {"Value": {"Ref": "Fn"}}, "ItemFunctionName": {"Value": {"Ref": "Fn"}},
  "FinalizeFunctionName": {"Value": {"Ref": "Fn"}}, "SweepFunctionName": {"Value": {"Ref": "Fn"}},
  "TableName": {"Value": {"Ref": "Table"}}, "ItemsQueueArn": {"Value": {"Fn::GetAtt": ["Queue", "Arn"]}},
  "BucketName": {"Value": {"Fn::Join": ["", ["bucket-", {"Ref": "AWS::AccountId"}]]}}
 }
}`

func deployedForTest(t *testing.T) *Deployed {
	t.Helper()
	d, err := parseDeployed("s", "arn:aws:cloudformation:us-east-1:000000000000:stack/s/5e1b2c3d-0000-4000-8000-000000000000", template, map[string]string{
		"Table": "s-Table-1", "Queue": "http://localhost:14600/000000000000/s-Queue-1", "Role": "s-Role-1", "Fn": "s-Fn-1",
	}, "us-east-1", "000000000000", false)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestParseDeployed(t *testing.T) {
	d := deployedForTest(t)
	role := d.Roles["item"]
	if role.ARN != "arn:aws:iam::000000000000:role/s-Role-1" || len(role.Policies) != 2 {
		t.Fatalf("role %+v", role)
	}
	b, _ := json.Marshal(role.Policies[1].Policy)
	for _, want := range []string{`"arn:aws:dynamodb:us-east-1:000000000000:table/s-Table-1"`, `"arn:aws:dynamodb:us-east-1:000000000000:table/s-Table-1/index/*"`,
		`"arn:aws:sqs:us-east-1:000000000000:s-Queue-1"`, `"arn:aws:s3:::bucket-000000000000/*"`,
		`"arn:aws:s3:::bulkrun-5e1b2c3d-0000-4000-8000-000000000000/batches/*"`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("resolved policy %s lacks %s", b, want)
		}
	}
	if _, ok := d.BucketPolicies["bucket-000000000000"]; !ok {
		t.Errorf("bucket policies %v", d.BucketPolicies)
	}
	if d.Names["table"] != "s-Table-1" || d.Names["bucket"] != "bucket-000000000000" || d.Names["items-queue"] != "arn:aws:sqs:us-east-1:000000000000:s-Queue-1" {
		t.Errorf("names %v", d.Names)
	}
}

func TestBindingSubstitutes(t *testing.T) {
	d := deployedForTest(t)
	swap := substitution(d.Names, map[string]string{"table": "h", "bucket": "hb", "items-queue": "arn:aws:sqs:us-east-1:000000000000:hq"})
	for in, want := range map[string]string{
		"arn:aws:dynamodb:us-east-1:000000000000:table/s-Table-1":         "arn:aws:dynamodb:us-east-1:000000000000:table/h",
		"arn:aws:dynamodb:us-east-1:000000000000:table/s-Table-1/index/*": "arn:aws:dynamodb:us-east-1:000000000000:table/h/index/*",
		"arn:aws:dynamodb:us-east-1:000000000000:table/s-Table-10":        "arn:aws:dynamodb:us-east-1:000000000000:table/s-Table-10",
		"arn:aws:s3:::bucket-000000000000/batches/*":                      "arn:aws:s3:::hb/batches/*",
		"arn:aws:s3:::bucket-000000000000":                                "arn:aws:s3:::hb",
		"bucket-000000000000":                                             "hb",
		"arn:aws:sqs:us-east-1:000000000000:s-Queue-1":                    "arn:aws:sqs:us-east-1:000000000000:hq",
	} {
		if got := swapString(in, swap); got != want {
			t.Errorf("swap(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestRevoke(t *testing.T) {
	doc := Document{"Statement": []any{
		map[string]any{"Effect": "Allow", "Action": []any{"s3:GetObject", "s3:ListMultipartUploadParts"}, "Resource": "*"},
		map[string]any{"Effect": "Allow", "Action": "s3:ListMultipartUploadParts", "Resource": "*"},
	}}
	got := revoke(doc, []string{"s3:ListMultipartUploadParts"})
	want := Document{"Statement": []any{map[string]any{"Effect": "Allow", "Action": []any{"s3:GetObject"}, "Resource": "*"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("revoke = %v, want %v", got, want)
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tt := range []struct {
		p, s string
		want bool
	}{
		{"arn:aws:s3:::b/*", "arn:aws:s3:::b/batches/x", true},
		{"arn:aws:s3:::b/batches/*", "arn:aws:s3:::b/incoming/x", false},
		{"arn:aws:s3:::b", "arn:aws:s3:::b/x", false},
		{"arn:aws:s3:::b?/*", "arn:aws:s3:::bc/x", true},
		{"*", "anything", true},
	} {
		if got := globMatch(tt.p, tt.s); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v", tt.p, tt.s, got)
		}
	}
}

// evaluatorDir is tools/iam, where `make tools` installs the evaluator.
var evaluatorDir = filepath.Join("..", "..", "..", "tools", "iam")

// TestEvaluatorDecides runs the pinned evaluator: an action the role
// grants is allowed, one it does not is implicitly denied, and the
// bucket's SSL-only policy denies a request that is not over TLS.
func TestEvaluatorDecides(t *testing.T) {
	if _, err := os.Stat(filepath.Join(evaluatorDir, "node_modules", "@cloud-copilot", "iam-simulate")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("tools/iam is not installed: make tools")
		}
		t.Skip("tools/iam is not installed (make tools)")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("no node")
	}
	ev, err := StartEvaluator(evaluatorDir)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	d := deployedForTest(t)
	set := &policySet{key: "t", identity: d.Roles["item"].Policies, resource: map[string]Document{"bucket:bucket-000000000000": d.BucketPolicies["bucket-000000000000"]}}
	role := d.Roles["item"].ARN
	tls := map[string]string{"aws:SecureTransport": "true"}
	for _, tt := range []struct {
		n       Need
		rp      string
		context map[string]string
		want    Decision
	}{
		{Need{Action: "dynamodb:GetItem", Resource: "arn:aws:dynamodb:us-east-1:000000000000:table/s-Table-1"}, "", tls, Allowed},
		{Need{Action: "dynamodb:DeleteItem", Resource: "arn:aws:dynamodb:us-east-1:000000000000:table/s-Table-1"}, "", tls, ImplicitlyDenied},
		{Need{Action: "dynamodb:Query", Resource: "arn:aws:dynamodb:us-east-1:000000000000:table/s-Table-1/index/attention"}, "", tls, Allowed},
		{Need{Action: "s3:GetObject", Resource: "arn:aws:s3:::bucket-000000000000/a/b"}, "bucket:bucket-000000000000", tls, Allowed},
		{Need{Action: "s3:ListBucket", Resource: "arn:aws:s3:::bucket-000000000000"}, "bucket:bucket-000000000000", tls, ImplicitlyDenied},
		{Need{Action: "s3:GetObject", Resource: "arn:aws:s3:::bucket-000000000000/c"}, "bucket:bucket-000000000000", map[string]string{"aws:SecureTransport": "false"}, ExplicitlyDenied},
	} {
		if tt.context["aws:SecureTransport"] == "false" {
			set = &policySet{key: "t-plain", identity: set.identity, resource: set.resource} // another cache key: another context
		}
		got, err := ev.Evaluate(set, role, "000000000000", tt.n, tt.rp, tt.context)
		if err != nil || got != tt.want {
			t.Errorf("%s on %s: %s, %v; want %s", tt.n.Action, tt.n.Resource, got, err, tt.want)
		}
	}
}

// TestLimits: the size limits the lane applies where the emulator applies
// none — PutEvents entries over 256 KiB, Invoke payloads over 6 MiB
// (synchronous) and 1 MiB (asynchronous) — each answered as AWS answers.
func TestLimits(t *testing.T) {
	detail := func(n int) string {
		return `{"Entries":[{"Source":"bulkrun","DetailType":"x","Detail":"` + strings.Repeat("a", n) + `"}]}`
	}
	for _, tt := range []struct {
		name   string
		call   faultproxy.Call
		header map[string]string
		body   string
		code   string
	}{
		{"put events within", faultproxy.Call{Service: "events", Operation: "PutEvents"}, nil, detail(PutEventsMaxBytes - 100), ""},
		{"put events over", faultproxy.Call{Service: "events", Operation: "PutEvents"}, nil, detail(PutEventsMaxBytes), "ValidationException"},
		{"invoke 6 MiB", faultproxy.Call{Service: "lambda", Operation: "Invoke"}, nil, strings.Repeat("a", LambdaSyncPayloadBytes), ""},
		{"invoke over 6 MiB", faultproxy.Call{Service: "lambda", Operation: "Invoke"}, nil, strings.Repeat("a", LambdaSyncPayloadBytes+1), "RequestEntityTooLargeException"},
		{"event over 1 MiB", faultproxy.Call{Service: "lambda", Operation: "Invoke"}, map[string]string{"X-Amz-Invocation-Type": "Event"}, strings.Repeat("a", LambdaAsyncPayloadBytes+1), "RequestEntityTooLargeException"},
	} {
		r := httptest.NewRequest("POST", "http://localhost/", nil)
		for k, v := range tt.header {
			r.Header.Set(k, v)
		}
		f := limit(r, tt.call, []byte(tt.body))
		got := ""
		if f != nil {
			got = f.Code
		}
		if got != tt.code {
			t.Errorf("%s: refusal %q, want %q", tt.name, got, tt.code)
		}
	}
}

func TestMessageIdentity(t *testing.T) {
	a := identity(`{"kind":"item","batch_id":"b","run":1,"key":"k","requeued":3}`)
	b := identity(`{"kind":"item","batch_id":"b","run":1,"key":"k","slot_waits":9}`)
	c := identity(`{"kind":"item","batch_id":"b","run":2,"key":"k"}`)
	if a == "" || a != b || a == c {
		t.Errorf("identities %q %q %q: want one chain per item and run, whatever its wait counters", a, b, c)
	}
}

// TestLaneAppliesLeadingKeysAndInvokeAsync runs calls through the rules
// table and the pinned evaluator against a hand-made role that may write
// in batches only attention rows (ATTN#…, as the item function's grant
// in infra/bulkrun reads) and read in batches and query only SLOT# rows,
// and invoke its function (lambda:InvokeFunction): AWS authorizes a
// BatchWriteItem, BatchGetItem and Query by dynamodb:LeadingKeys holding
// every partition key the call touches (DynamoDB developer guide, "Using
// IAM policy conditions for fine-grained access control"), and the
// deprecated InvokeAsync by its own action, lambda:InvokeAsync (Service
// Authorization Reference, "Actions, resources, and condition keys for
// AWS Lambda"), which the role lacks.
func TestLaneAppliesLeadingKeysAndInvokeAsync(t *testing.T) {
	ev := startEvaluatorForTest(t)
	const acct, region, table = "000000000000", "us-east-1", "arn:aws:dynamodb:us-east-1:000000000000:table/t"
	role := "arn:aws:iam::000000000000:role/hand-made"
	set := &policySet{key: "hand-made", identity: []NamedPolicy{{Name: "p", Policy: Document{"Version": "2012-10-17", "Statement": []any{
		map[string]any{"Effect": "Allow", "Action": "dynamodb:BatchWriteItem", "Resource": table,
			"Condition": map[string]any{"ForAllValues:StringLike": map[string]any{"dynamodb:LeadingKeys": []any{"ATTN#*"}}}},
		map[string]any{"Effect": "Allow", "Action": []any{"dynamodb:BatchGetItem", "dynamodb:Query"}, "Resource": table,
			"Condition": map[string]any{"ForAllValues:StringLike": map[string]any{"dynamodb:LeadingKeys": []any{"SLOT#*"}}}},
		map[string]any{"Effect": "Allow", "Action": "lambda:InvokeFunction", "Resource": "arn:aws:lambda:us-east-1:000000000000:function:fin"},
	}}}}}
	put := func(pks ...string) string {
		var b strings.Builder
		for i, pk := range pks {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"PutRequest":{"Item":{"pk":{"S":"` + pk + `"},"sk":{"S":"x"}}}}`)
		}
		return `{"RequestItems":{"t":[` + b.String() + `]}}`
	}
	for _, tt := range []struct {
		name string
		call faultproxy.Call
		path string
		body string
		want Decision
	}{
		{"batch write of attention rows", faultproxy.Call{Service: "dynamodb", Operation: "BatchWriteItem"}, "/", put("ATTN#b#0", "ATTN#b#1"), Allowed},
		{"batch write of an item row among attention rows", faultproxy.Call{Service: "dynamodb", Operation: "BatchWriteItem"}, "/", put("ATTN#b#0", "I#b#0"), ImplicitlyDenied},
		{"batch delete of an item row", faultproxy.Call{Service: "dynamodb", Operation: "BatchWriteItem"}, "/",
			`{"RequestItems":{"t":[{"DeleteRequest":{"Key":{"pk":{"S":"I#b#3"},"sk":{"S":"k"}}}}]}}`, ImplicitlyDenied},
		{"batch get of slot rows", faultproxy.Call{Service: "dynamodb", Operation: "BatchGetItem"}, "/",
			`{"RequestItems":{"t":{"Keys":[{"pk":{"S":"SLOT#b#1"},"sk":{"S":"1"}}]}}}`, Allowed},
		{"batch get of a batch row", faultproxy.Call{Service: "dynamodb", Operation: "BatchGetItem"}, "/",
			`{"RequestItems":{"t":{"Keys":[{"pk":{"S":"SLOT#b#1"},"sk":{"S":"1"}},{"pk":{"S":"B#b"},"sk":{"S":"B"}}]}}}`, ImplicitlyDenied},
		{"query of slot rows", faultproxy.Call{Service: "dynamodb", Operation: "Query"}, "/",
			`{"TableName":"t","KeyConditionExpression":"#p = :p AND #s > :s","ExpressionAttributeNames":{"#p":"pk","#s":"sk"},"ExpressionAttributeValues":{":p":{"S":"SLOT#b#1"},":s":{"S":"0"}}}`, Allowed},
		{"query of item rows", faultproxy.Call{Service: "dynamodb", Operation: "Query"}, "/",
			`{"TableName":"t","KeyConditionExpression":"#s > :s AND #p = :p","ExpressionAttributeNames":{"#p":"pk","#s":"sk"},"ExpressionAttributeValues":{":p":{"S":"I#b#1"},":s":{"S":"0"}}}`, ImplicitlyDenied},
		{"invoke", faultproxy.Call{Service: "lambda", Operation: "Invoke"}, "/2015-03-31/functions/fin/invocations", "{}", Allowed},
		{"invoke async", faultproxy.Call{Service: "lambda", Operation: "InvokeAsync"}, "/2014-11-13/functions/fin/invoke-async/", "{}", ImplicitlyDenied},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rule, ok := ruleFor(tt.call)
			if !ok {
				t.Fatalf("no rule for %s", tt.call)
			}
			r := httptest.NewRequest("POST", "http://localhost"+tt.path, strings.NewReader(tt.body))
			needs, err := rule.needs(&request{call: tt.call, http: r, body: []byte(tt.body), region: region, account: acct})
			if err != nil || len(needs) == 0 {
				t.Fatalf("needs: %v %v", needs, err)
			}
			got := Allowed
			for _, n := range needs {
				d, err := ev.Evaluate(set, role, acct, n, "", map[string]string{"aws:SecureTransport": "true"})
				if err != nil {
					t.Fatal(err)
				}
				if d != Allowed {
					got = d
				}
			}
			if got != tt.want {
				t.Errorf("%s: %s (needs %v), want %s", tt.name, got, needs, tt.want)
			}
		})
	}
}

// startEvaluatorForTest starts the pinned evaluator, skipping the test
// where tools/iam is not installed (failing under CI=true).
func startEvaluatorForTest(t *testing.T) *Evaluator {
	t.Helper()
	if _, err := os.Stat(filepath.Join(evaluatorDir, "node_modules", "@cloud-copilot", "iam-simulate")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("tools/iam is not installed: make tools")
		}
		t.Skip("tools/iam is not installed (make tools)")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("no node")
	}
	ev, err := StartEvaluator(evaluatorDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ev.Close() })
	return ev
}

// TestTaskAnswersNeedTheirStateMachine checks the lane's rule for Step
// Functions task answers: a token is checked on the state machine of the
// batch whose submit carried it, as a test registered it; a token of no
// registered batch cannot be checked (an unchecked call fails the run).
func TestTaskAnswersNeedTheirStateMachine(t *testing.T) {
	l := New(Options{Region: "us-east-1", Account: "000000000000"})
	const machine = "arn:aws:states:us-east-1:000000000000:stateMachine:orders"
	reg := httptest.NewRequest(http.MethodPost, "http://localhost"+faultproxy.GatePath+"/tests",
		strings.NewReader(`{"test": "TestX", "batch_ids": ["b1"], "state_machine": "`+machine+`"}`))
	w := httptest.NewRecorder()
	l.ServeHTTP(w, reg)
	if w.Code != http.StatusNoContent {
		t.Fatalf("register: %d %s", w.Code, w.Body)
	}
	l.learnTask(faultproxy.Call{Service: "execute-api"}, []byte(`{"batch_id": "b1", "pipeline": "enrich", "task_token": "tok-1"}`))
	l.learnTask(faultproxy.Call{Service: "execute-api"}, []byte(`{"batch_id": "b2", "pipeline": "enrich", "task_token": "tok-2"}`))
	for _, op := range []string{"SendTaskSuccess", "SendTaskFailure", "SendTaskHeartbeat"} {
		rule, ok := ruleFor(faultproxy.Call{Service: "states", Operation: op})
		if !ok {
			t.Fatalf("no rule for states.%s", op)
		}
		got, err := rule.needs(&request{body: []byte(`{"taskToken": "tok-1"}`), taskMachine: l.taskMachine})
		if want := []Need{{Action: "states:" + op, Resource: machine}}; err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s with a registered batch's token: %v, %v; want %v", op, got, err, want)
		}
		if got, err := rule.needs(&request{body: []byte(`{"taskToken": "tok-2"}`), taskMachine: l.taskMachine}); err == nil {
			t.Errorf("%s with an unregistered batch's token: %v, want an error", op, got)
		}
	}
}

// TestDecideOnResource checks the lane's own evaluation of the task
// answers (which iam-simulate takes only on "*"): an Allow on the state
// machine, by name or by wildcard, allows; another state machine's, or a
// Deny, does not.
func TestDecideOnResource(t *testing.T) {
	const sm = "arn:aws:states:us-east-1:000000000000:stateMachine:orders"
	need := Need{Action: "states:SendTaskSuccess", Resource: sm}
	policy := func(statements ...any) []NamedPolicy {
		return []NamedPolicy{{Name: "p", Policy: Document{"Statement": statements}}}
	}
	allow := func(action, resource any) map[string]any {
		return map[string]any{"Effect": "Allow", "Action": action, "Resource": resource}
	}
	for _, tt := range []struct {
		name     string
		identity []NamedPolicy
		want     Decision
	}{
		{"the state machine", policy(allow([]any{"states:SendTaskSuccess", "states:SendTaskFailure"}, sm)), Allowed},
		{"a wildcard", policy(allow("states:SendTask*", "arn:aws:states:us-east-1:000000000000:stateMachine:ord*")), Allowed},
		{"another state machine", policy(allow("states:SendTaskSuccess", sm+"-nightly")), ImplicitlyDenied},
		{"another action", policy(allow("states:SendTaskHeartbeat", sm)), ImplicitlyDenied},
		{"denied", policy(allow("states:*", "*"), map[string]any{"Effect": "Deny", "Action": "states:SendTaskSuccess", "Resource": sm}), ExplicitlyDenied},
	} {
		if got, err := decideOnResource(tt.identity, need); err != nil || got != tt.want {
			t.Errorf("%s: %s, %v; want %s", tt.name, got, err, tt.want)
		}
	}
}
