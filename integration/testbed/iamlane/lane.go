// Package iamlane is the IAM-checked lane: a faultproxy.Gate that
// evaluates every AWS call a bulkrun function makes against that
// function's role as deployed, the way AWS would, because the emulator
// evaluates no IAM policy at all.
//
// # Attribution
//
// bulkrun's functions build their AWS clients with the SDK's application
// id "bulkrun-{function}" (config.AppID), which the SDK writes into every
// request's User-Agent as "app/bulkrun-item" (and AWS into CloudTrail's
// userAgent). The lane reads it: a call carrying it is the function's;
// a call signed with the emulator's function credentials
// (FunctionAccessKey) by the Go SDK without it is an attribution gap,
// reported as such; every other call (the tests' own, the CDK CLI's) is
// not checked.
//
// # Policies
//
// A call of a deployed function is evaluated against its role as the
// stack deployed it: the stack's template read back from the emulator's
// CloudFormation (GetTemplate), its intrinsic functions resolved with the
// physical ids of DescribeStackResources, giving each function's identity
// policies (its AWS::IAM::Policy resources and managed policies) and the
// bucket and queue policies. A call made in the test process by the same
// code (the integration harness's submit, item, finalize and sweep on
// their own table, bucket and queue) carries the header BindingHeader
// naming a binding registered on the control endpoint: the same policies
// with the harness's resources standing in for the stack's.
//
// Each call becomes the authorizations Rules lists for its operation
// (DeleteObjects: s3:DeleteObject per key; TransactWriteItems: each
// operation's action on its table; …), each evaluated by
// @cloud-copilot/iam-simulate (Evaluator) with aws:SecureTransport true —
// on AWS the SDK speaks HTTPS; here the emulator is plain HTTP, which the
// SSL-only resource policies would otherwise deny.
//
// # Denials
//
// Enforcing (the default), a denied call is answered as AWS answers it:
// AccessDenied in the service's wire shape, for DeleteObjects per key.
// Auditing, it reaches the emulator anyway. Either way the denial is
// recorded with the function, the action, the resource, the operation and
// the tests it belongs to (a test registers its batch ids; a denial names
// the tests whose batch ids appear in the call, or its binding's test),
// and GET /_iam answers the record.
package iamlane

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	kmstypes "github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/shared/config"
)

// BindingHeader names the binding a test-process call is evaluated under.
const BindingHeader = "X-Bulkrun-Iam-Binding"

// FunctionAccessKey is the access key id MiniStack gives every function
// it runs.
const FunctionAccessKey = "000000000000"

// Options configure a Lane.
type Options struct {
	// Upstream is the emulator's URL, where the lane reads the stack.
	Upstream string
	// Stack is the stack whose functions are checked (config.DefaultStackName).
	Stack string
	// Region and Account are the emulator's (us-east-1, 000000000000).
	Region, Account string
	// Audit records denials without refusing the calls.
	Audit bool
	// Evaluator evaluates the authorizations.
	Evaluator *Evaluator
	// Log receives one line per denial; nil discards.
	Log *slog.Logger
}

// Denial is one call the lane found its function may not make.
type Denial struct {
	Time      time.Time `json:"time"`
	Function  string    `json:"function"`
	Origin    string    `json:"origin"` // "deployed" or "test process (binding B)"
	Operation string    `json:"operation"`
	Action    string    `json:"action"`
	Resource  string    `json:"resource"`
	Decision  Decision  `json:"decision"`
	Tests     []string  `json:"tests,omitempty"`
	Count     int       `json:"count"` // calls denied alike (same function, action, resource pattern)
	// Expected marks a denial its binding asked for (Binding.Expect): a
	// test provoking it on purpose.
	Expected bool `json:"expected,omitempty"`
}

// String names the grant that is missing, and where it was seen.
func (d Denial) String() string {
	why := "no statement of its role allows it"
	if d.Decision == ExplicitlyDenied {
		why = "a Deny statement matches it"
	}
	tests := "no test registered its batch"
	if len(d.Tests) > 0 {
		tests = "test " + strings.Join(d.Tests, ", ")
	}
	expected := ""
	if d.Expected {
		expected = " [expected]"
	}
	return fmt.Sprintf("IAM lane: function %s (%s) was denied %s on %s calling %s (%s; %d call(s); %s)%s",
		d.Function, d.Origin, d.Action, d.Resource, d.Operation, why, d.Count, tests, expected)
}

// Problem is a call the lane could not check: unattributed, unmapped, or
// the policies could not be read or evaluated.
type Problem struct {
	Time    time.Time `json:"time"`
	Call    string    `json:"call"`
	Message string    `json:"message"`
	Tests   []string  `json:"tests,omitempty"`
	Count   int       `json:"count"`
}

