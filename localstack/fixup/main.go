// Command fixup applies, after `cdk deploy` onto the emulator, the stack
// settings that the emulator's CloudFormation ignores (see
// localstack/README.md): the redrive policies of the items queue (to the
// dead-letter queue) and of the dead-letter queue (to the parking queue),
// and the table's TTL. The stack itself stays right for AWS; on AWS this command is not
// needed and does nothing that the stack has not done.
//
// Usage: go run ./localstack/fixup [-stack bulkrun]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/bulkrun/bulkrun/shared/client"
	"github.com/bulkrun/bulkrun/shared/config"
	"github.com/bulkrun/bulkrun/shared/function"
)

func main() {
	stackName := flag.String("stack", config.DefaultStackName, "stack name")
	flag.Parse()
	if err := run(context.Background(), *stackName); err != nil {
		fmt.Fprintln(os.Stderr, "fixup:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, stackName string) error {
	c, err := function.AWSConfig(ctx)
	if err != nil {
		return err
	}
	s, err := client.FindStack(ctx, c, stackName)
	if err != nil {
		return err
	}
	queueURL, err := s.Get(config.OutputItemsQueueURL)
	if err != nil {
		return err
	}
	dlqARN, err := s.Get(config.OutputItemsDLQARN)
	if err != nil {
		return err
	}
	maxReceive, err := s.Get(config.OutputMaxReceiveCount)
	if err != nil {
		return err
	}
	table, err := s.Get(config.OutputTable)
	if err != nil {
		return err
	}
	dlqURL, err := s.Get(config.OutputItemsDLQURL)
	if err != nil {
		return err
	}
	parkingARN, err := s.Get(config.OutputParkingQueueARN)
	if err != nil {
		return err
	}
	policy, _ := json.Marshal(map[string]string{"deadLetterTargetArn": dlqARN, "maxReceiveCount": maxReceive})
	_, err = sqs.NewFromConfig(c).SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{
		QueueUrl:   &queueURL,
		Attributes: map[string]string{string(sqstypes.QueueAttributeNameRedrivePolicy): string(policy)},
	})
	if err != nil {
		return fmt.Errorf("set redrive policy: %w", err)
	}
	parkingPolicy, _ := json.Marshal(map[string]string{"deadLetterTargetArn": parkingARN, "maxReceiveCount": strconv.Itoa(config.ParkingMaxReceiveCount)})
	_, err = sqs.NewFromConfig(c).SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{
		QueueUrl:   &dlqURL,
		Attributes: map[string]string{string(sqstypes.QueueAttributeNameRedrivePolicy): string(parkingPolicy)},
	})
	if err != nil {
		return fmt.Errorf("set the dead-letter queue's redrive policy: %w", err)
	}
	_, err = dynamodb.NewFromConfig(c).UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               &table,
		TimeToLiveSpecification: &ddbtypes.TimeToLiveSpecification{AttributeName: aws.String(config.AttrExpiresAt), Enabled: aws.Bool(true)},
	})
	var ve interface{ ErrorMessage() string }
	if err != nil && !(errors.As(err, &ve) && strings.Contains(strings.ToLower(ve.ErrorMessage()), "already enabled")) {
		return fmt.Errorf("enable TTL: %w", err)
	}
	fmt.Printf("fixup: redrive policy on the items queue (maxReceiveCount %s) and the dead-letter queue (parking after %d), TTL on %s\n",
		maxReceive, config.ParkingMaxReceiveCount, table)
	return nil
}
