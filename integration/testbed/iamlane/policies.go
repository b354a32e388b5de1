package iamlane

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/bulkrun/bulkrun/shared/config"
)

// Document is an IAM policy document as JSON decodes it.
type Document = map[string]any

// Role is one function's role as deployed: its ARN and every identity
// policy attached to it (the role's own policies, each AWS::IAM::Policy
// naming it, and the managed policies, by their AWS documents).
type Role struct {
	Function string // "submit", "item", "finalize", "sweep"
	ARN      string
	Policies []NamedPolicy
}

// NamedPolicy is an identity policy with its name (the logical id in the
// template, or the managed policy's name).
type NamedPolicy struct {
	Name   string   `json:"name"`
	Policy Document `json:"policy"`
}

// Deployed is what the lane evaluates a stack's calls against: the roles
// of its four functions, and the resource policies of its bucket and
// queues (by the bucket's name and the queues' ARNs).
type Deployed struct {
	Stack          string
	Roles          map[string]Role     // by function
	BucketPolicies map[string]Document // by bucket name
	QueuePolicies  map[string]Document // by queue ARN
	// Triggers are the queues (by ARN) that invoke a function (by name:
	// "item"), from the event source mappings; DeadLetterURLs their
	// dead-letter queues' URLs (RedrivePolicy); RecursiveLoop each
	// function's setting ("Terminate" when unset, Lambda's default).
	Triggers       map[string]string
	DeadLetterURLs map[string]string
	RecursiveLoop  map[string]string
	// Names are the physical names of the stack's own resources, for a
	// binding to stand its own in for: "table", "bucket", "items-queue"
	// (the items queue's ARN), "effect-table" (the item function's first
	// declared effect table).
	Names map[string]string
}

// managedPolicies are the documents of the AWS managed policies the
// stack attaches ("AWS managed policy reference guide"), by ARN suffix.
var managedPolicies = map[string]Document{
	"service-role/AWSLambdaBasicExecutionRole": {
		"Version": "2012-10-17",
		"Statement": []any{map[string]any{
			"Effect":   "Allow",
			"Action":   []any{"logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"},
			"Resource": "*",
		}},
	},
}

// resource is one stack resource: its type, properties and physical id.
type resource struct {
	Type       string         `json:"Type"`
	Properties map[string]any `json:"Properties"`
	physical   string
}

// stackTemplate is a deployed template with the physical ids of its
// resources.
type stackTemplate struct {
	Resources map[string]*resource `json:"Resources"`
	Outputs   map[string]struct {
		Value any `json:"Value"`
	} `json:"Outputs"`
	region, account    string
	stackName, stackID string
}

