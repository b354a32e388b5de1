package iamlane

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/shared/config"
)

// Need is one authorization a request needs: an IAM action on a resource
// ARN, with the request's service-specific condition keys (DynamoDB's
// dynamodb:LeadingKeys: the partition key values an item operation
// touches).
type Need struct {
	Action   string
	Resource string
	Context  map[string][]string
}

// Rule maps one API operation to the IAM actions AWS authorizes it by, from
// the Service Authorization Reference ("Actions, resources, and condition
// keys for …", one page per service) and the services' own guides where
// the reference is silent. Rules is the one table of them; docs/design/faults.md
// ("The IAM-checked lane") shows it, and a test keeps the two equal.
type Rule struct {
	Service   string // the SigV4 signing name
	Operation string // the API operation
	Actions   string // the IAM actions, as the docs table shows them
	Resource  string // the resource each action is checked on
	needs     func(req *request) ([]Need, error)
}

// request is what a rule reads of one call.
type request struct {
	call    faultproxy.Call
	http    *http.Request
	body    []byte
	region  string
	account string
	// taskMachine answers the state machine ARN whose task a token
	// belongs to, "" when the lane does not know it (Lane.taskMachine).
	taskMachine func(token string) string
}

// Rules is the lane's table. An operation a bulkrun function calls that
// the table lacks fails the run ("unmapped"), so the table grows with the
// code.
var Rules = []Rule{
	// DynamoDB: "Actions, resources, and condition keys for Amazon
	// DynamoDB"; TransactWriteItems and TransactGetItems are no IAM actions:
	// each operation inside needs its own ("Using IAM with DynamoDB
	// transactions", DynamoDB developer guide).
	ddb("GetItem", "dynamodb:GetItem", "table"),
	ddb("PutItem", "dynamodb:PutItem", "table"),
	ddb("UpdateItem", "dynamodb:UpdateItem", "table"),
	ddb("DeleteItem", "dynamodb:DeleteItem", "table"),
	{Service: "dynamodb", Operation: "Query", Actions: "dynamodb:Query", Resource: "the table, or the index (`table/T/index/I`) when IndexName is set; dynamodb:LeadingKeys the key condition's partition key value", needs: ddbQuery},
	{Service: "dynamodb", Operation: "Scan", Actions: "dynamodb:Scan", Resource: "the table, or the index when IndexName is set", needs: ddbIndexed("dynamodb:Scan")},
	{Service: "dynamodb", Operation: "BatchGetItem", Actions: "dynamodb:BatchGetItem", Resource: "each table of RequestItems; dynamodb:LeadingKeys every partition key of its Keys", needs: ddbBatch("dynamodb:BatchGetItem")},
	{Service: "dynamodb", Operation: "BatchWriteItem", Actions: "dynamodb:BatchWriteItem", Resource: "each table of RequestItems (its own action, with no dependent actions: not PutItem or DeleteItem); dynamodb:LeadingKeys every partition key its puts and deletes touch", needs: ddbBatch("dynamodb:BatchWriteItem")},
	{Service: "dynamodb", Operation: "TransactWriteItems", Actions: "dynamodb:PutItem, dynamodb:UpdateItem, dynamodb:DeleteItem, dynamodb:ConditionCheckItem", Resource: "each operation's action on its table (Put, Update, Delete, ConditionCheck)", needs: ddbTransactWrite},
	{Service: "dynamodb", Operation: "TransactGetItems", Actions: "dynamodb:GetItem", Resource: "each Get's table", needs: ddbTransactGet},
	ddb("DescribeTable", "dynamodb:DescribeTable", "table"),
	ddb("UpdateTable", "dynamodb:UpdateTable", "table"),

	// S3: "Actions, resources, and condition keys for Amazon S3" and "Required
	// permissions for Amazon S3 API operations" (S3 API reference).
	s3obj("GetObject", "s3:GetObject"),
	s3obj("HeadObject", "s3:GetObject"),
	s3obj("PutObject", "s3:PutObject"),
	s3obj("CreateMultipartUpload", "s3:PutObject"),
	s3obj("UploadPart", "s3:PutObject"),
	s3obj("CompleteMultipartUpload", "s3:PutObject"),
	s3obj("AbortMultipartUpload", "s3:AbortMultipartUpload"),
	s3obj("ListParts", "s3:ListMultipartUploadParts"),
	s3obj("DeleteObject", "s3:DeleteObject"),
	s3obj("GetObjectTagging", "s3:GetObjectTagging"),
	s3obj("PutObjectTagging", "s3:PutObjectTagging"),
	{Service: "s3", Operation: "CopyObject", Actions: "s3:PutObject, s3:GetObject", Resource: "the new object; the source object (x-amz-copy-source)", needs: s3Copy},
	{Service: "s3", Operation: "UploadPartCopy", Actions: "s3:PutObject, s3:GetObject", Resource: "the object being uploaded; the source object (x-amz-copy-source)", needs: s3Copy},
	{Service: "s3", Operation: "DeleteObjects", Actions: "s3:DeleteObject", Resource: "each key of the request body", needs: s3DeleteObjects},
	s3bucket("ListObjectsV2", "s3:ListBucket"),
	s3bucket("ListObjects", "s3:ListBucket"),
	s3bucket("HeadBucket", "s3:ListBucket"),
	s3bucket("ListMultipartUploads", "s3:ListBucketMultipartUploads"),
	s3bucket("ListObjectVersions", "s3:ListBucketVersions"),
	s3bucket("GetBucketLocation", "s3:GetBucketLocation"),

	// SQS: "Actions, resources, and condition keys for Amazon SQS"; a
	// batch operation is authorized as its single form.
	sqsq("SendMessage", "sqs:SendMessage"),
	sqsq("SendMessageBatch", "sqs:SendMessage"),
	sqsq("ReceiveMessage", "sqs:ReceiveMessage"),
	sqsq("DeleteMessage", "sqs:DeleteMessage"),
	sqsq("DeleteMessageBatch", "sqs:DeleteMessage"),
	sqsq("ChangeMessageVisibility", "sqs:ChangeMessageVisibility"),
	sqsq("ChangeMessageVisibilityBatch", "sqs:ChangeMessageVisibility"),
	sqsq("GetQueueAttributes", "sqs:GetQueueAttributes"),
	{Service: "sqs", Operation: "GetQueueUrl", Actions: "sqs:GetQueueUrl", Resource: "the queue named by QueueName", needs: sqsByName},

	// Lambda: "Actions, resources, and condition keys for AWS Lambda".
	{Service: "lambda", Operation: "Invoke", Actions: "lambda:InvokeFunction", Resource: "the function (with its qualifier, if the call names one)", needs: lambdaFunction("lambda:InvokeFunction")},
	// InvokeAsync, the deprecated API, is authorized by an action of its
	// own; bulkrun never calls it (asynchronous invocations are Invoke
	// with InvocationType Event, lambda:InvokeFunction).
	{Service: "lambda", Operation: "InvokeAsync", Actions: "lambda:InvokeAsync", Resource: "the function (the deprecated API; bulkrun invokes asynchronously with Invoke)", needs: lambdaFunction("lambda:InvokeAsync")},
	{Service: "lambda", Operation: "GetFunctionConfiguration", Actions: "lambda:GetFunctionConfiguration", Resource: "the function", needs: lambdaFunction("lambda:GetFunctionConfiguration")},

	// EventBridge, SSM, Secrets Manager, STS.
	{Service: "events", Operation: "PutEvents", Actions: "events:PutEvents", Resource: "each entry's event bus (`default` when the entry names none)", needs: eventsPut},
	{Service: "ssm", Operation: "GetParameter", Actions: "ssm:GetParameter", Resource: "the parameter (`parameter/NAME`)", needs: ssmParameter},
	{Service: "secretsmanager", Operation: "GetSecretValue", Actions: "secretsmanager:GetSecretValue", Resource: "the secret (SecretId: its ARN)", needs: secret},
	// Step Functions: the Service Authorization Reference lists no
	// resource type for SendTask*, but AWS authorizes them on the state
	// machine whose task issued the token (its AccessDenied names
	// `stateMachine:NAME`, and a grant on that ARN is what CDK's
	// grantTaskResponse gives). MiniStack's tokens are plain UUIDs, so the
	// lane learns each token's batch from the submit that carried it
	// (the API's POST /batches) and the batch's state machine from the
	// test that started it (POST /_iam/tests with "state_machine").
	states("SendTaskSuccess"),
	states("SendTaskFailure"),
	states("SendTaskHeartbeat"),
	{Service: "sts", Operation: "GetCallerIdentity", Actions: "none", Resource: "(no permission is needed)", needs: func(*request) ([]Need, error) { return nil, nil }},

	// The setup function's: API Gateway ("Actions, resources, and
	// condition keys for Amazon API Gateway Management": the account
	// settings are the resource /account; setting cloudwatchRoleArn passes
	// the role, "Set up CloudWatch logging for REST APIs in API Gateway")
	// and CloudFormation ("Actions, resources, and condition keys for AWS
	// CloudFormation").
	{Service: "apigateway", Operation: "GetAccount", Actions: "apigateway:GET", Resource: "the Region's account settings (`arn:aws:apigateway:REGION::/account`)", needs: apigatewayAccount},
	{Service: "apigateway", Operation: "UpdateAccount", Actions: "apigateway:PATCH, iam:PassRole", Resource: "the account settings; the role the patch sets as cloudwatchRoleArn (iam:PassedToService apigateway.amazonaws.com)", needs: apigatewayAccount},
	{Service: "cloudformation", Operation: "DescribeStacks", Actions: "cloudformation:DescribeStacks", Resource: "the stack (StackName: its ARN)", needs: cfnStack},
}

