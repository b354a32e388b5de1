package bulkrun

import (
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/shared/config"
)

// grant gives each function's role exactly the actions its code calls,
// explicit actions only (the table in infra/README.md, "Permissions",
// which TestPermissionTable keeps equal to the templates). Grants on the
// bucket use ARNs built from its name (see defineStorage).
func (r *runner) grant() {
	s := r.s
	submit, item, finalize, sweep := r.functions[FunctionSubmit], r.functions[FunctionItem], r.functions[FunctionFinalize], r.functions[FunctionSweep]
	bucketArn := s3Arn(r.bucketName, "")
	batchesArn := s3Arn(r.bucketName, config.BatchesPrefix+"*")
	tableArns := []*string{r.table.TableArn(), jsii.String(*r.table.TableArn() + "/index/*")}
	sourceObjects := []*string{s3Arn(r.bucketName, "*")}
	sourceBuckets := []*string{bucketArn}
	for _, b := range s.sourceBuckets {
		sourceObjects = append(sourceObjects, s3Arn(jsii.String(b), "*"))
		sourceBuckets = append(sourceBuckets, s3Arn(jsii.String(b), ""))
	}

	// A function whose allow-lists are in its settings parameter reads it
	// at start: that parameter alone.
	for fn, p := range r.settingsParameters {
		allow(r.functions[fn], []string{"ssm:GetParameter"}, p.ParameterArn())
	}

	allow(submit, []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "dynamodb:Query", "dynamodb:BatchGetItem"}, tableArns...)
	allow(submit, []string{"s3:GetObject"}, sourceObjects...)
	allow(submit, []string{"s3:ListBucket"}, sourceBuckets...)
	// Submit refuses a source in a bucket of another Region, read with
	// GetBucketLocation (submit.Submitter.Regions): SourceBuckets only,
	// the stack's own bucket is in its Region.
	if len(s.sourceBuckets) > 0 {
		allow(submit, []string{"s3:GetBucketLocation"}, sourceBuckets[1:]...)
	}
	allow(submit, []string{"s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject", "s3:GetObject"}, batchesArn)
	allow(submit, []string{"s3:PutObject", "s3:DeleteObject"}, s3Arn(r.bucketName, config.UploadErrorsPrefix+"*"), s3Arn(r.bucketName, config.ScheduleErrorsPrefix+"*"))
	allow(submit, []string{"sqs:SendMessage"}, r.items.QueueArn())
	allow(submit, []string{"lambda:InvokeFunction"}, finalize.FunctionArn())
	// Submit hands the reading of an S3 source to itself (an asynchronous
	// invocation). The grant is a policy of its own: in the role's default
	// policy, which the function depends on, it would be a cycle.
	awsiam.NewPolicy(r.Construct, jsii.String("SubmitInvokesItself"), &awsiam.PolicyProps{
		Roles: &[]awsiam.IRole{submit.Role()},
		Statements: &[]awsiam.PolicyStatement{awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Actions:   jsii.Strings("lambda:InvokeFunction"),
			Resources: jsii.Strings(*submit.FunctionArn()),
		})},
	})

	// Query: the item worker reads a batch's pack rows (the IAM lane found
	// it when the unified worker landed) and, for a batch with a budget,
	// its run's counter partitions; the table only, no index.
	allow(item, []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:BatchGetItem", "dynamodb:Query"}, r.table.TableArn())
	// Query on the attention index alone: the invocation that stops a run
	// on its failure threshold lists the run's held items there to wake
	// them, so that they settle cancelled (worker.wakeToSettle); the IAM
	// lane found it.
	allow(item, []string{"dynamodb:Query"}, jsii.String(*r.table.TableArn()+"/index/"+config.IndexAttention))
	// The item function deletes one kind of row with DeleteItem: a
	// max_concurrency slot it frees (SLOT#…).
	item.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("dynamodb:DeleteItem"),
		Resources: jsii.Strings(*r.table.TableArn()),
		Conditions: &map[string]any{"ForAllValues:StringLike": map[string]any{
			"dynamodb:LeadingKeys": []string{config.PKSlot + "*"},
		}},
	}))
	// BatchWriteItem: a pack item's attention entries (ATTN#…), put before
	// the pack's write and deleted after it (internal/dynamo WritePack).
	item.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("dynamodb:BatchWriteItem"),
		Resources: jsii.Strings(*r.table.TableArn()),
		Conditions: &map[string]any{"ForAllValues:StringLike": map[string]any{
			"dynamodb:LeadingKeys": []string{config.PKAttention + "*"},
		}},
	}))
	allow(item, []string{"s3:GetObject"}, sourceObjects...)
	// S3 answers a missing source object with 404 only to a caller that
	// may list the bucket, and with 403 AccessDenied otherwise ("GetObject",
	// Amazon S3 API reference): the pipelines tell "no such object"
	// (permanent) from a transient failure by it.
	allow(item, []string{"s3:ListBucket"}, sourceBuckets...)
	allow(item, []string{"s3:PutObject"}, batchesArn)
	allow(item, []string{"sqs:SendMessage", "sqs:ChangeMessageVisibility"}, r.items.QueueArn())
	allow(item, []string{"lambda:InvokeFunction"}, finalize.FunctionArn())
	r.grantPipelineReach(item)

	allow(finalize, []string{"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:Query", "dynamodb:BatchGetItem"}, tableArns...)
	// Results files are multipart uploads that finalize completes from
	// ListParts (s3:ListMultipartUploadParts); a large run's are composed
	// from its merge ranges' pieces by UploadPartCopy (s3:GetObject on the
	// piece, s3:PutObject on the results); its checkpoints
	// (batches/{id}/finalize/…) it deletes once the report is written.
	allow(finalize, []string{"s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"}, batchesArn)
	allow(finalize, []string{"s3:DeleteObject"}, s3Arn(r.bucketName, config.BatchesPrefix+"*/"+config.FinalizeCheckpoints+"*"))
	allow(finalize, []string{"s3:ListBucket"}, bucketArn)
	allow(finalize, []string{"sqs:SendMessage"}, r.items.QueueArn())
	// Finalize goes on with a run's next chunk by invoking itself (a chain
	// of at most finalize.MaxFinalizeChain calls); a policy of its own, as
	// submit's.
	awsiam.NewPolicy(r.Construct, jsii.String("FinalizeInvokesItself"), &awsiam.PolicyProps{
		Roles: &[]awsiam.IRole{finalize.Role()},
		Statements: &[]awsiam.PolicyStatement{awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Actions:   jsii.Strings("lambda:InvokeFunction"),
			Resources: jsii.Strings(*finalize.FunctionArn()),
		})},
	})

	allow(sweep, []string{"dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"}, tableArns...)
	allow(sweep, []string{"s3:DeleteObject"}, batchesArn)
	allow(sweep, []string{"s3:ListBucket"}, bucketArn)
	defaultBus := regionalArn("events", "event-bus/default")
	allow(finalize, []string{"events:PutEvents"}, defaultBus)
	allow(submit, []string{"events:PutEvents"}, defaultBus) // Batch Refused, Batch Paused / Unpaused by a caller
	allow(item, []string{"events:PutEvents"}, defaultBus)   // Batch Paused / Unpaused on an outage, Batch Paused at a budget
	// Task tokens: finalize answers a run's end and sends heartbeats from
	// its tick while the first run goes, submit answers a refusal.
	for _, sm := range s.taskStateMachines {
		arn := jsii.String(sm)
		if !*awscdk.Token_IsUnresolved(arn) && !strings.HasPrefix(sm, "arn:") {
			arn = regionalArn("states", "stateMachine:"+sm)
		}
		allow(finalize, []string{"states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat"}, arn)
		allow(submit, []string{"states:SendTaskSuccess", "states:SendTaskFailure"}, arn)
	}
}