// parseDeployed reads the roles and resource policies of stack from its
// deployed template (body) and its resources' physical ids.
func parseDeployed(stack, stackID, body string, physical map[string]string, region, account string) (*Deployed, error) {
	t := &stackTemplate{region: region, account: account, stackName: stack, stackID: stackID}
	if err := json.Unmarshal([]byte(body), t); err != nil {
		return nil, fmt.Errorf("stack %s: template: %w", stack, err)
	}
	for id, r := range t.Resources {
		r.physical = physical[id]
	}
	d := &Deployed{Stack: stack, Roles: map[string]Role{}, BucketPolicies: map[string]Document{}, QueuePolicies: map[string]Document{}, Names: map[string]string{},
		Triggers: map[string]string{}, DeadLetterURLs: map[string]string{}, RecursiveLoop: map[string]string{}}
	fnOf := map[string]string{} // function logical id → name
	outputs := map[string]string{
		config.OutputSubmitFunction: "submit", config.OutputItemFunction: "item",
		config.OutputFinalizeFunction: "finalize", config.OutputSweepFunction: "sweep",
	}
	for key, fn := range outputs {
		o, ok := t.Outputs[key]
		if !ok {
			return nil, fmt.Errorf("stack %s: no output %s", stack, key)
		}
		ref, ok := refOf(o.Value)
		if !ok || t.Resources[ref] == nil {
			return nil, fmt.Errorf("stack %s: output %s is not a Ref to a function", stack, key)
		}
		roleID, ok := getAttOf(t.Resources[ref].Properties["Role"])
		if !ok || t.Resources[roleID] == nil {
			return nil, fmt.Errorf("stack %s: function %s has no role of the stack", stack, ref)
		}
		role, err := t.role(roleID)
		if err != nil {
			return nil, fmt.Errorf("stack %s: %s's role: %w", stack, fn, err)
		}
		role.Function = fn
		d.Roles[fn] = role
		fnOf[ref] = fn
		d.RecursiveLoop[fn] = "Terminate"
		if v, ok := t.Resources[ref].Properties["RecursiveLoop"].(string); ok {
			d.RecursiveLoop[fn] = v
		}
	}
	for id, r := range t.Resources {
		switch r.Type {
		case "AWS::S3::BucketPolicy":
			b, err := t.resolveString(r.Properties["Bucket"])
			if err != nil {
				return nil, fmt.Errorf("stack %s: %s: %w", stack, id, err)
			}
			doc, err := t.document(r.Properties["PolicyDocument"])
			if err != nil {
				return nil, fmt.Errorf("stack %s: %s: %w", stack, id, err)
			}
			d.BucketPolicies[b] = doc
		case "AWS::Lambda::EventSourceMapping":
			fnRef, _ := refOf(r.Properties["FunctionName"])
			if qid, ok := getAttOf(r.Properties["EventSourceArn"]); ok && fnOf[fnRef] != "" && t.Resources[qid] != nil {
				if arn, err := t.getAtt(qid, "Arn"); err == nil {
					d.Triggers[arn] = fnOf[fnRef]
				}
			}
		case "AWS::SQS::Queue":
			redrive, _ := r.Properties["RedrivePolicy"].(map[string]any)
			if dlqID, ok := getAttOf(redrive["deadLetterTargetArn"]); ok && t.Resources[dlqID] != nil {
				arn, err1 := t.getAtt(id, "Arn")
				url, err2 := t.ref(dlqID)
				if err1 == nil && err2 == nil {
					d.DeadLetterURLs[arn] = url
				}
			}
		case "AWS::SQS::QueuePolicy":
			doc, err := t.document(r.Properties["PolicyDocument"])
			if err != nil {
				return nil, fmt.Errorf("stack %s: %s: %w", stack, id, err)
			}
			qs, _ := r.Properties["Queues"].([]any)
			for _, q := range qs {
				if qid, ok := refOf(q); ok && t.Resources[qid] != nil {
					arn, err := t.getAtt(qid, "Arn")
					if err != nil {
						return nil, err
					}
					d.QueuePolicies[arn] = doc
				}
			}
		}
	}
	// The item function's first declared effect table (staged writes).
	if o, ok := t.Outputs[config.OutputItemFunction]; ok {
		if ref, ok := refOf(o.Value); ok {
			env, _ := t.Resources[ref].Properties["Environment"].(map[string]any)
			vars, _ := env["Variables"].(map[string]any)
			tables := vars[config.EnvEffectTables]
			// Or in its settings parameter, when its environment had no
			// room for its allow-lists (a JSON object of variables).
			if pid, ok := refOf(vars[config.EnvSettingsParameter]); ok && tables == nil && t.Resources[pid] != nil {
				var moved map[string]string
				if v, err := t.resolveString(t.Resources[pid].Properties["Value"]); err == nil && json.Unmarshal([]byte(v), &moved) == nil {
					tables = moved[config.EnvEffectTables]
				}
			}
			if v, err := t.resolveString(tables); err == nil && v != "" {
				d.Names["effect-table"], _, _ = strings.Cut(v, ",")
			}
		}
	}
	for key, name := range map[string]string{config.OutputTable: "table", config.OutputBucket: "bucket", config.OutputItemsQueueARN: "items-queue"} {
		if o, ok := t.Outputs[key]; ok {
			if v, err := t.resolveString(o.Value); err == nil {
				d.Names[name] = v
			}
		}
	}
	return d, nil
}

