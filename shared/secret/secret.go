// Package secret resolves bulkrun's secret references (batch.SecretRef):
// an SSM parameter's value (GetParameter with decryption, so a
// SecureString comes back in clear) or a Secrets Manager secret's
// SecretString (GetSecretValue, current version). It is the only importer
// of the SSM and Secrets Manager SDKs.
//
// Values are cached in memory for TTL (default DefaultTTL) per ARN, so a
// batch of many items costs one call per reference per function instance
// and TTL; a rotated secret is picked up within TTL.
package secret

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/bulkrun/bulkrun/shared/awsfault"
	"github.com/bulkrun/bulkrun/shared/batch"
)

// DefaultTTL is how long a resolved value is reused: 5 minutes.
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

var _ batch.Secrets = (*Store)(nil)

// New returns a Store using clients built from c (with awsfault.Tag, so an
// unavailable AWS wraps batch.ErrUnavailable), caching values for ttl (0:
// DefaultTTL).
func New(c aws.Config, ttl time.Duration) *Store {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Store{
		ssm: ssm.NewFromConfig(c, func(o *ssm.Options) {
			o.APIOptions = append(slices.Clip(o.APIOptions), awsfault.Tag)
		}),
		sm: secretsmanager.NewFromConfig(c, func(o *secretsmanager.Options) {
			o.APIOptions = append(slices.Clip(o.APIOptions), awsfault.Tag)
		}),
		ttl: ttl, now: time.Now, cache: map[string]cached{},
	}
}

// Resolve returns the value behind arn: an SSM parameter ARN
// (arn:…:ssm:…:parameter/…) or a Secrets Manager secret ARN
// (arn:…:secretsmanager:…:secret:…). Errors name the ARN and the AWS error
// code, never a value; one wrapping batch.ErrUnavailable can be retried.
func (s *Store) Resolve(ctx context.Context, arn string) (string, error) {
	s.mu.Lock()
	if c, ok := s.cache[arn]; ok && s.now().Before(c.until) {
		s.mu.Unlock()
		return c.value, nil
	}
	s.mu.Unlock()

	var v string
	switch {
	case strings.Contains(arn, ":ssm:"):
		out, err := s.ssm.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(ParameterName(arn)), WithDecryption: aws.Bool(true)})
		if err != nil {
			return "", fmt.Errorf("ssm GetParameter %s: %w", arn, err)
		}
		if out.Parameter == nil || out.Parameter.Value == nil {
			return "", fmt.Errorf("ssm GetParameter %s: no value", arn)
		}
		v = *out.Parameter.Value
	case strings.Contains(arn, ":secretsmanager:"):
		out, err := s.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
		if err != nil {
			return "", fmt.Errorf("secretsmanager GetSecretValue %s: %w", arn, err)
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

// ParameterName returns the SSM parameter name an ARN names: "/a/b" for
// "arn:…:parameter/a/b" (a hierarchical name), "p" for "arn:…:parameter/p"
// (AWS Systems Manager user guide, "Working with parameter hierarchies").
// The name, not the ARN, is sent: it is what GetParameter takes in every
// region and emulator, and the role's grant is on the ARN either way.
func ParameterName(arn string) string {
	_, rest, _ := strings.Cut(arn, ":parameter/")
	if strings.Contains(rest, "/") {
		return "/" + rest
	}
	return rest
}