// apigatewayAccount is GetAccount's and UpdateAccount's authorization:
// apigateway:GET or PATCH on the account settings, and for each patch
// operation setting /cloudwatchRoleArn, iam:PassRole on that role.
func apigatewayAccount(r *request) ([]Need, error) {
	account := fmt.Sprintf("arn:aws:apigateway:%s::/account", r.region)
	if r.call.Operation == "GetAccount" {
		return []Need{{Action: "apigateway:GET", Resource: account}}, nil
	}
	var in struct {
		PatchOperations []struct{ Op, Path, Value string } `json:"patchOperations"`
	}
	if err := json.Unmarshal(r.body, &in); err != nil || len(in.PatchOperations) == 0 {
		return nil, fmt.Errorf("no patchOperations in the request")
	}
	out := []Need{{Action: "apigateway:PATCH", Resource: account}}
	for _, op := range in.PatchOperations {
		if op.Path == "/cloudwatchRoleArn" && op.Value != "" {
			out = append(out, Need{Action: "iam:PassRole", Resource: op.Value, Context: map[string][]string{"iam:PassedToService": {"apigateway.amazonaws.com"}}})
		}
	}
	return out, nil
}

// cfnStack is DescribeStacks' authorization: the stack its StackName
// names (an ARN, or a name in the lane's Region and account).
func cfnStack(r *request) ([]Need, error) {
	name := r.param("StackName")
	if name == "" {
		return nil, fmt.Errorf("no StackName in the request")
	}
	if !strings.HasPrefix(name, "arn:") {
		name = fmt.Sprintf("arn:aws:cloudformation:%s:%s:stack/%s/*", r.region, r.account, name)
	}
	return []Need{{Action: "cloudformation:DescribeStacks", Resource: name}}, nil
}

