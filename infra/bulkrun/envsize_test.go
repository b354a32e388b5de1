package bulkrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/bulkrun/bulkrun/shared/config"
)

// longAllowLists is testProps(AWS) with the allow-lists of a large
// organisation: 40 source buckets, 20 Lambda functions, 40 webhook hosts
// and 15 secret prefixes — a submit environment of about 6 KB and an item
// environment of about 4.5 KB when they sit in the environment.
func longAllowLists() *RunnerProps {
	p := testProps(TargetAWS)
	p.SourceBuckets, p.LambdaFunctions, p.WebhookAllow, p.SecretPrefixes = nil, nil, nil, nil
	for i := range 40 {
		p.SourceBuckets = append(p.SourceBuckets, fmt.Sprintf("acme-exports-%02d-eu-west-1", i))
		p.WebhookAllow = append(p.WebhookAllow, fmt.Sprintf("hooks-%02d.partner.example.com", i))
	}
	for i := range 20 {
		p.LambdaFunctions = append(p.LambdaFunctions, fmt.Sprintf("arn:aws:lambda:eu-west-1:123456789012:function:score-%02d:live", i))
	}
	for i := range 15 {
		p.SecretPrefixes = append(p.SecretPrefixes, fmt.Sprintf("arn:aws:ssm:eu-west-1:123456789012:parameter/team-%02d/*", i))
	}
	return p
}

// synthProps synthesizes a stack of props and returns its template as JSON.
func synthProps(t *testing.T, props *RunnerProps) *synthesized {
	t.Helper()
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
	stack, err := NewStack(app, config.DefaultStackName, props)
	if err != nil {
		t.Fatalf("NewStack: %v", err)
	}
	tmpl := assertions.Template_FromStack(stack, nil)
	raw, err := json.Marshal(tmpl.ToJSON())
	if err != nil {
		t.Fatal(err)
	}
	s := &synthesized{target: props.Target, props: props, stack: stack, template: tmpl, ids: map[string]string{}}
	if err := json.Unmarshal(raw, &s.json); err != nil {
		t.Fatal(err)
	}
	for _, fn := range functionNames {
		s.ids[fn] = logicalID(stack, fn)
		s.ids["policy:"+fn] = logicalID(stack, fn, "ServiceRole", "DefaultPolicy")
	}
	return s
}

// templateEnv returns function fn's environment as the template resolves
// it (resolve: a resource's name stands as "{id}", shorter than it will
// be) and its size as Lambda measures it.
func templateEnv(t *testing.T, s *synthesized, fn string) (map[string]string, int) {
	t.Helper()
	vars, _ := s.properties(t, s.ids[fn])["Environment"].(map[string]any)["Variables"].(map[string]any)
	env := map[string]string{}
	for k, v := range vars {
		env[k] = resolve(t, v)
	}
	b, _ := json.Marshal(env)
	return env, len(b)
}