// grantPipelineReach gives the item function what the pipelines reach
// beyond bulkrun's own resources, each exactly as declared: the lambda
// pipeline's functions, the tables staged writes go to, the keys of what
// it reads (and submit: sources), the secrets batches reference.
func (r *runner) grantPipelineReach(item awslambda.Function) {
	s := r.s
	// The lambda pipeline: invoke exactly the allow-listed functions, one
	// statement each (a name is a function of this account and region).
	for _, f := range s.lambdaFunctions {
		arn := jsii.String(f)
		if !*awscdk.Token_IsUnresolved(arn) && !strings.HasPrefix(f, "arn:") {
			arn = regionalArn("lambda", "function:"+f)
		}
		allow(item, []string{"lambda:InvokeFunction"}, arn)
	}

	// Staged writes: the actions of a TransactWriteItems on each declared
	// table, one statement per table ("Using IAM policy conditions for
	// fine-grained access control" / TransactWriteItems, Amazon DynamoDB
	// developer guide: each action of the transaction needs its own
	// permission).
	for _, t := range s.effectTables {
		allow(item, []string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem"},
			regionalArn("dynamodb", "table/"+t))
	}

	// Customer managed keys: kms:Decrypt only through the services that
	// read what they encrypt, in the key's Region (kms:ViaService).
	for _, k := range s.kmsKeys {
		allowDecrypt(r.functions[FunctionSubmit], k, "s3")
		allowDecrypt(item, k, "s3", "ssm", "secretsmanager")
	}

	// Secret references: read access per declared prefix, per service.
	var parameters, secrets []*string
	for _, p := range s.secretPrefixes {
		if strings.Contains(p, ":ssm:") {
			parameters = append(parameters, jsii.String(p))
		} else {
			secrets = append(secrets, jsii.String(p))
		}
	}
	if len(parameters) > 0 {
		allow(item, []string{"ssm:GetParameter"}, parameters...)
	}
	if len(secrets) > 0 {
		allow(item, []string{"secretsmanager:GetSecretValue"}, secrets...)
	}
}