// role returns the role with logical id roleID and its policies.
func (t *stackTemplate) role(roleID string) (Role, error) {
	arn, err := t.getAtt(roleID, "Arn")
	if err != nil {
		return Role{}, err
	}
	r := Role{ARN: arn}
	props := t.Resources[roleID].Properties
	managed, _ := props["ManagedPolicyArns"].([]any)
	for _, m := range managed {
		s, err := t.resolveString(m)
		if err != nil {
			return Role{}, err
		}
		name := s[strings.Index(s, ":policy/")+len(":policy/"):]
		doc, ok := managedPolicies[name]
		if !ok {
			return Role{}, fmt.Errorf("managed policy %s: the lane does not know its document", s)
		}
		r.Policies = append(r.Policies, NamedPolicy{Name: name, Policy: doc})
	}
	inline, _ := props["Policies"].([]any)
	for _, p := range inline {
		pm, _ := p.(map[string]any)
		doc, err := t.document(pm["PolicyDocument"])
		if err != nil {
			return Role{}, err
		}
		r.Policies = append(r.Policies, NamedPolicy{Name: fmt.Sprint(pm["PolicyName"]), Policy: doc})
	}
	ids := make([]string, 0, len(t.Resources))
	for id := range t.Resources {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		res := t.Resources[id]
		if res.Type != "AWS::IAM::Policy" {
			continue
		}
		roles, _ := res.Properties["Roles"].([]any)
		for _, ro := range roles {
			if ref, ok := refOf(ro); ok && ref == roleID {
				doc, err := t.document(res.Properties["PolicyDocument"])
				if err != nil {
					return Role{}, fmt.Errorf("%s: %w", id, err)
				}
				r.Policies = append(r.Policies, NamedPolicy{Name: id, Policy: doc})
			}
		}
	}
	return r, nil
}

// document resolves a policy document's intrinsic functions.
func (t *stackTemplate) document(v any) (Document, error) {
	out, err := t.resolve(v)
	if err != nil {
		return nil, err
	}
	doc, ok := out.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("policy document is %T, not an object", out)
	}
	return doc, nil
}

func refOf(v any) (string, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return "", false
	}
	s, ok := m["Ref"].(string)
	return s, ok
}

func getAttOf(v any) (string, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return "", false
	}
	a, ok := m["Fn::GetAtt"].([]any)
	if !ok || len(a) != 2 {
		return "", false
	}
	s, ok := a[0].(string)
	return s, ok
}

func (t *stackTemplate) resolveString(v any) (string, error) {
	out, err := t.resolve(v)
	if err != nil {
		return "", err
	}
	s, ok := out.(string)
	if !ok {
		return "", fmt.Errorf("%v resolves to %T, not a string", v, out)
	}
	return s, nil
}

// resolve evaluates the intrinsic functions CDK writes into policies (Ref,
// Fn::GetAtt, Fn::Join, Fn::Select, Fn::Split) with the deployed physical
// ids; anything else is an error naming it.
func (t *stackTemplate) resolve(v any) (any, error) {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := t.resolve(e)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	case map[string]any:
		if len(x) == 1 {
			for k, arg := range x {
				switch k {
				case "Ref":
					return t.ref(fmt.Sprint(arg))
				case "Fn::GetAtt":
					a, _ := arg.([]any)
					if len(a) != 2 {
						return nil, fmt.Errorf("Fn::GetAtt %v", arg)
					}
					return t.getAtt(fmt.Sprint(a[0]), fmt.Sprint(a[1]))
				case "Fn::Join":
					a, _ := arg.([]any)
					if len(a) != 2 {
						return nil, fmt.Errorf("Fn::Join %v", arg)
					}
					parts, err := t.resolve(a[1])
					if err != nil {
						return nil, err
					}
					ps, _ := parts.([]any)
					ss := make([]string, len(ps))
					for i, p := range ps {
						ss[i] = fmt.Sprint(p)
					}
					return strings.Join(ss, fmt.Sprint(a[0])), nil
				case "Fn::Split":
					a, _ := arg.([]any)
					if len(a) != 2 {
						return nil, fmt.Errorf("Fn::Split %v", arg)
					}
					s, err := t.resolveString(a[1])
					if err != nil {
						return nil, err
					}
					var out []any
					for _, p := range strings.Split(s, fmt.Sprint(a[0])) {
						out = append(out, p)
					}
					return out, nil
				case "Fn::Select":
					a, _ := arg.([]any)
					if len(a) != 2 {
						return nil, fmt.Errorf("Fn::Select %v", arg)
					}
					list, err := t.resolve(a[1])
					if err != nil {
						return nil, err
					}
					l, _ := list.([]any)
					i, err := strconv.Atoi(fmt.Sprint(a[0]))
					if err != nil || i < 0 || i >= len(l) {
						return nil, fmt.Errorf("Fn::Select %v", arg)
					}
					return l[i], nil
				}
				if strings.HasPrefix(k, "Fn::") {
					return nil, fmt.Errorf("the lane does not resolve %s", k)
				}
			}
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			r, err := t.resolve(e)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	}
	return v, nil
}

