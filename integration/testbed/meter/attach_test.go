package meter

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// A metered copy of a config must keep its meter when another copy of the
// same config appends an option of its own: aws.Config.Copy is shallow, so
// without its own backing array the second append overwrites the first
// (both write the base slice's spare capacity), and the meter's clients
// then miss calls, or another config's clients are metered.
func TestAttachKeepsItsOwnOptions(t *testing.T) {
	base := aws.Config{Region: "us-east-1", APIOptions: make([]func(*middleware.Stack) error, 0, 4)}
	metered := base.Copy()
	New(base).Attach(&metered)
	other := base.Copy()
	other.APIOptions = append(other.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("other", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			return next.HandleInitialize(ctx, in)
		}), middleware.After)
	})
	stack := middleware.NewStack("op", smithyhttp.NewStackRequest)
	for _, o := range metered.APIOptions {
		if err := o(stack); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := stack.Initialize.Get("bulkrunMeter"); !ok {
		t.Errorf("the metered config's stack has no meter: %v", stack.Initialize.List())
	}
	if _, ok := stack.Initialize.Get("other"); ok {
		t.Errorf("the metered config's stack has the other copy's middleware: %v", stack.Initialize.List())
	}
}
