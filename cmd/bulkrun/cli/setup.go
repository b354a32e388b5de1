package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go"

	"github.com/bulkrun/bulkrun/shared/client"
)

// SetupError says what the CLI is missing to reach the stack — Missing is
// one of "region", "credentials", "endpoint", "stack" — and how to fix it.
// It wraps the SDK's error (errors.Is/As still see it) but prints as a
// sentence a person can act on; the SDK's own text follows after "cause:".
type SetupError struct {
	Missing string
	Fix     string
	Err     error
}

func (e *SetupError) Error() string {
	if e.Err == nil {
		return e.Fix
	}
	return e.Fix + " (cause: " + e.Err.Error() + ")"
}

func (e *SetupError) Unwrap() error { return e.Err }

// findStack checks what can be checked before any network call (a region,
// credentials), then reads the stack's outputs, turning an unreachable
// endpoint and an undeployed stack into a *SetupError.
func (a *app) findStack(ctx context.Context, c aws.Config) (client.Stack, error) {
	where := "AWS"
	if c.BaseEndpoint != nil && *c.BaseEndpoint != "" {
		where = *c.BaseEndpoint + " (AWS_ENDPOINT_URL)"
	}
	if c.Region == "" {
		return nil, &SetupError{Missing: "region",
			Fix: "no AWS region: pass --region, set AWS_REGION, or set region in the profile (aws configure)"}
	}
	if c.Credentials == nil {
		return nil, &SetupError{Missing: "credentials", Fix: noCredentials}
	}
	if _, err := c.Credentials.Retrieve(ctx); err != nil {
		return nil, &SetupError{Missing: "credentials", Fix: noCredentials, Err: err}
	}
	s, err := client.FindStack(ctx, c, a.stack)
	if err == nil {
		return s, nil
	}
	var ae smithy.APIError
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.As(err, &ae) && ae.ErrorCode() == "ValidationError" && strings.Contains(ae.ErrorMessage(), "does not exist"):
		return nil, &SetupError{Missing: "stack", Err: err,
			Fix: fmt.Sprintf("stack %q is not deployed in %s, region %s: deploy it (make deploy, or cdk deploy in infra/), or name the deployed one with --stack or BULKRUN_STACK", a.stack, where, c.Region)}
	case errors.As(err, &oe) || errors.As(err, &ne):
		fix := fmt.Sprintf("cannot reach %s in region %s", where, c.Region)
		if where != "AWS" {
			fix += ": is the emulator running (make deploy starts it)? unset AWS_ENDPOINT_URL to use AWS itself"
		} else {
			fix += ": check the network, a proxy (HTTPS_PROXY) or the region's name"
		}
		return nil, &SetupError{Missing: "endpoint", Fix: fix, Err: err}
	case errors.As(err, &ae) && isAuthCode(ae.ErrorCode()):
		return nil, &SetupError{Missing: "credentials", Err: err,
			Fix: "the AWS credentials were refused: refresh them (aws sso login, or new keys) or pick another --profile"}
	}
	return nil, err
}

const noCredentials = "no AWS credentials: set AWS_PROFILE or pass --profile (aws configure, aws sso login), or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"

// isAuthCode reports whether an AWS error code means the credentials were
// refused (expired, unknown or badly signed).
func isAuthCode(code string) bool {
	switch code {
	case "ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "UnrecognizedClientException",
		"SignatureDoesNotMatch":
		return true
	}
	return false
}