// NotFoundRule is an authorization an answer adds: S3 answers a
// missing key with 404 only to a caller that may list the bucket, and with
// 403 AccessDenied otherwise ("GetObject", S3 API reference: "If you don't
// have the s3:ListBucket permission, Amazon S3 returns an HTTP status code
// 403 Access Denied error").
var NotFoundRule = Rule{Service: "s3", Operation: "GetObject, HeadObject answered 404", Actions: "s3:ListBucket", Resource: "the bucket"}

func ddb(op, action, resource string) Rule {
	return Rule{Service: "dynamodb", Operation: op, Actions: action, Resource: "the " + resource, needs: func(r *request) ([]Need, error) {
		var in struct {
			TableName string
			Key, Item map[string]json.RawMessage
		}
		if err := json.Unmarshal(r.body, &in); err != nil || in.TableName == "" {
			return nil, fmt.Errorf("no TableName in the request")
		}
		return []Need{{Action: action, Resource: r.table(in.TableName), Context: leadingKeys(in.Key, in.Item)}}, nil
	}}
}

func ddbIndexed(action string) func(*request) ([]Need, error) {
	return func(r *request) ([]Need, error) {
		var in struct{ TableName, IndexName string }
		if err := json.Unmarshal(r.body, &in); err != nil || in.TableName == "" {
			return nil, fmt.Errorf("no TableName in the request")
		}
		arn := r.table(in.TableName)
		if in.IndexName != "" {
			arn += "/index/" + in.IndexName
		}
		return []Need{{Action: action, Resource: arn}}, nil
	}
}