// Clean says whether the report holds no denial and no loop stop but
// expected ones, and no unchecked call.
func (r Report) Clean() bool {
	for _, d := range r.Denials {
		if !d.Expected {
			return false
		}
	}
	for _, l := range r.Loops {
		if !l.Expected {
			return false
		}
	}
	return len(r.Problems) == 0
}

// Report is what GET /_iam answers.
type Report struct {
	Stack    string    `json:"stack"`
	Mode     string    `json:"mode"` // "enforce" or "audit"
	Checked  int64     `json:"checked"`
	Allowed  int64     `json:"allowed"`
	Denials  []Denial  `json:"denials"`
	Problems []Problem `json:"problems"`
	// Loops are the messages stopped as Lambda's recursive loop detection
	// would stop them (rules.go).
	Loops []LoopStop `json:"loops"`
}

// Binding stands a test's own resources in for the stack's.
type Binding struct {
	ID   string `json:"id"`
	Test string `json:"test"`
	// Names maps "table", "bucket", "items-queue" (an ARN) and
	// "effect-table" (the table its staged writes go to) to the test's.
	Names map[string]string `json:"names"`
	// Revoke takes actions out of functions' roles under this binding
	// (function → actions): a test shows what the lane does when a grant
	// is missing, without deploying a stack that lacks it.
	Revoke map[string][]string `json:"revoke,omitempty"`
	// Enforce refuses denied calls under this binding even when the lane
	// only audits.
	Enforce bool `json:"enforce,omitempty"`
	// Expect lists the actions the test denies on purpose (with Revoke):
	// their denials are recorded as expected.
	Expect []string `json:"expect,omitempty"`
}

// Lane is the IAM-checked lane; a faultproxy.Gate.
type Lane struct {
	opts Options
	cf   *cloudformation.Client
	kms  *kms.Client

	mu       sync.Mutex
	deployed *Deployed
	version  string // the stack's id and last update, when loaded
	checkAt  time.Time
	sets     map[string]*policySet // by function + "\x00" + binding
	bindings map[string]Binding
	tests    map[string]string // batch id → test
	checked  int64
	allowed  int64
	denials  map[string]*Denial
	problems map[string]*Problem
	hops     map[string]int // binding + message identity → sends in its chain (rules.go)
	loops    []LoopStop
	keys     map[string]bool // KMS key ARN → customer managed (KMSRule)
	// keyPolicies are the keys' policies (KMSRule), by key ARN.
	keyPolicies map[string]Document
	// machines are the batches' state machines (a test's registration),
	// by batch id; taskBatches the batch of each task token a submit
	// carried (learnTask).
	machines    map[string]string
	taskBatches map[string]string
}

var _ faultproxy.Gate = (*Lane)(nil)

