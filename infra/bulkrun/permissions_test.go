package bulkrun

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/config"
)

// permissionRow is one row of infra/README.md's permission table.
type permissionRow struct {
	line      int
	functions []string
	actions   []string
	resources string // the resources cell, as written
}

var backticked = regexp.MustCompile("`([a-z0-9-]+:[A-Za-z]+)`")

// roleFunctions are the functions whose roles the table lists: the four
// and the setup function.
var roleFunctions = append(slices.Clone(functionNames), FunctionSetup)

// readPermissionTable parses the table under "### Permissions" in
// infra/README.md: one row per grant, the functions (comma-separated) in
// the first column, each action in backticks in the second, the resources
// in the third.
func readPermissionTable(t *testing.T) []permissionRow {
	t.Helper()
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	in, header := false, 0
	var rows []permissionRow
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "### Permissions"):
			in = true
			continue
		case !in:
			continue
		case strings.HasPrefix(l, "#"):
			in = false
			continue
		case !strings.HasPrefix(l, "|"):
			if len(rows) > 0 {
				in = false
			}
			continue
		}
		if header < 2 { // column names, then the separator
			header++
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), " | ")
		if len(cells) != 4 {
			t.Fatalf("README.md:%d: permission row has %d cells, want 4 (function | actions | resources | granted): %s", i+1, len(cells), l)
		}
		row := permissionRow{line: i + 1, resources: cells[2]}
		for _, f := range strings.Split(cells[0], ",") {
			f = strings.TrimSpace(f)
			if !slices.Contains(roleFunctions, f) {
				t.Fatalf("README.md:%d: %q is not a function of the stack %v", i+1, f, roleFunctions)
			}
			row.functions = append(row.functions, f)
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			row.actions = append(row.actions, m[1])
		}
		if len(row.actions) == 0 {
			t.Fatalf("README.md:%d: permission row names no action in backticks: %s", i+1, l)
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		t.Fatal("README.md: no permission table under \"### Permissions\"")
	}
	return rows
}

// resourceKind is how a resource of the template is named in the table's
// resources cell: kinds are compared loosely, by a phrase the cell holds,
// so CDK's rendering of tokens (Fn::Join, Fn::GetAtt, pseudo parameters)
// does not matter.
type resourceKind struct {
	name   string // for messages
	phrase string // the cell must contain it
}

// flatten renders a CloudFormation value as one string: Ref X as {X},
// Fn::GetAtt [X, A] as {X.A}, Fn::Join concatenated.
func flatten(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		if r, ok := x["Ref"]; ok {
			return "{" + fmt.Sprint(r) + "}"
		}
		if g, ok := x["Fn::GetAtt"].([]any); ok && len(g) == 2 {
			return "{" + fmt.Sprint(g[0]) + "." + fmt.Sprint(g[1]) + "}"
		}
		if j, ok := x["Fn::Join"].([]any); ok && len(j) == 2 {
			var parts []string
			for _, p := range j[1].([]any) {
				parts = append(parts, flatten(p))
			}
			return strings.Join(parts, fmt.Sprint(j[0]))
		}
		if _, ok := x["Fn::Select"]; ok {
			return "{stack-uuid}" // GeneratedBucketName's
		}
	}
	return fmt.Sprint(v)
}

var attArn = regexp.MustCompile(`^\{([A-Za-z0-9]+)\.Arn\}(.*)$`)

// kindOf classifies one resource of a statement.
func kindOf(t *testing.T, s *synthesized, res any) resourceKind {
	t.Helper()
	r := flatten(res)
	ids := map[string]resourceKind{
		logicalID(s.stack, "Table"):                {"table", "the table"},
		logicalID(s.stack, "ItemsQueue"):           {"items queue", "the items queue"},
		logicalID(s.stack, "ItemsDeadLetterQueue"): {"dead-letter queue", "dead-letter queue"},
		logicalID(s.stack, "ItemsParkingQueue"):    {"parking queue", "parking queue"},
		logicalID(s.stack, "SubmitFailuresQueue"):  {"submit failures queue", "submit failures queue"},
		logicalID(s.stack, "InvokeFailuresQueue"):  {"invocation failures queue", "invocation failures queue"},
		logicalID(s.stack, FunctionSubmit):         {"submit function", "the submit function"},
		logicalID(s.stack, FunctionFinalize):       {"finalize function", "the finalize function"},
		logicalID(s.stack, FunctionItem):           {"item function", "the item function"},
		logicalID(s.stack, FunctionSweep):          {"sweep function", "the sweep function"},
	}
	switch {
	case r == "*":
		return resourceKind{"*", "`*`"}
	case strings.HasSuffix(r, ":apigateway:{AWS::Region}::/account"):
		return resourceKind{"API Gateway account", "the Region's API Gateway account settings"}
	case r == "{AWS::StackId}":
		return resourceKind{"the stack", "the stack"}
	case strings.HasPrefix(r, "{"+logicalID(s.stack, "ApiGatewayCloudWatchRole")):
		return resourceKind{"ApiGatewayCloudWatchRole", "`ApiGatewayCloudWatchRole`"}
	case strings.Contains(r, ":s3:::"):
		path := r[strings.Index(r, ":s3:::")+len(":s3:::"):]
		bucket, key, _ := strings.Cut(path, "/")
		if slices.Contains(s.props.SourceBuckets, bucket) {
			return resourceKind{"SourceBuckets bucket " + path, "`SourceBuckets`"}
		}
		switch key {
		case "":
			if strings.Contains(path, "/") {
				break
			}
			return resourceKind{"bucket", "the bucket"}
		case "*":
			return resourceKind{"any key of the bucket", "(`/*`)"}
		}
		if key == config.BatchesPrefix+"*/"+config.FinalizeCheckpoints+"*" {
			return resourceKind{"finalize checkpoints", "`" + key + "`"}
		}
		for _, p := range []string{config.BatchesPrefix, config.UploadErrorsPrefix, config.ScheduleErrorsPrefix} {
			if key == p+"*" {
				return resourceKind{p + "*", "`" + p + "*`"}
			}
		}
	case strings.Contains(r, ":event-bus/default"):
		return resourceKind{"default event bus", "default event bus"}
	case strings.Contains(r, ":kms:") && strings.Contains(r, ":key/"):
		return resourceKind{"KMSKeys key", "`KMSKeys`"}
	case strings.Contains(r, ":ssm:"):
		return resourceKind{"SSM parameters", "SSM"}
	case strings.Contains(r, ":secretsmanager:"):
		return resourceKind{"Secrets Manager secrets", "Secrets Manager"}
	case strings.Contains(r, ":dynamodb:") && strings.Contains(r, ":table/"):
		return resourceKind{"EffectTables table", "`EffectTables`"}
	case strings.Contains(r, ":states:") && strings.Contains(r, ":stateMachine:"):
		return resourceKind{"TaskStateMachines state machine", "`TaskStateMachines`"}
	case strings.Contains(r, ":lambda:") && strings.Contains(r, ":function:"):
		return resourceKind{"LambdaFunctions function", "`LambdaFunctions`"}
	}
	if m := attArn.FindStringSubmatch(r); m != nil {
		if k, ok := ids[m[1]]; ok {
			switch {
			case m[2] == "":
				return k
			case k.name == "table" && m[2] == "/index/*":
				return resourceKind{"table indexes", "`/index/*`"}
			case k.name == "table" && m[2] == "/index/attention":
				return resourceKind{"table attention index", "`attention` index"}
			}
		}
	}
	t.Fatalf("%s: cannot classify resource %s (add its kind to kindOf and name it in infra/README.md)", s.target, r)
	return resourceKind{}
}