// allowDecrypt lets fn's role use key (an ARN, or a token: the stack's
// Region) to decrypt through services only: kms:Decrypt with
// kms:ViaService = {service}.{key's Region}.{its partition's domain}.
func allowDecrypt(fn awslambda.Function, key string, services ...string) {
	var via []*string
	parts := strings.Split(key, ":")
	for _, svc := range services {
		switch {
		case *awscdk.Token_IsUnresolved(jsii.String(key)) || len(parts) < 4:
			via = append(via, awscdk.Fn_Join(jsii.String(""), &[]*string{jsii.String(svc + "."), awscdk.Aws_REGION(), jsii.String("."), awscdk.Aws_URL_SUFFIX()}))
		case parts[1] == "aws-cn":
			via = append(via, jsii.String(svc+"."+parts[3]+".amazonaws.com.cn"))
		default:
			via = append(via, jsii.String(svc+"."+parts[3]+".amazonaws.com"))
		}
	}
	fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:    jsii.Strings("kms:Decrypt"),
		Resources:  jsii.Strings(key),
		Conditions: &map[string]any{"StringEquals": map[string]any{"kms:ViaService": via}},
	}))
}

// allow adds one statement to fn's role: actions on resources.
func allow(fn awslambda.Function, actions []string, resources ...*string) {
	fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings(actions...),
		Resources: &resources,
	}))
}

// regionalArn is arn:{partition}:{service}:{region}:{account}:{resource}
// of the stack's account and region.
func regionalArn(service, resource string) *string {
	return awscdk.Fn_Join(jsii.String(""), &[]*string{jsii.String("arn:"), awscdk.Aws_PARTITION(), jsii.String(":" + service + ":"),
		awscdk.Aws_REGION(), jsii.String(":"), awscdk.Aws_ACCOUNT_ID(), jsii.String(":" + resource)})
}