// Lambda takes at most 4 KB of environment variables per function and
// fails the deploy above it; the emulator takes any. With long
// allow-lists every function's environment stays within it, measured with
// every resource name at its longest: submit's and item's allow-lists go
// to an SSM parameter of their own (advanced tier when over 4 KB), which
// the environment names and the function's role alone may read
// (ssm:GetParameter on that parameter). A stack whose lists fit keeps
// them in the environment. Guards infra/README.md, "Environment of the
// functions".
func TestEnvironmentsWithinLambdaLimit(t *testing.T) {
	s := synthProps(t, longAllowLists())
	params := s.resourcesOfType("AWS::SSM::Parameter")
	for _, fn := range functionNames {
		env, n := templateEnv(t, s, fn)
		if n > MaxEnvironmentBytes {
			t.Errorf("%s: environment of %d bytes, over Lambda's %d", fn, n, MaxEnvironmentBytes)
		}
		name, moved := env[config.EnvSettingsParameter]
		if fn != FunctionSubmit && fn != FunctionItem {
			if moved {
				t.Errorf("%s: has a settings parameter", fn)
			}
			continue
		}
		if !moved {
			t.Fatalf("%s: no %s; environment %v", fn, config.EnvSettingsParameter, env)
		}
		id := strings.Trim(name, "{}")
		p, ok := params[id]
		if !ok {
			t.Fatalf("%s: %s = %s, no such parameter (have %v)", fn, config.EnvSettingsParameter, name, params)
		}
		props := p["Properties"].(map[string]any)
		var vars map[string]string
		if err := json.Unmarshal([]byte(resolve(t, props["Value"])), &vars); err != nil {
			t.Fatalf("%s: parameter value %v: %v", fn, props["Value"], err)
		}
		for _, k := range []string{config.EnvSources, config.EnvLambdaFunctions, config.EnvWebhookAllow} {
			if _, inEnv := env[k]; inEnv || vars[k] == "" {
				t.Errorf("%s: %s in the environment %v, in the parameter %q; want it in the parameter only", fn, k, inEnv, vars[k])
			}
		}
		if !strings.Contains(vars[config.EnvWebhookAllow], "hooks-39.partner.example.com") || !strings.Contains(vars[config.EnvSources], "s3://acme-exports-39-eu-west-1/") {
			t.Errorf("%s: parameter holds %v", fn, vars)
		}
		if _, has := vars[config.EnvSecretPrefixes]; has != (fn == FunctionSubmit) {
			t.Errorf("%s: secret prefixes in its parameter: %v, want only submit's", fn, has)
		}
		if got := str(props["Tier"]); (got == "Advanced") != (len(resolve(t, props["Value"])) > MaxStandardParameterBytes) {
			t.Errorf("%s: parameter tier %q for a value of %d bytes", fn, got, len(resolve(t, props["Value"])))
		}
		var read []any
		for _, st := range s.statements(t, s.ids["policy:"+fn]) {
			if strings.Contains(strings.Join(actions(st), ","), "ssm:GetParameter") {
				read = append(read, st["Resource"])
			}
		}
		if len(read) != 1 || !references(read[0], id) {
			t.Errorf("%s: ssm:GetParameter on %v, want its parameter %s alone", fn, read, id)
		}
	}
	if len(params) != 2 {
		t.Errorf("%d parameters, want submit's and item's", len(params))
	}
	if got := synth(t, TargetAWS).resourcesOfType("AWS::SSM::Parameter"); len(got) != 0 {
		t.Errorf("a stack whose lists fit has settings parameters: %v", got)
	}
}

// A function environment still over 4 KB — here 70 custom pipelines of
// long names, which stay in the environment — is refused at synth naming
// the function, the limit and every variable with its size, largest
// first; so are allow-lists too long even for an SSM parameter (8 KB).
func TestSynthRefusesAnEnvironmentOver4KB(t *testing.T) {
	p := testProps(TargetAWS)
	p.CustomPipelines = []string{"enrich"} // the schedule's
	for i := range 70 {
		p.CustomPipelines = append(p.CustomPipelines, fmt.Sprintf("enrich-%02d-%s", i, strings.Repeat("x", 50)))
	}
	p.Pipelines = append([]string{"webhook"}, p.CustomPipelines...)
	err := Validate(p)
	var ee *EnvironmentError
	if !errors.As(err, &ee) || ee.Function != FunctionSubmit && ee.Function != FunctionItem || ee.Bytes <= MaxEnvironmentBytes || ee.Vars[0].Name != config.EnvPipelines {
		t.Fatalf("Validate = %v, want an *EnvironmentError with %s first", err, config.EnvPipelines)
	}
	for _, want := range []string{"4 KB (4096 bytes)", "Function environment variables", fmt.Sprintf("%s %d bytes", config.EnvPipelines, ee.Vars[0].Bytes)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\ndoes not say %q", err, want)
		}
	}
	t.Logf("synth refuses: %v", ee)

	p = longAllowLists()
	for i := range 200 {
		p.WebhookAllow = append(p.WebhookAllow, fmt.Sprintf("hooks-%03d.another-partner.example.com", i))
	}
	err = Validate(p)
	var pe *ParameterError
	if !errors.As(err, &pe) || pe.Bytes <= MaxAdvancedParameterBytes || !strings.Contains(err.Error(), "8 KB") || !strings.Contains(err.Error(), config.EnvWebhookAllow) {
		t.Fatalf("Validate = %v, want a *ParameterError naming %s and SSM's 8 KB", err, config.EnvWebhookAllow)
	}
}

// The environment is measured with each resource's name at its longest
// and each token of the props at 255 bytes, as Lambda measures it: the
// JSON object.
func TestMeasureEnvironment(t *testing.T) {
	n, sizes := measure(map[string]string{"A": "x", config.EnvTable: refTable, "T": "${Token[TOKEN.12]}"})
	want := len(`{"A":"x","BULKRUN_TABLE":"","T":""}`) + 255 + 255
	if n != want || sizes[0].Bytes != len(`"BULKRUN_TABLE":""`)+255 || sizes[len(sizes)-1].Name != "A" {
		t.Fatalf("measure = %d %v, want %d, the table first", n, sizes, want)
	}
}
