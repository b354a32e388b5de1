// Package secret resolves bulkrun's secret references (secretref.Parse):
// an SSM parameter's value (GetParameter with decryption, so a
// SecureString comes back in clear) or a Secrets Manager secret's
// SecretString (GetSecretValue, current version). It is the only importer
// of the SSM and Secrets Manager SDKs.
//
// A reference is read by its full ARN, in the Region the ARN names
// (each call's client Region is the ARN's): a parameter shared from
// another account is found only by its ARN ("GetParameter", AWS Systems
// Manager API Reference: "For parameters shared with you from another
// account, you must use the full ARN"), and a parameter or secret of
// another Region is never the local one of the same name. A SecureString
// or secret encrypted with a customer managed key also needs kms:Decrypt
// on that key through the service (RunnerProps.KMSKeys).
//
// Values are cached in memory for TTL (default DefaultTTL) per ARN, so a
// batch of many items costs one call per reference per function instance
// and TTL; a rotated secret is picked up within TTL, and at once when the
// receiver rejects the old value: the worker then reads it again with
// ResolveFresh, which bypasses the cache, and the item's next attempt
// sends the new value.
//
// Errors are classified by internal/awsfault's table (docs/design/errors.md,
// from each service's documentation: AWS Secrets Manager API Reference,
// "GetSecretValue", Errors,
// https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_GetSecretValue.html;
// AWS Systems Manager API Reference, "GetParameter", Errors,
// https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_GetParameter.html;
// the common ThrottlingException of both, "Common Errors"):
// ThrottlingException is throttled (ledger.Throttled) and, with 5xx
// (InternalServiceError, InternalServerError), timeouts and lost
// connections, wraps ledger.ErrUnavailable (the item waits, costing no
// attempt); DecryptionFailure (the secret's KMS key refuses) is a pause
// (ledger.PauseFault, also ErrUnavailable: no item fails for it, the
// batch pauses); everything else (ResourceNotFoundException,
// ParameterNotFound, ParameterVersionNotFound, InvalidKeyId,
// InvalidRequestException, InvalidParameterException,
// AccessDeniedException) fails the same way every time and does not.
package secret

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/bulkrun/bulkrun/internal/awsfault"
	"github.com/bulkrun/bulkrun/shared/ledger"
)

// DefaultTTL is how long a resolved value is reused: 5 minutes. A value
// the receiver rejects is read again at once (ResolveFresh); otherwise a
// rotation reaches this function instance within DefaultTTL. Secrets
// Manager's own caching clients use 1 hour (AWS Secrets Manager user
// guide, "Cache secrets"); bulkrun keeps it shorter so that a revoked
// value stops being sent soon after.
const DefaultTTL = 5 * time.Minute

// Store resolves references through SSM and Secrets Manager. Safe for
// concurrent use.
type Store struct {
	ssm *ssm.Client
	sm  *secretsmanager.Client
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	value string
	until time.Time
}

// New returns a Store using clients built from c (with awsfault.Tag, so an
// unavailable AWS wraps ledger.ErrUnavailable), caching values for ttl (0:
// DefaultTTL).
func New(c aws.Config, ttl time.Duration) *Store {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Store{
		ssm: ssm.NewFromConfig(c, func(o *ssm.Options) {
			o.APIOptions = append(slices.Clip(o.APIOptions), awsfault.Tag("ssm"))
		}),
		sm: secretsmanager.NewFromConfig(c, func(o *secretsmanager.Options) {
			o.APIOptions = append(slices.Clip(o.APIOptions), awsfault.Tag("secretsmanager"))
		}),
		ttl: ttl, now: time.Now, cache: map[string]cached{},
	}
}

// Resolve returns the value behind arn: an SSM parameter ARN
// (arn:…:ssm:…:parameter/…) or a Secrets Manager secret ARN
// (arn:…:secretsmanager:…:secret:…), from the cache when read less than
// TTL ago. Errors name the ARN and the AWS error code, never a value; one
// wrapping ledger.ErrUnavailable can be retried (see the package comment).
func (s *Store) Resolve(ctx context.Context, arn string) (string, error) {
	s.mu.Lock()
	if c, ok := s.cache[arn]; ok && s.now().Before(c.until) {
		s.mu.Unlock()
		return c.value, nil
	}
	s.mu.Unlock()
	return s.ResolveFresh(ctx, arn)
}

// ResolveFresh reads arn's value from its service whatever the cache
// holds, and caches it: what the worker calls when a receiver rejected
// the cached value (a secret rotated since it was read).
func (s *Store) ResolveFresh(ctx context.Context, arn string) (string, error) {
	var v string
	switch {
	case strings.Contains(arn, ":ssm:"):
		out, err := s.ssm.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(arn), WithDecryption: aws.Bool(true)},
			func(o *ssm.Options) { o.Region = regionOf(arn, o.Region) })
		if err != nil {
			return "", classify("ssm", fmt.Errorf("ssm GetParameter %s: %w", arn, err))
		}
		if out.Parameter == nil || out.Parameter.Value == nil {
			return "", fmt.Errorf("ssm GetParameter %s: no value", arn)
		}
		v = *out.Parameter.Value
	case strings.Contains(arn, ":secretsmanager:"):
		out, err := s.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)},
			func(o *secretsmanager.Options) { o.Region = regionOf(arn, o.Region) })
		if err != nil {
			return "", classify("secretsmanager", fmt.Errorf("secretsmanager GetSecretValue %s: %w", arn, err))
		}
		if out.SecretString == nil {
			return "", fmt.Errorf("secretsmanager GetSecretValue %s: not a string secret", arn)
		}
		v = *out.SecretString
	default:
		return "", errors.New("not an SSM parameter or Secrets Manager secret ARN: " + arn)
	}
	s.mu.Lock()
	s.cache[arn] = cached{value: v, until: s.now().Add(s.ttl)}
	s.mu.Unlock()
	return v, nil
}

// regionOf returns the Region of an ARN
// (arn:partition:service:region:account:resource), or def when it names
// none.
func regionOf(arn, def string) string {
	if parts := strings.SplitN(arn, ":", 5); len(parts) == 5 && parts[3] != "" {
		return parts[3]
	}
	return def
}

// classify marks a throttled call of service (class backoff in
// awsfault.Table) as throttled (ledger.Throttled: the SDK's own tries were
// spent on it); it already wraps ledger.ErrUnavailable (awsfault.Tag), as
// 5xx, timeouts and a pause do.
func classify(service string, err error) error {
	if f, ok := ledger.FaultOf(err); ok && f.Class == ledger.FaultBackoff {
		return ledger.Throttled(service, f.Code, err)
	}
	return err
}

// Settings reads a function's settings parameter (config.EnvSettingsParameter):
// the SSM String parameter name, holding the variables the stack moved
// out of the function's environment as a JSON object of strings, read
// with GetParameter through a client built from c (its retryer and
// application id). Errors name the parameter: AWS's own, or a value that
// is not such an object.
func Settings(ctx context.Context, c aws.Config, name string) (map[string]string, error) {
	out, err := ssm.NewFromConfig(c).GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(name)})
	if err != nil {
		return nil, fmt.Errorf("settings parameter %s: %w", name, err)
	}
	var vars map[string]string
	if out.Parameter == nil || json.Unmarshal([]byte(aws.ToString(out.Parameter.Value)), &vars) != nil {
		return nil, fmt.Errorf("settings parameter %s: want a JSON object of strings", name)
	}
	return vars, nil
}