// ddbQuery is a Query's need: dynamodb:Query on the table or index, with
// dynamodb:LeadingKeys the partition key value its key condition names
// (KeyConditionExpression, or the legacy KeyConditions).
func ddbQuery(r *request) ([]Need, error) {
	var in struct {
		TableName, IndexName, KeyConditionExpression string
		ExpressionAttributeNames                     map[string]string
		ExpressionAttributeValues                    map[string]json.RawMessage
		KeyConditions                                map[string]struct {
			ComparisonOperator string
			AttributeValueList []json.RawMessage
		}
	}
	if err := json.Unmarshal(r.body, &in); err != nil || in.TableName == "" {
		return nil, fmt.Errorf("no TableName in the request")
	}
	arn := r.table(in.TableName)
	pk := PartitionKey
	if in.IndexName != "" {
		arn += "/index/" + in.IndexName
		pk = IndexPartitionKeys[in.IndexName]
	}
	var value json.RawMessage
	if in.KeyConditionExpression != "" {
		eq := keyEqualities(in.KeyConditionExpression, in.ExpressionAttributeNames)
		switch v, ok := eq[pk]; {
		case ok:
			value = in.ExpressionAttributeValues[v]
		case pk == "" && len(eq) == 1: // an index the lane does not know: its one equality
			for _, v := range eq {
				value = in.ExpressionAttributeValues[v]
			}
		}
	} else if c, ok := in.KeyConditions[pk]; ok && c.ComparisonOperator == "EQ" && len(c.AttributeValueList) == 1 {
		value = c.AttributeValueList[0]
	}
	var v struct{ S string }
	if value == nil || json.Unmarshal(value, &v) != nil || v.S == "" {
		return nil, fmt.Errorf("no partition key value in the key condition of the Query on %s", arn)
	}
	return []Need{{Action: "dynamodb:Query", Resource: arn, Context: map[string][]string{"dynamodb:LeadingKeys": {v.S}}}}, nil
}

// keyEqualities returns the equalities of a key condition expression
// ("#p = :p AND #s > :s"): each attribute name (resolved through names)
// compared with = to a value placeholder, and that placeholder.
func keyEqualities(expr string, names map[string]string) map[string]string {
	out := map[string]string{}
	for _, clause := range splitAnd(expr) {
		left, right, ok := strings.Cut(strings.Trim(clause, " ()"), "=")
		if !ok || strings.ContainsAny(left, "<>!") {
			continue
		}
		left, right = strings.TrimSpace(left), strings.TrimSpace(right)
		if n, ok := names[left]; ok {
			left = n
		}
		if strings.HasPrefix(right, ":") {
			out[left] = right
		}
	}
	return out
}

// splitAnd splits a key condition expression at its AND keywords (any
// case).
func splitAnd(expr string) []string {
	var out []string
	for {
		i := strings.Index(strings.ToUpper(expr), " AND ")
		if i < 0 {
			return append(out, expr)
		}
		out = append(out, expr[:i])
		expr = expr[i+5:]
	}
}

