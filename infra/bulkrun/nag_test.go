package bulkrun

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/cxapi"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/bulkrun/bulkrun/shared/config"
)

// nagFindings synthesizes a fresh stack of target with cdk-nag's
// AwsSolutions pack applied and returns its unsuppressed errors and
// warnings, one "rule-id path" line each.
func nagFindings(t *testing.T, name string, props *RunnerProps) []string {
	t.Helper()
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
	stack, err := NewStack(app, config.DefaultStackName, props)
	if err != nil {
		t.Fatalf("NewStack(%s): %v", name, err)
	}
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(false)}), nil)
	ann := assertions.Annotations_FromStack(stack)
	var out []string
	for _, find := range []func(*string, any) *[]*cxapi.SynthesisMessage{ann.FindError, ann.FindWarning} {
		for _, m := range *find(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))) {
			text := fmt.Sprint(m.Entry.Data)
			rule, _, _ := strings.Cut(text, ": ")
			out = append(out, rule+" "+*m.Id)
		}
	}
	sort.Strings(out)
	return out
}

// TestHardeningNag guards the hardening product line (SSL-only storage,
// throttled and validated API, logged and alarmed functions): cdk-nag's
// AwsSolutions checks find nothing on either target except what
// nagSuppressions lists with a written reason. Removing a protection (the
// queues' SSL-only policy, the API's access log or validator, the
// table's point-in-time recovery…) makes its rule fire here.
func TestHardeningNag(t *testing.T) {
	props := map[string]*RunnerProps{TargetEmulator: testProps(TargetEmulator), TargetAWS: testProps(TargetAWS), opsAWS: opsProps(), "long allow-lists": longAllowLists()}
	for _, name := range append(slices.Clone(opsStacks), "long allow-lists") {
		t.Run(name, func(t *testing.T) {
			if got := nagFindings(t, name, props[name]); len(got) > 0 {
				t.Errorf("%d unsuppressed AwsSolutions findings:\n%s", len(got), strings.Join(got, "\n"))
			}
		})
	}
}

// TestHardeningNagSuppressionsWritten: every suppression is listed in
// infra/README.md with its rule and its reason, word for word.
func TestHardeningNagSuppressionsWritten(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(readme)), " ")
	for _, n := range NagSuppressions {
		if len(n.Reason) < 40 {
			t.Errorf("%s: reason %q is too short to justify anything", n.Rule, n.Reason)
		}
		if !strings.Contains(text, n.Rule) || !strings.Contains(text, strings.Join(strings.Fields(n.Reason), " ")) {
			t.Errorf("infra/README.md does not list %s with its reason %q", n.Rule, n.Reason)
		}
	}
}
