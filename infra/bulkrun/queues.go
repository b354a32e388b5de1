package bulkrun

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/shared/config"
)

// defineQueues defines the items queue, its dead-letter queue and the
// parking queue behind that, with the parking queue's alarm.
//
// The dead-letter queue is consumed by the item function too, so its
// visibility timeout obeys the same rule as the items queue's. The
// parking queue backs the dead-letter queue: a dead letter the item
// function could not record (a live lease, a storage error) is received
// again, and after config.ParkingMaxReceiveCount receives it is parked
// there, where nothing consumes it, the ParkingAlarm fires, and an
// operator redrives it (docs/operations.md).
func (r *runner) defineQueues() {
	visibility := awscdk.Duration_Seconds(jsii.Number(r.s.visibility.Seconds()))
	r.parking = r.queue("ItemsParkingQueue", queueRetention, nil, nil)
	r.dlq = r.queue("ItemsDeadLetterQueue", deadLetterRetention, visibility, &awssqs.DeadLetterQueue{
		Queue:           r.parking,
		MaxReceiveCount: jsii.Number(config.ParkingMaxReceiveCount),
	})
	r.parkingAlarm = depthAlarm(r, "ParkingAlarm", r.parking, 5*time.Minute,
		"bulkrun: dead letters the item function could not record are parked; see docs/operations.md, \"Parked dead letters\"")
	r.items = r.queue("ItemsQueue", itemsRetention, visibility, &awssqs.DeadLetterQueue{
		Queue:           r.dlq,
		MaxReceiveCount: jsii.Number(float64(r.s.maxReceiveCount)),
	})
}

// queue defines one of the stack's queues: SSE-SQS, the retention, the
// stack's removal policy; visibility and dead-letter queue when given.
func (r *runner) queue(id string, retention time.Duration, visibility awscdk.Duration, dlq *awssqs.DeadLetterQueue) awssqs.Queue {
	return awssqs.NewQueue(r.Construct, jsii.String(id), &awssqs.QueueProps{
		VisibilityTimeout: visibility,
		RetentionPeriod:   awscdk.Duration_Seconds(jsii.Number(retention.Seconds())),
		Encryption:        awssqs.QueueEncryption_SQS_MANAGED,
		RemovalPolicy:     r.removal,
		DeadLetterQueue:   dlq,
	})
}

// depthAlarm defines an alarm raised when q holds a visible message
// (ApproximateNumberOfMessagesVisible, maximum over period, ≥ 1), missing
// data not breaching.
func depthAlarm(r *runner, id string, q awssqs.Queue, period time.Duration, desc string) awscloudwatch.Alarm {
	return awscloudwatch.NewAlarm(r.Construct, jsii.String(id), &awscloudwatch.AlarmProps{
		AlarmDescription: jsii.String(desc),
		Metric: q.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
			Period:    awscdk.Duration_Seconds(jsii.Number(period.Seconds())),
			Statistic: jsii.String("Maximum"),
		}),
		Threshold:          jsii.Number(1),
		EvaluationPeriods:  jsii.Number(1),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
}