// ddbBatch is a BatchGetItem's or BatchWriteItem's needs: action on each
// table of RequestItems, with dynamodb:LeadingKeys every partition key
// the call touches in it (BatchGetItem's Keys, BatchWriteItem's
// PutRequest items and DeleteRequest keys), so that a grant conditioned
// on the leading keys (ForAllValues) sees them all, as AWS does.
func ddbBatch(action string) func(*request) ([]Need, error) {
	return func(r *request) ([]Need, error) {
		var in struct{ RequestItems map[string]json.RawMessage }
		if err := json.Unmarshal(r.body, &in); err != nil || len(in.RequestItems) == 0 {
			return nil, fmt.Errorf("no RequestItems in the request")
		}
		tables := make([]string, 0, len(in.RequestItems))
		for t := range in.RequestItems {
			tables = append(tables, t)
		}
		slices.Sort(tables)
		var out []Need
		for _, t := range tables {
			var keys []map[string]json.RawMessage
			if action == "dynamodb:BatchGetItem" {
				var get struct{ Keys []map[string]json.RawMessage }
				if err := json.Unmarshal(in.RequestItems[t], &get); err != nil {
					return nil, fmt.Errorf("RequestItems %s: %w", t, err)
				}
				keys = get.Keys
			} else {
				var writes []struct {
					PutRequest    *struct{ Item map[string]json.RawMessage }
					DeleteRequest *struct{ Key map[string]json.RawMessage }
				}
				if err := json.Unmarshal(in.RequestItems[t], &writes); err != nil {
					return nil, fmt.Errorf("RequestItems %s: %w", t, err)
				}
				for _, w := range writes {
					switch {
					case w.PutRequest != nil:
						keys = append(keys, w.PutRequest.Item)
					case w.DeleteRequest != nil:
						keys = append(keys, w.DeleteRequest.Key)
					}
				}
			}
			var pks []string
			for _, k := range keys {
				if c := leadingKeys(k); c != nil {
					pks = append(pks, c["dynamodb:LeadingKeys"]...)
				}
			}
			slices.Sort(pks)
			n := Need{Action: action, Resource: r.table(t)}
			if pks = slices.Compact(pks); len(pks) > 0 {
				n.Context = map[string][]string{"dynamodb:LeadingKeys": pks}
			}
			out = append(out, n)
		}
		return out, nil
	}
}

// PartitionKey is the attribute leadingKeys reads: the partition key of
// bulkrun's table (config.AttrPK) and of the tables the tests stage writes
// on.
const PartitionKey = config.AttrPK

// IndexPartitionKeys are the partition keys of the table's indexes, by
// index name: a Query on an index names its partition key value in the
// key condition on that attribute.
var IndexPartitionKeys = map[string]string{
	config.IndexAttention: config.AttrAttentionPK,
	config.IndexBatches:   config.AttrBatchesPK,
	config.IndexSources:   config.AttrSourcesPK,
}

// leadingKeys is the dynamodb:LeadingKeys context of an item operation:
// the string partition key of its key (or item), when it has one.
func leadingKeys(maps ...map[string]json.RawMessage) map[string][]string {
	for _, m := range maps {
		var v struct{ S string }
		if raw, ok := m[PartitionKey]; ok && json.Unmarshal(raw, &v) == nil && v.S != "" {
			return map[string][]string{"dynamodb:LeadingKeys": {v.S}}
		}
	}
	return nil
}

func ddbTransactWrite(r *request) ([]Need, error) {
	type op struct {
		TableName string
		Key, Item map[string]json.RawMessage
	}
	var in struct {
		TransactItems []struct {
			Put, Update, Delete, ConditionCheck *op
		}
	}
	if err := json.Unmarshal(r.body, &in); err != nil || len(in.TransactItems) == 0 {
		return nil, fmt.Errorf("no TransactItems in the request")
	}
	var out []Need
	for _, it := range in.TransactItems {
		switch {
		case it.Put != nil:
			out = append(out, Need{Action: "dynamodb:PutItem", Resource: r.table(it.Put.TableName), Context: leadingKeys(it.Put.Item)})
		case it.Update != nil:
			out = append(out, Need{Action: "dynamodb:UpdateItem", Resource: r.table(it.Update.TableName), Context: leadingKeys(it.Update.Key)})
		case it.Delete != nil:
			out = append(out, Need{Action: "dynamodb:DeleteItem", Resource: r.table(it.Delete.TableName), Context: leadingKeys(it.Delete.Key)})
		case it.ConditionCheck != nil:
			out = append(out, Need{Action: "dynamodb:ConditionCheckItem", Resource: r.table(it.ConditionCheck.TableName), Context: leadingKeys(it.ConditionCheck.Key)})
		}
	}
	return out, nil
}

