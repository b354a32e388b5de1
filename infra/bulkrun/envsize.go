package bulkrun

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/bulkrun/bulkrun/shared/config"
)

// MaxEnvironmentBytes is Lambda's limit on a function's environment
// variables, all of them together, in bytes: 4 KB (Lambda quotas,
// "Function environment variables", 4 KB for all environment variables
// associated with the function, combined:
// https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
// Lambda measures them as the JSON object {"NAME":"value",…}; above it
// CloudFormation fails the function's creation or update and rolls the
// stack back. The emulator takes any size.
const MaxEnvironmentBytes = 4096

// Limits of a String parameter's value, in bytes: 4 KB in the standard
// tier, 8 KB in the advanced one (AWS Systems Manager endpoints and
// quotas, "Parameter value size":
// https://docs.aws.amazon.com/general/latest/gr/ssm.html). An advanced
// parameter is billed (per parameter and month).
const (
	MaxStandardParameterBytes = 4096
	MaxAdvancedParameterBytes = 8192
)

// Placeholders of the functions' settings parameters (settings.env), by
// function: NewRunner puts each parameter's name in their place.
var refSettingsParameter = map[string]string{
	FunctionSubmit: "bulkrun-ref-submit-settings",
	FunctionItem:   "bulkrun-ref-item-settings",
}

// longest gives the longest value each placeholder of the stack's own
// resources can resolve to, so that a measured environment is never
// smaller than the deployed one: a table name 255 bytes (DynamoDB's
// maximum), a bucket name 63 (S3's), the items queue's URL with the
// longest Region, an account id and a queue name of 80 bytes (SQS's
// maximum), a function name 64 (Lambda's), the dead-letter queue's ARN
// likewise, a stack name 128 (CloudFormation's), a settings parameter's
// name (/bulkrun/{stack}/{function}-settings, or one CloudFormation
// generates) 160.
var longest = map[string]int{
	refTable:                             255,
	refBucket:                            63,
	refItemsQueueURL:                     len("https://sqs.ap-southeast-4.amazonaws.com.cn/123456789012/") + 80,
	refFinalizeFunction:                  64,
	refDeadLetterARN:                     len("arn:aws-us-gov:sqs:ap-southeast-4:123456789012:") + 80,
	refStackName:                         128,
	refSettingsParameter[FunctionSubmit]: 160,
	refSettingsParameter[FunctionItem]:   160,
}

// tokenRE matches an unresolved CDK token in a string (a function ARN or
// a table name of the same app, given in props).
var tokenRE = regexp.MustCompile(`\$\{Token\[[^\]]*\]\}`)

// atLongest returns v with each placeholder and each unresolved token at
// the longest value it can resolve to (a token: 255 bytes, the longest
// name or ARN a prop takes).
func atLongest(v string) string {
	for ref, n := range longest {
		v = strings.ReplaceAll(v, ref, strings.Repeat("x", n))
	}
	return tokenRE.ReplaceAllLiteralString(v, strings.Repeat("x", 255))
}

// VarSize is one variable's share of an environment's size, in bytes:
// its name and value as they stand in the measured JSON.
type VarSize struct {
	Name  string
	Bytes int
}

// measure returns the size of vars as Lambda measures an environment (the
// compact JSON object), each value at its longest (atLongest), and each
// variable's share, largest first.
func measure(vars map[string]string) (int, []VarSize) {
	long := make(map[string]string, len(vars))
	var sizes []VarSize
	for k, v := range vars {
		long[k] = atLongest(v)
		kb, _ := json.Marshal(k)
		vb, _ := json.Marshal(long[k])
		sizes = append(sizes, VarSize{Name: k, Bytes: len(kb) + 1 + len(vb)})
	}
	b, _ := json.Marshal(long)
	slices.SortFunc(sizes, func(a, b VarSize) int {
		if a.Bytes != b.Bytes {
			return b.Bytes - a.Bytes
		}
		return strings.Compare(a.Name, b.Name)
	})
	return len(b), sizes
}

// EnvironmentError is a function's environment that Lambda would refuse:
// over MaxEnvironmentBytes even with its allow-lists in its settings
// parameter. Bytes is its size with every name at its longest; Vars its
// variables, largest first.
type EnvironmentError struct {
	Function string
	Bytes    int
	Vars     []VarSize
}

func (e *EnvironmentError) Error() string {
	return fmt.Sprintf("bulkrun: the %s function's environment would be %d bytes, over Lambda's 4 KB (%d bytes) of environment variables per function (Lambda quotas, \"Function environment variables\"): CloudFormation would fail the deploy and roll it back. Its variables: %s",
		e.Function, e.Bytes, MaxEnvironmentBytes, varSizes(e.Vars))
}

// ParameterError is a settings parameter SSM would refuse: its value over
// MaxAdvancedParameterBytes. Bytes is the value's size with every name at
// its longest; Vars the variables it holds, largest first.
type ParameterError struct {
	Function string
	Bytes    int
	Vars     []VarSize
}

func (e *ParameterError) Error() string {
	return fmt.Sprintf("bulkrun: the %s function's allow-lists take %d bytes, too many for its environment (Lambda's 4 KB) and for an SSM parameter (8 KB in the advanced tier, %d bytes: AWS Systems Manager quotas, \"Parameter value size\"): shorten them (a prefix or a wildcard for many entries). They are: %s",
		e.Function, e.Bytes, MaxAdvancedParameterBytes, varSizes(e.Vars))
}

func varSizes(vs []VarSize) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("%s %d bytes", v.Name, v.Bytes)
	}
	return strings.Join(parts, ", ")
}

// fitEnvironments keeps every function's environment within
// MaxEnvironmentBytes. A function whose environment would be over it
// (measure) and that has a settings parameter placeholder (submit, item)
// gets its allow-lists (config.ParameterVars) moved into s.parameters[fn],
// the value of an SSM parameter it reads at start, and
// config.EnvSettingsParameter naming it. It returns an *EnvironmentError
// for an environment still over the limit and a *ParameterError for a
// parameter over SSM's.
func (s *settings) fitEnvironments() []error {
	var errs []error
	for _, fn := range functionNames {
		env := s.env[fn]
		n, sizes := measure(env)
		if n <= MaxEnvironmentBytes {
			continue
		}
		if ref, ok := refSettingsParameter[fn]; ok {
			moved := map[string]string{}
			for _, k := range config.ParameterVars() {
				if v, ok := env[k]; ok {
					moved[k] = v
					delete(env, k)
				}
			}
			if len(moved) > 0 {
				env[config.EnvSettingsParameter] = ref
				if s.parameters == nil {
					s.parameters = map[string]map[string]string{}
				}
				s.parameters[fn] = moved
				if pn, psizes := parameterBytes(moved); pn > MaxAdvancedParameterBytes {
					errs = append(errs, &ParameterError{Function: fn, Bytes: pn, Vars: psizes})
				}
				n, sizes = measure(env)
			}
		}
		if n > MaxEnvironmentBytes {
			errs = append(errs, &EnvironmentError{Function: fn, Bytes: n, Vars: sizes})
		}
	}
	return errs
}

// parameterBytes is the size of a settings parameter's value, the JSON
// object of vars, each value at its longest, and each variable's share.
func parameterBytes(vars map[string]string) (int, []VarSize) {
	return measure(vars)
}
