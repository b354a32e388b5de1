package bulkrun

import (
	"strconv"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigateway"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/shared/config"
)

// defineAPI defines the REST API: /batches and /batches/{proxy+}, any
// method, IAM auth, proxied to submit; stage config.DefaultAPIStage.
func (r *runner) defineAPI() {
	r.api = awsapigateway.NewLambdaRestApi(r.Construct, jsii.String("Api"), &awsapigateway.LambdaRestApiProps{
		Handler:        r.functions[FunctionSubmit],
		Proxy:          jsii.Bool(false),
		RestApiName:    jsii.String(*awscdk.Stack_Of(r.Construct).StackName() + "-api"),
		Description:    jsii.String("bulkrun batches API"),
		CloudWatchRole: jsii.Bool(false),
		EndpointTypes:  &[]awsapigateway.EndpointType{awsapigateway.EndpointType_REGIONAL},
		DeployOptions:  &awsapigateway.StageOptions{StageName: jsii.String(config.DefaultAPIStage)},
		DefaultMethodOptions: &awsapigateway.MethodOptions{
			AuthorizationType: awsapigateway.AuthorizationType_IAM,
		},
	})
	// The construct adds its own URL output ("Endpoint"); ApiUrl (defineOutputs)
	// replaces it, so that the outputs are exactly the config.Output* keys
	// (the tests check).
	r.api.Node().TryRemoveChild(jsii.String("Endpoint"))
	batches := r.api.Root().AddResource(jsii.String(config.APIBatchesResource), nil)
	batches.AddMethod(jsii.String("ANY"), nil, nil)
	batches.AddProxy(&awsapigateway.ProxyResourceOptions{AnyMethod: jsii.Bool(true)})
}

// defineOutputs defines one CfnOutput per config.Output* key: the CLI and
// the tests find the stack's resources through them.
func (r *runner) defineOutputs() {
	fn := func(name string) *string { return r.functions[name].FunctionName() }
	for _, o := range []struct {
		key   string
		value *string
		desc  string
	}{
		{config.OutputAPIURL, r.api.Url(), "REST API base URL, stage included"},
		{config.OutputAPIID, r.api.RestApiId(), "REST API id"},
		{config.OutputAPIStage, r.api.DeploymentStage().StageName(), "REST API stage"},
		{config.OutputBucket, r.bucket.BucketName(), "bucket for sources (incoming/) and batches (batches/)"},
		{config.OutputTable, r.table.TableName(), "DynamoDB table"},
		{config.OutputItemsQueueURL, r.items.QueueUrl(), "items queue URL"},
		{config.OutputItemsDLQURL, r.dlq.QueueUrl(), "items dead-letter queue URL"},
		{config.OutputItemsQueueARN, r.items.QueueArn(), "items queue ARN"},
		{config.OutputItemsDLQARN, r.dlq.QueueArn(), "items dead-letter queue ARN"},
		{config.OutputSubmitFunction, fn(FunctionSubmit), "submit function name"},
		{config.OutputItemFunction, fn(FunctionItem), "item function name"},
		{config.OutputFinalizeFunction, fn(FunctionFinalize), "finalize function name"},
		{config.OutputSweepFunction, fn(FunctionSweep), "retention sweep function name"},
		{config.OutputMaxReceiveCount, jsii.String(strconv.Itoa(r.s.maxReceiveCount)), "items queue redrive maxReceiveCount"},
		{config.OutputSubmitFailuresQueueURL, r.submitFailures.QueueUrl(), "queue of uploads and schedule ticks that failed to start after Lambda's retries"},
		{config.OutputSubmitFailuresAlarm, r.submitFailuresAlarm.AlarmName(), "alarm on the submit failures queue's depth"},
		{config.OutputParkingQueueURL, r.parking.QueueUrl(), "parking queue URL (dead letters that could not be recorded)"},
		{config.OutputParkingQueueARN, r.parking.QueueArn(), "parking queue ARN"},
		{config.OutputParkingAlarm, r.parkingAlarm.AlarmName(), "alarm on the parking queue's depth"},
		{config.OutputInvokeFailuresQueueURL, r.invokeFailures.QueueUrl(), "queue of finalize's and sweep's asynchronous invocations that failed after Lambda's retries"},
		{config.OutputInvokeFailuresAlarm, r.invokeFailuresAlarm.AlarmName(), "alarm on the invocation failures queue's depth"},
		{config.OutputScheduleDLQURL, r.scheduleDLQ.QueueUrl(), "schedule events EventBridge could not deliver"},
		{config.OutputScheduleDLQAlarm, r.scheduleDLQAlarm.AlarmName(), "alarm on the schedule dead-letter queue's depth"},
	} {
		awscdk.NewCfnOutput(r.Construct, jsii.String(o.key), &awscdk.CfnOutputProps{
			Key:         jsii.String(o.key),
			Value:       o.value,
			Description: jsii.String(o.desc),
		})
	}
}