func ddbTransactGet(r *request) ([]Need, error) {
	var in struct {
		TransactItems []struct {
			Get *struct {
				TableName string
				Key       map[string]json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(r.body, &in); err != nil {
		return nil, err
	}
	var out []Need
	for _, it := range in.TransactItems {
		if it.Get != nil {
			out = append(out, Need{Action: "dynamodb:GetItem", Resource: r.table(it.Get.TableName), Context: leadingKeys(it.Get.Key)})
		}
	}
	return out, nil
}

// table is the ARN of a table given by name or ARN.
func (r *request) table(name string) string {
	if strings.HasPrefix(name, "arn:") {
		return name
	}
	return fmt.Sprintf("arn:aws:dynamodb:%s:%s:table/%s", r.region, r.account, name)
}

func s3obj(op, action string) Rule {
	return Rule{Service: "s3", Operation: op, Actions: action, Resource: "the object", needs: func(r *request) ([]Need, error) {
		bucket, key, err := r.s3Path()
		if err != nil || key == "" {
			return nil, fmt.Errorf("no bucket and key in the path %q", r.http.URL.Path)
		}
		return []Need{{Action: action, Resource: "arn:aws:s3:::" + bucket + "/" + key}}, nil
	}}
}

func s3bucket(op, action string) Rule {
	return Rule{Service: "s3", Operation: op, Actions: action, Resource: "the bucket", needs: func(r *request) ([]Need, error) {
		bucket, _, err := r.s3Path()
		if err != nil || bucket == "" {
			return nil, fmt.Errorf("no bucket in the path %q", r.http.URL.Path)
		}
		return []Need{{Action: action, Resource: "arn:aws:s3:::" + bucket}}, nil
	}}
}

func s3Copy(r *request) ([]Need, error) {
	bucket, key, err := r.s3Path()
	if err != nil || key == "" {
		return nil, fmt.Errorf("no bucket and key in the path %q", r.http.URL.Path)
	}
	src, err := url.PathUnescape(strings.TrimPrefix(r.http.Header.Get("X-Amz-Copy-Source"), "/"))
	if err != nil {
		return nil, err
	}
	src, _, _ = strings.Cut(src, "?versionId=")
	return []Need{{Action: "s3:PutObject", Resource: "arn:aws:s3:::" + bucket + "/" + key}, {Action: "s3:GetObject", Resource: "arn:aws:s3:::" + src}}, nil
}

func s3DeleteObjects(r *request) ([]Need, error) {
	bucket, _, err := r.s3Path()
	if err != nil || bucket == "" {
		return nil, fmt.Errorf("no bucket in the path %q", r.http.URL.Path)
	}
	var in struct {
		Objects []struct{ Key string } `xml:"Object"`
	}
	if err := xml.Unmarshal(r.body, &in); err != nil {
		return nil, fmt.Errorf("DeleteObjects body: %w", err)
	}
	var out []Need
	for _, o := range in.Objects {
		out = append(out, Need{Action: "s3:DeleteObject", Resource: "arn:aws:s3:::" + bucket + "/" + o.Key})
	}
	return out, nil
}

// s3Path returns the bucket and key of a path-style S3 request.
func (r *request) s3Path() (bucket, key string, err error) {
	p := strings.TrimPrefix(r.http.URL.EscapedPath(), "/")
	b, k, _ := strings.Cut(p, "/")
	if bucket, err = url.PathUnescape(b); err != nil {
		return "", "", err
	}
	key, err = url.PathUnescape(k)
	return bucket, key, err
}

func sqsq(op, action string) Rule {
	return Rule{Service: "sqs", Operation: op, Actions: action, Resource: "the queue (QueueUrl)", needs: func(r *request) ([]Need, error) {
		u := r.param("QueueUrl")
		if u == "" {
			return nil, fmt.Errorf("no QueueUrl in the request")
		}
		parts := strings.Split(strings.Trim(mustPath(u), "/"), "/")
		if len(parts) < 2 {
			return nil, fmt.Errorf("QueueUrl %q is not …/ACCOUNT/NAME", u)
		}
		return []Need{{Action: action, Resource: fmt.Sprintf("arn:aws:sqs:%s:%s:%s", r.region, parts[len(parts)-2], parts[len(parts)-1])}}, nil
	}}
}

func sqsByName(r *request) ([]Need, error) {
	name := r.param("QueueName")
	if name == "" {
		return nil, fmt.Errorf("no QueueName in the request")
	}
	account := r.param("QueueOwnerAWSAccountId")
	if account == "" {
		account = r.account
	}
	return []Need{{Action: "sqs:GetQueueUrl", Resource: fmt.Sprintf("arn:aws:sqs:%s:%s:%s", r.region, account, name)}}, nil
}

func mustPath(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	return p.Path
}

// param returns a top-level string parameter of a JSON or form body.
func (r *request) param(name string) string {
	var m map[string]any
	if json.Unmarshal(r.body, &m) == nil {
		s, _ := m[name].(string)
		return s
	}
	if v, err := url.ParseQuery(string(r.body)); err == nil && v.Get(name) != "" {
		return v.Get(name)
	}
	return r.http.URL.Query().Get(name)
}

func lambdaFunction(action string) func(*request) ([]Need, error) {
	return func(r *request) ([]Need, error) {
		parts := strings.Split(strings.Trim(r.http.URL.EscapedPath(), "/"), "/")
		if len(parts) < 3 {
			return nil, fmt.Errorf("no function in the path %q", r.http.URL.Path)
		}
		name, err := url.PathUnescape(parts[2])
		if err != nil {
			return nil, err
		}
		if q := r.http.URL.Query().Get("Qualifier"); q != "" && !strings.Contains(strings.TrimPrefix(name, "arn:"), ":") {
			name += ":" + q
		}
		if strings.HasPrefix(name, "arn:") {
			return []Need{{Action: action, Resource: name}}, nil
		}
		return []Need{{Action: action, Resource: fmt.Sprintf("arn:aws:lambda:%s:%s:function:%s", r.region, r.account, name)}}, nil
	}
}

func eventsPut(r *request) ([]Need, error) {
	var in struct {
		Entries []struct{ EventBusName string }
	}
	if err := json.Unmarshal(r.body, &in); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []Need
	for _, e := range in.Entries {
		bus := e.EventBusName
		if bus == "" {
			bus = "default"
		}
		if !strings.HasPrefix(bus, "arn:") {
			bus = fmt.Sprintf("arn:aws:events:%s:%s:event-bus/%s", r.region, r.account, bus)
		}
		if !seen[bus] {
			seen[bus] = true
			out = append(out, Need{Action: "events:PutEvents", Resource: bus})
		}
	}
	return out, nil
}

func ssmParameter(r *request) ([]Need, error) {
	name := r.param("Name")
	if name == "" {
		return nil, fmt.Errorf("no Name in the request")
	}
	if !strings.HasPrefix(name, "arn:") {
		name = fmt.Sprintf("arn:aws:ssm:%s:%s:parameter/%s", r.region, r.account, strings.TrimPrefix(name, "/"))
	}
	return []Need{{Action: "ssm:GetParameter", Resource: name}}, nil
}

func secret(r *request) ([]Need, error) {
	id := r.param("SecretId")
	if id == "" {
		return nil, fmt.Errorf("no SecretId in the request")
	}
	if !strings.HasPrefix(id, "arn:") {
		// A name: its ARN ends in a six-character suffix Secrets Manager adds.
		id = fmt.Sprintf("arn:aws:secretsmanager:%s:%s:secret:%s-AbCdEf", r.region, r.account, id)
	}
	return []Need{{Action: "secretsmanager:GetSecretValue", Resource: id}}, nil
}

// ruleFor returns the rule of a call, false when the table has none.
// states is the rule of a Step Functions task answer: its action on the
// state machine the token's task belongs to.
func states(op string) Rule {
	action := "states:" + op
	return Rule{Service: "states", Operation: op, Actions: action, Resource: "the state machine whose task issued taskToken (learnt from the batch's submit and its test's registration)",
		needs: func(r *request) ([]Need, error) {
			var in struct {
				TaskToken string `json:"taskToken"`
			}
			if err := json.Unmarshal(r.body, &in); err != nil || in.TaskToken == "" {
				return nil, fmt.Errorf("no taskToken in the request")
			}
			sm := ""
			if r.taskMachine != nil {
				sm = r.taskMachine(in.TaskToken)
			}
			if sm == "" {
				return nil, fmt.Errorf("a task token of no batch whose state machine a test registered (POST /_iam/tests with \"state_machine\" before the submit)")
			}
			return []Need{{Action: action, Resource: sm}}, nil
		}}
}

func ruleFor(c faultproxy.Call) (Rule, bool) {
	for _, r := range Rules {
		if r.Service == c.Service && r.Operation == c.Operation {
			return r, true
		}
	}
	return Rule{}, false
}