// grants returns, per function and action, the resource kinds the
// function's role is granted the action on, from every IAM policy
// attached to the role.
func grants(t *testing.T, s *synthesized) map[string]map[string][]resourceKind {
	t.Helper()
	roleOf := map[string]string{} // role logical id → function
	for _, fn := range roleFunctions {
		role := flatten(s.properties(t, logicalID(s.stack, fn))["Role"])
		m := attArn.FindStringSubmatch(role)
		if m == nil {
			t.Fatalf("%s: %s's role %s is not a role of the stack", s.target, fn, role)
		}
		roleOf[m[1]] = fn
	}
	out := map[string]map[string][]resourceKind{}
	for id, r := range s.resourcesOfType("AWS::IAM::Policy") {
		roles, _ := r["Properties"].(map[string]any)["Roles"].([]any)
		for _, role := range roles {
			fn, ok := roleOf[strings.Trim(flatten(role), "{}")]
			if !ok {
				continue
			}
			for _, st := range s.statements(t, id) {
				if st["Effect"] != "Allow" {
					continue
				}
				var res []any
				switch x := st["Resource"].(type) {
				case []any:
					res = x
				default:
					res = []any{x}
				}
				for _, a := range actions(st) {
					if out[fn] == nil {
						out[fn] = map[string][]resourceKind{}
					}
					for _, r := range res {
						out[fn][a] = append(out[fn][a], kindOf(t, s, r))
					}
				}
			}
		}
	}
	return out
}

// TestPermissionTable guards the product line "infra/README.md's permission
// table is complete": every action a function's role is granted in the
// synthesized templates (emulator defaults, AWS with non-default props,
// AWS with every operations prop) is listed for that function, on a row
// naming the resource's kind; and every listed action is granted in at
// least one of them.
func TestPermissionTable(t *testing.T) {
	rows := readPermissionTable(t)
	type key struct{ fn, action string }
	listed := map[key][]permissionRow{}
	for _, r := range rows {
		for _, fn := range r.functions {
			for _, a := range r.actions {
				k := key{fn, a}
				listed[k] = append(listed[k], r)
			}
		}
	}
	granted := map[key]bool{}
	// The three shared stacks, and one whose allow-lists are too long for
	// its functions' environments (their settings parameters).
	stacks := map[string]func() *synthesized{
		TargetEmulator:     func() *synthesized { return synthOps(t, TargetEmulator) },
		TargetAWS:          func() *synthesized { return synthOps(t, TargetAWS) },
		opsAWS:             func() *synthesized { return synthOps(t, opsAWS) },
		"long allow-lists": func() *synthesized { return synthProps(t, longAllowLists()) },
	}
	for _, target := range []string{TargetEmulator, TargetAWS, opsAWS, "long allow-lists"} {
		s := stacks[target]()
		for fn, byAction := range grants(t, s) {
			for a, kinds := range byAction {
				k := key{fn, a}
				granted[k] = true
				rs, ok := listed[k]
				if !ok {
					t.Errorf("%s: function %s is granted %s on %s; infra/README.md's permission table does not list it", target, fn, a, kinds[0].name)
					continue
				}
				for _, kind := range kinds {
					named := slices.ContainsFunc(rs, func(r permissionRow) bool { return strings.Contains(r.resources, kind.phrase) })
					if !named {
						t.Errorf("%s: function %s is granted %s on %s; no row of infra/README.md's permission table for %s and %s names it (%q)", target, fn, a, kind.name, fn, a, kind.phrase)
					}
				}
			}
		}
	}
	var stale []string
	for k, rs := range listed {
		if !granted[k] {
			stale = append(stale, fmt.Sprintf("README.md:%d: function %s lists %s, granted in no synthesized template", rs[0].line, k.fn, k.action))
		}
	}
	sort.Strings(stale)
	for _, s := range stale {
		t.Error(s)
	}
}