// ref is CloudFormation's Ref: a pseudo parameter, or the resource's
// physical id (a queue's is its URL).
func (t *stackTemplate) ref(id string) (string, error) {
	switch id {
	case "AWS::Partition":
		return "aws", nil
	case "AWS::Region":
		return t.region, nil
	case "AWS::AccountId":
		return t.account, nil
	case "AWS::URLSuffix":
		return "amazonaws.com", nil
	case "AWS::NoValue":
		return "", nil
	case "AWS::StackName":
		return t.stackName, nil
	case "AWS::StackId":
		if t.stackID == "" {
			return "", fmt.Errorf("the stack's id is unknown (Ref AWS::StackId)")
		}
		return t.stackID, nil
	}
	r := t.Resources[id]
	if r == nil || r.physical == "" {
		return "", fmt.Errorf("no deployed resource %s (Ref)", id)
	}
	return r.physical, nil
}

// getAtt is CloudFormation's Fn::GetAtt for the attributes CDK's policies
// use, built from the physical id the way each service forms its ARNs.
func (t *stackTemplate) getAtt(id, attr string) (string, error) {
	r := t.Resources[id]
	if r == nil || r.physical == "" {
		return "", fmt.Errorf("Fn::GetAtt %s.%s: no such deployed resource", id, attr)
	}
	p := r.physical
	switch r.Type + "." + attr {
	case "AWS::DynamoDB::Table.Arn":
		return fmt.Sprintf("arn:aws:dynamodb:%s:%s:table/%s", t.region, t.account, p), nil
	case "AWS::SQS::Queue.Arn":
		return fmt.Sprintf("arn:aws:sqs:%s:%s:%s", t.region, t.account, p[strings.LastIndexByte(p, '/')+1:]), nil
	case "AWS::SQS::Queue.QueueName":
		return p[strings.LastIndexByte(p, '/')+1:], nil
	case "AWS::SQS::Queue.QueueUrl":
		return p, nil
	case "AWS::Lambda::Function.Arn":
		return fmt.Sprintf("arn:aws:lambda:%s:%s:function:%s", t.region, t.account, p), nil
	case "AWS::IAM::Role.Arn":
		return fmt.Sprintf("arn:aws:iam::%s:role/%s", t.account, p), nil
	case "AWS::S3::Bucket.Arn":
		return "arn:aws:s3:::" + p, nil
	case "AWS::Logs::LogGroup.Arn":
		return fmt.Sprintf("arn:aws:logs:%s:%s:log-group:%s:*", t.region, t.account, p), nil
	case "AWS::Events::Rule.Arn":
		return fmt.Sprintf("arn:aws:events:%s:%s:rule/%s", t.region, t.account, p), nil
	case "AWS::SNS::Topic.TopicArn":
		return p, nil
	}
	return "", fmt.Errorf("the lane does not resolve Fn::GetAtt %s.%s (%s)", id, attr, r.Type)
}