// New returns a Lane over opts.
func New(opts Options) *Lane {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Stack == "" {
		opts.Stack = config.DefaultStackName
	}
	cf := cloudformation.New(cloudformation.Options{
		Region:       opts.Region,
		BaseEndpoint: aws.String(opts.Upstream),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	km := kms.New(kms.Options{
		Region:       opts.Region,
		BaseEndpoint: aws.String(opts.Upstream),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	return &Lane{opts: opts, cf: cf, kms: km, sets: map[string]*policySet{}, bindings: map[string]Binding{},
		tests: map[string]string{}, denials: map[string]*Denial{}, problems: map[string]*Problem{}, hops: map[string]int{}, keys: map[string]bool{}, keyPolicies: map[string]Document{},
		machines: map[string]string{}, taskBatches: map[string]string{}}
}

var appIDPattern = regexp.MustCompile(`(?:^| )app/` + regexp.QuoteMeta(config.AppIDPrefix) + `([a-z]+)(?: |$)`)

// function returns the bulkrun function a request comes from, "" when none.
func function(r *http.Request) string {
	m := appIDPattern.FindStringSubmatch(r.Header.Get("User-Agent"))
	if m == nil {
		return ""
	}
	return m[1]
}

// learnTask records the task token and batch id of a submit through the
// API (POST …/batches with "task_token"), whoever sends it.
func (l *Lane) learnTask(c faultproxy.Call, body []byte) {
	if c.Service != "execute-api" || !bytes.Contains(body, []byte(`"task_token"`)) {
		return
	}
	var in struct {
		BatchID   string `json:"batch_id"`
		TaskToken string `json:"task_token"`
	}
	if json.Unmarshal(body, &in) != nil || in.BatchID == "" || in.TaskToken == "" {
		return
	}
	l.mu.Lock()
	l.taskBatches[in.TaskToken] = in.BatchID
	l.mu.Unlock()
}

// taskMachine returns the state machine ARN of token's batch, "" when
// unknown.
func (l *Lane) taskMachine(token string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.machines[l.taskBatches[token]]
}

// Admit implements faultproxy.Gate.
func (l *Lane) Admit(r *http.Request, c faultproxy.Call, body []byte) *faultproxy.Refusal {
	if f := limit(r, c, body); f != nil {
		return f
	}
	l.learnTask(c, body)
	fn := function(r)
	if fn == "" {
		if c.AccessKey == FunctionAccessKey && strings.Contains(r.Header.Get("User-Agent"), "aws-sdk-go-v2") {
			l.problem(c, r, body, "a Go SDK call signed with the functions' credentials carries no app/"+config.AppIDPrefix+"{function} user agent: build the client from the function's aws.Config (handler.Build sets AppID)")
		}
		return nil
	}
	rule, ok := ruleFor(c)
	if !ok {
		l.problem(c, r, body, fmt.Sprintf("function %s calls %s, which the lane's table (iamlane.Rules) does not map to IAM actions: add its row from the Service Authorization Reference", fn, c.String()))
		return nil
	}
	req := &request{call: c, http: r, body: body, region: l.opts.Region, account: l.opts.Account, taskMachine: l.taskMachine}
	needs, err := rule.needs(req)
	if err != nil {
		l.problem(c, r, body, fmt.Sprintf("function %s, %s: %v", fn, c.String(), err))
		return nil
	}
	binding := r.Header.Get(BindingHeader)
	set, role, err := l.policies(fn, binding)
	if err != nil {
		l.problem(c, r, body, fmt.Sprintf("function %s, %s: %v", fn, c.String(), err))
		return nil
	}
	denied := make([]bool, len(needs))
	var first *Denial
	for i, n := range needs {
		dec, err := l.decide(set, role, n)
		if err != nil {
			l.problem(c, r, body, fmt.Sprintf("function %s, %s: %v", fn, c.String(), err))
			return nil
		}
		if dec == Allowed {
			continue
		}
		denied[i] = true
		d := l.deny(fn, binding, c.Operation, n, dec, r, body)
		if first == nil {
			first = &d
		}
	}
	l.mu.Lock()
	l.checked++
	if first == nil {
		l.allowed++
	}
	l.mu.Unlock()
	if first == nil && l.loop(r, c, body, fn, binding) {
		// Dropped as Lambda's loop detection drops it: the sender sees
		// SQS's answer; nothing is delivered.
		var in struct{ MessageBody string }
		_ = json.Unmarshal(body, &in)
		sum := md5.Sum([]byte(in.MessageBody))
		answer, _ := json.Marshal(map[string]string{"MessageId": fmt.Sprintf("loop-stopped-%x", sum[:4]), "MD5OfMessageBody": hex.EncodeToString(sum[:])})
		return &faultproxy.Refusal{Status: http.StatusOK, Answer: answer}
	}
	if first == nil || !l.enforcing(binding) {
		return nil
	}
	f := &faultproxy.Refusal{Status: http.StatusForbidden, Code: "AccessDenied", Message: accessDeniedMessage(role.ARN, *first)}
	switch c.Service {
	case "dynamodb", "events", "ssm", "secretsmanager":
		f.Status, f.Code = http.StatusBadRequest, "AccessDeniedException"
	case "lambda":
		f.Code = "AccessDeniedException"
	}
	if c.String() == "s3.DeleteObjects" {
		f.Entries = denied
	}
	return f
}

// Answered implements faultproxy.Gate: a 404 to GetObject or HeadObject
// is a 403 unless the function may list the bucket (NotFoundRule); an
// object the answer says is encrypted with a customer managed KMS key is
// a 403 unless the function may use the key through S3 (KMSRule).
func (l *Lane) Answered(r *http.Request, c faultproxy.Call, status int, header http.Header) *faultproxy.Refusal {
	if c.Service == "s3" && (c.Operation == "GetObject" || c.Operation == "HeadObject") && status < 300 {
		return l.kmsAnswered(r, c, header)
	}
	if status != http.StatusNotFound || c.Service != "s3" || (c.Operation != "GetObject" && c.Operation != "HeadObject") {
		return nil
	}
	fn := function(r)
	if fn == "" {
		return nil
	}
	req := &request{call: c, http: r, region: l.opts.Region, account: l.opts.Account}
	bucket, _, err := req.s3Path()
	if err != nil {
		return nil
	}
	binding := r.Header.Get(BindingHeader)
	set, role, err := l.policies(fn, binding)
	if err != nil {
		return nil
	}
	n := Need{Action: "s3:ListBucket", Resource: "arn:aws:s3:::" + bucket}
	dec, err := l.decide(set, role, n)
	if err != nil || dec == Allowed {
		return nil
	}
	d := l.deny(fn, binding, c.Operation+" (answered 404)", n, dec, r, nil)
	if !l.enforcing(binding) {
		return nil
	}
	return &faultproxy.Refusal{Status: http.StatusForbidden, Code: "AccessDenied", Message: accessDeniedMessage(role.ARN, d)}
}

// KMSRule is the other authorization an answer adds: reading an object
// that S3 encrypted with a KMS key (SSE-KMS) needs kms:Decrypt on that key,
// which S3 asks for on the caller's behalf ("Using server-side encryption
// with AWS KMS keys (SSE-KMS)", Amazon S3 user guide: "you must have
// permission to use the kms:Decrypt action"), with kms:ViaService the S3
// endpoint of the key's Region. Keys AWS manages (aws/s3) are not
// checked: their policy lets the account use them through S3.
var KMSRule = Rule{Service: "s3", Operation: "GetObject, HeadObject of an SSE-KMS object", Actions: "kms:Decrypt", Resource: "the object's customer managed key (kms:ViaService s3.REGION.amazonaws.com)"}

// kmsAnswered applies KMSRule to an answer.
func (l *Lane) kmsAnswered(r *http.Request, c faultproxy.Call, header http.Header) *faultproxy.Refusal {
	key := header.Get("X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id")
	fn := function(r)
	if fn == "" || header.Get("X-Amz-Server-Side-Encryption") != "aws:kms" || key == "" || !l.customerKey(key) {
		return nil
	}
	binding := r.Header.Get(BindingHeader)
	set, role, err := l.policies(fn, binding)
	if err == nil {
		set, err = l.withKeyPolicy(set, key)
	}
	if err != nil {
		l.problem(c, r, nil, fmt.Sprintf("function %s, %s of an SSE-KMS object: %v", fn, c.String(), err))
		return nil
	}
	region := l.opts.Region
	if parts := strings.Split(key, ":"); len(parts) > 3 {
		region = parts[3]
	}
	n := Need{Action: "kms:Decrypt", Resource: key, Context: map[string][]string{"kms:ViaService": {"s3." + region + ".amazonaws.com"}}}
	dec, err := l.decide(set, role, n)
	if err != nil {
		l.problem(c, r, nil, fmt.Sprintf("function %s, %s: %v", fn, c.String(), err))
		return nil
	}
	l.mu.Lock()
	l.checked++
	if dec == Allowed {
		l.allowed++
	}
	l.mu.Unlock()
	if dec == Allowed {
		return nil
	}
	d := l.deny(fn, binding, c.Operation+" (SSE-KMS)", n, dec, r, nil)
	if !l.enforcing(binding) {
		return nil
	}
	return &faultproxy.Refusal{Status: http.StatusForbidden, Code: "AccessDenied", Message: accessDeniedMessage(role.ARN, d)}
}

// withKeyPolicy returns set with key's policy (GetKeyPolicy "default" of
// the emulator's KMS) as a resource policy: a key's own policy decides
// whether IAM policies may grant its use at all ("Key policies in AWS
// KMS", AWS KMS developer guide), and the evaluator needs it.
func (l *Lane) withKeyPolicy(set *policySet, key string) (*policySet, error) {
	l.mu.Lock()
	doc, ok := l.keyPolicies[key]
	l.mu.Unlock()
	if !ok {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := l.kms.GetKeyPolicy(ctx, &kms.GetKeyPolicyInput{KeyId: aws.String(key), PolicyName: aws.String("default")})
		if err != nil {
			return nil, fmt.Errorf("key policy of %s: %w", key, err)
		}
		if err := json.Unmarshal([]byte(aws.ToString(out.Policy)), &doc); err != nil {
			return nil, fmt.Errorf("key policy of %s: %w", key, err)
		}
		l.mu.Lock()
		l.keyPolicies[key] = doc
		l.mu.Unlock()
	}
	out := &policySet{key: set.key + "\x00key\x00" + key, identity: set.identity, resource: map[string]Document{"key:" + key: doc}}
	for k, v := range set.resource {
		out.resource[k] = v
	}
	return out, nil
}

// customerKey says whether key (an ARN) is a customer managed key of the
// emulator's KMS (DescribeKey's KeyManager), remembered per key; a key
// it cannot describe counts as customer managed.
func (l *Lane) customerKey(key string) bool {
	l.mu.Lock()
	v, ok := l.keys[key]
	l.mu.Unlock()
	if ok {
		return v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := l.kms.DescribeKey(ctx, &kms.DescribeKeyInput{KeyId: aws.String(key)})
	customer := err != nil || out.KeyMetadata == nil || out.KeyMetadata.KeyManager != kmstypes.KeyManagerTypeAws
	l.mu.Lock()
	l.keys[key] = customer
	l.mu.Unlock()
	return customer
}

// enforcing says whether denied calls under binding are refused.
func (l *Lane) enforcing(binding string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.opts.Audit || l.bindings[binding].Enforce
}

// accessDeniedMessage is AWS's message for a denial.
func accessDeniedMessage(roleARN string, d Denial) string {
	session := strings.Replace(roleARN, ":iam::", ":sts::", 1)
	session = strings.Replace(session, ":role/", ":assumed-role/", 1) + "/" + d.Function
	why := "because no identity-based policy allows the " + d.Action + " action"
	if d.Decision == ExplicitlyDenied {
		why = "with an explicit deny"
	}
	return fmt.Sprintf("User: %s is not authorized to perform: %s on resource: %s %s", session, d.Action, d.Resource, why)
}

// decide evaluates one authorization with the context AWS would see.
func (l *Lane) decide(set *policySet, role Role, n Need) (Decision, error) {
	if slices.Contains(resourceScoped, n.Action) {
		return decideOnResource(set.identity, n)
	}
	rpKey := ""
	if strings.HasPrefix(n.Resource, "arn:aws:s3:::") {
		bucket, _, _ := strings.Cut(strings.TrimPrefix(n.Resource, "arn:aws:s3:::"), "/")
		if _, ok := set.resource["bucket:"+bucket]; ok {
			rpKey = "bucket:" + bucket
		}
	} else if _, ok := set.resource["queue:"+n.Resource]; ok {
		rpKey = "queue:" + n.Resource
	} else if _, ok := set.resource["key:"+n.Resource]; ok {
		rpKey = "key:" + n.Resource
	}
	ctx := map[string]string{
		"aws:SecureTransport":  "true",
		"aws:PrincipalArn":     role.ARN,
		"aws:PrincipalAccount": l.opts.Account,
	}
	return l.opts.Evaluator.Evaluate(set, role.ARN, l.opts.Account, n, rpKey, ctx)
}

// resourceScoped are the actions the Service Authorization Reference
// lists without a resource type (iam-simulate then accepts only "*" as
// the request's resource) but AWS authorizes on a resource all the same:
// Step Functions' task answers, on the state machine whose task issued
// the token (rules.go, states). decideOnResource evaluates them.
var resourceScoped = []string{"states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat"}

// decideOnResource evaluates n against identity policies the way IAM
// matches a statement: an Allow whose Action and Resource patterns
// (wildcards * and ?; actions case-insensitive) match, and no Deny that
// does. A matching statement with a Condition, NotAction or NotResource
// is not evaluated here: an error (the call is reported unchecked).
func decideOnResource(identity []NamedPolicy, n Need) (Decision, error) {
	dec := ImplicitlyDenied
	for _, p := range identity {
		for _, st := range statements(p.Policy["Statement"]) {
			if st["NotAction"] != nil || st["NotResource"] != nil {
				return "", fmt.Errorf("policy %s: a statement with NotAction or NotResource", p.Name)
			}
			if !anyMatch(st["Action"], n.Action, true) || !anyMatch(st["Resource"], n.Resource, false) {
				continue
			}
			if st["Condition"] != nil {
				return "", fmt.Errorf("policy %s: a statement with a Condition matches %s on %s", p.Name, n.Action, n.Resource)
			}
			switch st["Effect"] {
			case "Deny":
				return ExplicitlyDenied, nil
			case "Allow":
				dec = Allowed
			}
		}
	}
	return dec, nil
}

// statements returns a policy's Statement as a list.
func statements(v any) []map[string]any {
	switch x := v.(type) {
	case map[string]any:
		return []map[string]any{x}
	case []any:
		var out []map[string]any
		for _, e := range x {
			if m, ok := e.(map[string]any); ok {
				out = append(out, m)
			}
		}
		return out
	}
	return nil
}

// anyMatch reports whether one of the patterns (a string or a list)
// matches value.
func anyMatch(patterns any, value string, fold bool) bool {
	var list []any
	switch x := patterns.(type) {
	case string:
		list = []any{x}
	case []any:
		list = x
	}
	for _, p := range list {
		s, ok := p.(string)
		if !ok {
			continue
		}
		if fold {
			s, value = strings.ToLower(s), strings.ToLower(value)
		}
		re := "^" + strings.NewReplacer(`\*`, ".*", `\?`, ".").Replace(regexp.QuoteMeta(s)) + "$"
		if ok, _ := regexp.MatchString(re, value); ok {
			return true
		}
	}
	return false
}

// deny records a denial and returns it.
func (l *Lane) deny(fn, binding, op string, n Need, dec Decision, r *http.Request, body []byte) Denial {
	origin := "deployed"
	if binding != "" {
		origin = "test process"
	}
	tests := l.testsOf(r, body, binding)
	key := strings.Join([]string{fn, origin, op, n.Action, resourcePattern(n.Resource), strings.Join(tests, ",")}, "\x00")
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.denials[key]
	if !ok {
		d = &Denial{Time: time.Now().UTC(), Function: fn, Origin: origin, Operation: op, Action: n.Action, Resource: n.Resource, Decision: dec, Tests: tests,
			Expected: binding != "" && slices.Contains(l.bindings[binding].Expect, n.Action)}
		l.denials[key] = d
		l.opts.Log.Warn("denied", "denial", d.String())
	}
	d.Count++
	return *d
}

// resourcePattern groups resources for the record: an S3 object by its
// bucket and first two key segments (batches/{id}/…), anything else by
// itself.
func resourcePattern(arn string) string {
	if !strings.HasPrefix(arn, "arn:aws:s3:::") {
		return arn
	}
	parts := strings.SplitN(arn, "/", 4)
	if len(parts) == 4 {
		return strings.Join(parts[:3], "/") + "/*"
	}
	return arn
}

func (l *Lane) problem(c faultproxy.Call, r *http.Request, body []byte, msg string) {
	tests := l.testsOf(r, body, r.Header.Get(BindingHeader))
	key := c.String() + "\x00" + msg
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.problems[key]
	if !ok {
		p = &Problem{Time: time.Now().UTC(), Call: c.String(), Message: msg, Tests: tests}
		l.problems[key] = p
		l.opts.Log.Warn("unchecked", "call", c.String(), "problem", msg)
	}
	p.Count++
}

// testsOf names the tests a call belongs to: its binding's, or those whose
// registered batch ids appear in its path or body.
func (l *Lane) testsOf(r *http.Request, body []byte, binding string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b, ok := l.bindings[binding]; ok && binding != "" {
		return []string{b.Test}
	}
	hay := r.URL.Path + "\x00" + r.URL.RawQuery + "\x00" + string(body)
	seen := map[string]bool{}
	var out []string
	for id, test := range l.tests {
		if !seen[test] && strings.Contains(hay, id) {
			seen[test] = true
			out = append(out, test)
		}
	}
	slices.Sort(out)
	return out
}

// policies returns the policy set and role of fn under binding ("" for
// the deployed stack), loading the stack when it changed.
func (l *Lane) policies(fn, binding string) (*policySet, Role, error) {
	d, err := l.load()
	if err != nil {
		return nil, Role{}, err
	}
	role, ok := d.Roles[fn]
	if !ok {
		return nil, Role{}, fmt.Errorf("stack %s has no %s function", d.Stack, fn)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	key := fn + "\x00" + binding
	if s, ok := l.sets[key]; ok {
		return s, role, nil
	}
	var b Binding
	if binding != "" {
		if b, ok = l.bindings[binding]; !ok {
			return nil, Role{}, fmt.Errorf("unknown binding %q (register it: POST %s/bindings)", binding, faultproxy.GatePath)
		}
	}
	s := &policySet{resource: map[string]Document{}}
	swap := substitution(d.Names, b.Names)
	for _, p := range role.Policies {
		doc := revoke(swapDoc(p.Policy, swap), b.Revoke[fn])
		if sts, _ := doc["Statement"].([]any); len(sts) == 0 && len(b.Revoke[fn]) > 0 {
			continue // every statement revoked: as if the policy were not attached
		}
		s.identity = append(s.identity, NamedPolicy{Name: p.Name, Policy: doc})
	}
	for bucket, doc := range d.BucketPolicies {
		s.resource["bucket:"+swapString(bucket, swap)] = swapDoc(doc, swap)
	}
	for arn, doc := range d.QueuePolicies {
		s.resource["queue:"+swapString(arn, swap)] = swapDoc(doc, swap)
	}
	raw, _ := json.Marshal(struct {
		I []NamedPolicy
		R map[string]Document
	}{s.identity, s.resource})
	sum := sha256.Sum256(append([]byte(l.version+"\x00"), raw...))
	s.key = hex.EncodeToString(sum[:8])
	l.sets[key] = s
	return s, role, nil
}

// replacement is one name a binding stands in: every string equal to from,
// or starting with from+sep, gets to in its place.
type replacement struct{ from, to string }

// substitution lists the ARN replacements that put a binding's resources
// in the stack's place.
func substitution(stack, test map[string]string) []replacement {
	var out []replacement
	if t, ok := test["effect-table"]; ok && stack["effect-table"] != "" {
		out = append(out, replacement{"table/" + stack["effect-table"], "table/" + t})
	}
	if t, ok := test["table"]; ok && stack["table"] != "" {
		out = append(out, replacement{"table/" + stack["table"], "table/" + t})
	}
	if b, ok := test["bucket"]; ok && stack["bucket"] != "" {
		out = append(out, replacement{":::" + stack["bucket"], ":::" + b}, replacement{"\x01" + stack["bucket"], "\x01" + b})
	}
	if q, ok := test["items-queue"]; ok && stack["items-queue"] != "" {
		out = append(out, replacement{stack["items-queue"], q})
	}
	if k, ok := test["kms-key"]; ok && stack["kms-key"] != "" {
		out = append(out, replacement{stack["kms-key"], k})
	}
	return out
}

// swapString applies the replacements to s: a match must end s or be
// followed by "/" (an ARN's resource path). A bare bucket name (a bucket
// policy's key) is matched as "\x01"+name.
func swapString(s string, swap []replacement) string {
	for _, r := range swap {
		from := strings.TrimPrefix(r.from, "\x01")
		to := strings.TrimPrefix(r.to, "\x01")
		if strings.HasPrefix(r.from, "\x01") {
			if s == from {
				return to
			}
			continue
		}
		if i := strings.Index(s, from); i >= 0 {
			rest := s[i+len(from):]
			if rest == "" || rest[0] == '/' {
				return s[:i] + to + rest
			}
		}
	}
	return s
}

func swapDoc(doc Document, swap []replacement) Document {
	if len(swap) == 0 {
		return doc
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case string:
			return swapString(x, swap)
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				out[i] = walk(e)
			}
			return out
		case map[string]any:
			out := make(map[string]any, len(x))
			for k, e := range x {
				out[k] = walk(e)
			}
			return out
		}
		return v
	}
	return walk(doc).(map[string]any)
}

// revoke returns doc without actions in its statements' Action lists; a
// statement left without actions is dropped.
func revoke(doc Document, actions []string) Document {
	if len(actions) == 0 {
		return doc
	}
	sts, _ := doc["Statement"].([]any)
	var kept []any
	for _, st := range sts {
		m, _ := st.(map[string]any)
		c := make(map[string]any, len(m))
		for k, v := range m {
			c[k] = v
		}
		switch a := m["Action"].(type) {
		case string:
			if slices.Contains(actions, a) {
				continue
			}
		case []any:
			var left []any
			for _, e := range a {
				if !slices.Contains(actions, fmt.Sprint(e)) {
					left = append(left, e)
				}
			}
			if len(left) == 0 {
				continue
			}
			c["Action"] = left
		}
		kept = append(kept, c)
	}
	out := make(Document, len(doc))
	for k, v := range doc {
		out[k] = v
	}
	out["Statement"] = kept
	return out
}

// load returns the deployed stack's policies, reading them again when the
// stack changed (checked at most every two seconds).
func (l *Lane) load() (*Deployed, error) {
	l.mu.Lock()
	d, checkAt := l.deployed, l.checkAt
	l.mu.Unlock()
	if d != nil && time.Now().Before(checkAt) {
		return d, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := l.cf.DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(l.opts.Stack)})
	if err != nil || len(out.Stacks) == 0 {
		return nil, fmt.Errorf("stack %s: cannot read it (deploy it first: make deploy): %v", l.opts.Stack, err)
	}
	st := out.Stacks[0]
	version := aws.ToString(st.StackId) + "@" + aws.ToTime(st.CreationTime).String() + "@" + aws.ToTime(st.LastUpdatedTime).String() + "@" + string(st.StackStatus)
	l.mu.Lock()
	if l.deployed != nil && l.version == version {
		l.checkAt = time.Now().Add(2 * time.Second)
		d := l.deployed
		l.mu.Unlock()
		return d, nil
	}
	l.mu.Unlock()
	tpl, err := l.cf.GetTemplate(ctx, &cloudformation.GetTemplateInput{StackName: aws.String(l.opts.Stack)})
	if err != nil {
		return nil, fmt.Errorf("stack %s: template: %w", l.opts.Stack, err)
	}
	res, err := l.cf.DescribeStackResources(ctx, &cloudformation.DescribeStackResourcesInput{StackName: aws.String(l.opts.Stack)})
	if err != nil {
		return nil, fmt.Errorf("stack %s: resources: %w", l.opts.Stack, err)
	}
	physical := map[string]string{}
	for _, r := range res.StackResources {
		physical[aws.ToString(r.LogicalResourceId)] = aws.ToString(r.PhysicalResourceId)
	}
	inProgress := strings.HasSuffix(string(st.StackStatus), "_IN_PROGRESS")
	nd, err := parseDeployed(l.opts.Stack, aws.ToString(st.StackId), aws.ToString(tpl.TemplateBody), physical, l.opts.Region, l.opts.Account, inProgress)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deployed, l.version, l.checkAt = nd, version, time.Now().Add(2*time.Second)
	l.sets = map[string]*policySet{}
	return nd, nil
}

// Report returns the record so far.
func (l *Lane) Report() Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	rep := Report{Stack: l.opts.Stack, Mode: "enforce", Checked: l.checked, Allowed: l.allowed, Denials: []Denial{}, Problems: []Problem{}, Loops: append([]LoopStop{}, l.loops...)}
	if l.opts.Audit {
		rep.Mode = "audit"
	}
	for _, d := range l.denials {
		rep.Denials = append(rep.Denials, *d)
	}
	for _, p := range l.problems {
		rep.Problems = append(rep.Problems, *p)
	}
	slices.SortFunc(rep.Denials, func(a, b Denial) int { return a.Time.Compare(b.Time) })
	slices.SortFunc(rep.Problems, func(a, b Problem) int { return a.Time.Compare(b.Time) })
	return rep
}

// ServeHTTP serves the control endpoint:
//
//	GET    /_iam                     the Report; ?test=T keeps the denials and problems of test T
//	DELETE /_iam                     forget the denials, problems and counts
//	POST   /_iam/tests               {"test": T, "batch_ids": [...]}: calls naming these ids belong to T;
//	                                 with "state_machine": ARN, their task tokens are that state machine's tasks
//	POST   /_iam/bindings            a Binding: calls with BindingHeader B use its names
//	PUT    /_iam/mode                {"audit": true|false}
func (l *Lane) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, faultproxy.GatePath)
	switch {
	case path == "" && r.Method == http.MethodGet:
		rep := l.Report()
		if t := r.URL.Query().Get("test"); t != "" {
			rep.Denials = slices.DeleteFunc(rep.Denials, func(d Denial) bool { return !slices.Contains(d.Tests, t) })
			rep.Problems = slices.DeleteFunc(rep.Problems, func(p Problem) bool { return !slices.Contains(p.Tests, t) })
			rep.Loops = slices.DeleteFunc(rep.Loops, func(p LoopStop) bool { return !slices.Contains(p.Tests, t) })
		}
		writeJSON(w, rep)
	case path == "" && r.Method == http.MethodDelete:
		l.mu.Lock()
		l.denials, l.problems, l.checked, l.allowed = map[string]*Denial{}, map[string]*Problem{}, 0, 0
		l.hops, l.loops = map[string]int{}, nil
		l.mu.Unlock()
		writeJSON(w, l.Report())
	case path == "/tests" && r.Method == http.MethodPost:
		var in struct {
			Test         string   `json:"test"`
			BatchIDs     []string `json:"batch_ids"`
			StateMachine string   `json:"state_machine"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Test == "" {
			http.Error(w, "iamlane: want {\"test\": …, \"batch_ids\": […]}", http.StatusBadRequest)
			return
		}
		l.mu.Lock()
		for _, id := range in.BatchIDs {
			if id != "" {
				l.tests[id] = in.Test
				if in.StateMachine != "" {
					l.machines[id] = in.StateMachine
				}
			}
		}
		l.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case path == "/bindings" && r.Method == http.MethodPost:
		var b Binding
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.ID == "" || b.Test == "" {
			http.Error(w, "iamlane: want a binding {\"id\", \"test\", \"names\"}", http.StatusBadRequest)
			return
		}
		l.mu.Lock()
		l.bindings[b.ID] = b
		for k := range l.sets {
			if strings.HasSuffix(k, "\x00"+b.ID) {
				delete(l.sets, k)
			}
		}
		l.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case path == "/mode" && r.Method == http.MethodPut:
		var in struct {
			Audit bool `json:"audit"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, "iamlane: want {\"audit\": true|false}", http.StatusBadRequest)
			return
		}
		l.mu.Lock()
		l.opts.Audit = in.Audit
		l.mu.Unlock()
		writeJSON(w, l.Report())
	default:
		http.Error(w, "iamlane: GET or DELETE "+faultproxy.GatePath+", POST "+faultproxy.GatePath+"/tests or /bindings, PUT "+faultproxy.GatePath+"/mode", http.StatusNotFound)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
