package bulkrun

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// runnerID is the Runner's construct id in the tests' stacks, as in the
// repository's app: "Default" keeps it out of the logical ids.
const runnerID = "Default"

// NewStack is the tests' stack: a stack named id holding one Runner
// (runnerID) built from props; an AWS-target stack gets a fixed account
// and region. Bad props are Validate's error, and no stack.
func NewStack(scope constructs.Construct, id string, props *RunnerProps) (stack awscdk.Stack, err error) {
	if err := Validate(props); err != nil {
		return nil, err
	}
	sp := &awscdk.StackProps{}
	if props != nil && props.Target == TargetAWS {
		sp.Env = &awscdk.Environment{Account: jsii.String("123456789012"), Region: jsii.String("eu-west-1")}
	}
	stack = awscdk.NewStack(scope, &id, sp)
	defer func() {
		if r := recover(); r != nil {
			stack, err = nil, fmt.Errorf("NewRunner panicked after Validate passed: %v", r)
		}
	}()
	NewRunner(stack, jsii.String(runnerID), props)
	return stack, nil
}
