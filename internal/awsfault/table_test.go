package awsfault

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/bulkrun/bulkrun/shared/ledger"
)

var update = flag.Bool("update", false, "rewrite docs/design/errors.md's tables from Table and Calls")

// root is the module's root, from this package's directory.
const root = "../.."

// sdkServices maps an AWS SDK for Go v2 service package to the SigV4
// signing name Calls and Table use.
var sdkServices = map[string]string{
	"dynamodb": "dynamodb", "s3": "s3", "sqs": "sqs", "lambda": "lambda", "eventbridge": "events",
	"ssm": "ssm", "secretsmanager": "secretsmanager", "cloudformation": "cloudformation",
	"cloudwatch": "monitoring", "apigateway": "apigateway", "cloudwatchlogs": "logs", "sns": "sns", "sts": "sts",
}

// transferOps are the S3 operations the transfer manager's UploadObject
// makes (feature/s3/transfermanager: one PutObject, or a multipart upload
// and its abort on failure).
var transferOps = []string{"PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload", "AbortMultipartUpload"}

// notProduct are the module's directories whose code no function or CLI
// runs: the test bed, the examples, the emulator's deploy tools and the
// helper that deploys a Python function onto the emulator.
var notProduct = []string{"integration", "examples", "localstack", "tools", "internal/pyfunc", "build", "node_modules"}

// callSites finds, with go/ast, every AWS SDK operation the product's
// non-test Go files build an input for (a composite literal of type
// service.OperationInput, which every call, paginator and waiter takes),
// by service and operation, with the packages that do.
func callSites(t *testing.T) map[[2]string][]string {
	t.Helper()
	found := map[[2]string][]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || slices.Contains(notProduct, rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		svc := map[string]string{} // local name → service
		transfer := map[string]bool{}
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			name := path[strings.LastIndex(path, "/")+1:]
			local := name
			if im.Name != nil {
				local = im.Name.Name
			}
			switch {
			case strings.HasPrefix(path, "github.com/aws/aws-sdk-go-v2/service/") && strings.Count(path, "/") == 4:
				s, ok := sdkServices[name]
				if !ok {
					t.Errorf("%s imports %s, a service this test does not name: add it to sdkServices", rel, path)
					s = name
				}
				svc[local] = s
			case path == "github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager":
				transfer[local] = true
			}
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		add := func(service, op string) {
			k := [2]string{service, op}
			if !slices.Contains(found[k], pkg) {
				found[k] = append(found[k], pkg)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok && signsForAPI(call) {
				add("execute-api", "Invoke")
				return true
			}
			cl, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			sel, ok := cl.Type.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			id, ok := sel.X.(*ast.Ident)
			if !ok || !strings.HasSuffix(sel.Sel.Name, "Input") {
				return true
			}
			switch {
			case svc[id.Name] != "":
				add(svc[id.Name], strings.TrimSuffix(sel.Sel.Name, "Input"))
			case transfer[id.Name] && sel.Sel.Name == "UploadObjectInput":
				for _, op := range transferOps {
					add("s3", op)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ps := range found {
		sort.Strings(ps)
	}
	return found
}

// signsForAPI reports whether call signs a request for bulkrun's REST API:
// a SignHTTP call (the SDK's SigV4 signer) naming the service
// "execute-api".
func signsForAPI(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "SignHTTP" {
		return false
	}
	for _, a := range call.Args {
		if lit, ok := a.(*ast.BasicLit); ok && lit.Value == `"execute-api"` {
			return true
		}
	}
	return false
}

// TestCallsAreEveryCallSite: Calls lists exactly the operations the
// product's code calls, each with exactly the packages that call it. An
// adapter that starts calling an operation fails here until the
// operation is in Calls (and TestEveryCallHasRows until it has rows).
func TestCallsAreEveryCallSite(t *testing.T) {
	found := callSites(t)
	listed := map[[2]string][]string{}
	for _, c := range Calls {
		k := [2]string{c.Service, c.Operation}
		if _, dup := listed[k]; dup {
			t.Errorf("Calls lists %s %s twice", c.Service, c.Operation)
		}
		listed[k] = c.Callers
	}
	for k, ps := range found {
		if got, ok := listed[k]; !ok {
			t.Errorf("%s calls %s %s, which Calls does not list: add it, and the rows of its errors to Table", strings.Join(ps, ", "), k[0], k[1])
		} else if !reflect.DeepEqual(got, ps) {
			t.Errorf("%s %s: Calls names callers %v, the code %v", k[0], k[1], got, ps)
		}
	}
	for k := range listed {
		if _, ok := found[k]; !ok {
			t.Errorf("Calls lists %s %s, which no product code calls", k[0], k[1])
		}
	}
}

// TestEveryCallHasRows: every operation in Calls has rows in Table for
// throttling or 5xx and for no answer at least, and every row's service
// and operations are calls bulkrun makes.
func TestEveryCallHasRows(t *testing.T) {
	calls := map[[2]string]bool{}
	services := map[string]bool{}
	for _, c := range Calls {
		calls[[2]string{c.Service, c.Operation}] = true
		services[c.Service] = true
	}
	for _, c := range Calls {
		var classes []ledger.FaultClass
		noAnswer := false
		for _, r := range Table {
			if r.Service == c.Service && (r.Operations == nil || slices.Contains(r.Operations, c.Operation)) {
				classes = append(classes, r.Class)
				noAnswer = noAnswer || r.Code == "" && r.Status == 0
			}
		}
		if len(classes) == 0 {
			t.Errorf("%s %s has no rows in Table", c.Service, c.Operation)
			continue
		}
		if !noAnswer || !slices.Contains(classes, ledger.FaultBackoff) {
			t.Errorf("%s %s: no row for no answer or for throttling", c.Service, c.Operation)
		}
	}
	for i, r := range Table {
		if !services[r.Service] {
			t.Errorf("Table[%d] (%s %s): no call of service %q", i, r.Service, r.Code, r.Service)
		}
		for _, op := range r.Operations {
			if !calls[[2]string{r.Service, op}] {
				t.Errorf("Table[%d] (%s %s): bulkrun does not call %s", i, r.Service, r.Code, op)
			}
		}
		if !slices.Contains(ledger.FaultClasses(), r.Class) || r.Source == "" || !strings.Contains(r.Source, "https://") {
			t.Errorf("Table[%d] (%s %s): class %q, source %q", i, r.Service, r.Code, r.Class, r.Source)
		}
	}
}

// TestRetryDecisionPerCode: the retryer decides by code alone (it does
// not know the service), so the rows of one code, message and reason
// agree on retrying in place (class retry or backoff) or not.
func TestRetryDecisionPerCode(t *testing.T) {
	decided := map[string]bool{}
	for _, r := range Table {
		if r.Function || r.Code == "" {
			continue
		}
		for _, code := range []string{r.Code, r.Alias} {
			if code == "" {
				continue
			}
			k := code + "|" + r.Message + "|" + r.Reason
			again := r.Class == ledger.FaultRetry || r.Class == ledger.FaultBackoff
			if d, ok := decided[k]; ok && d != again {
				t.Errorf("%s: rows disagree on retrying in place", k)
			}
			decided[k] = again
		}
	}
}

// errorCell is a row's error as the docs name it.
func errorCell(r Row) string {
	code := "`" + r.Code + "`"
	if r.Alias != "" {
		code += " (`" + r.Alias + "`)"
	}
	switch {
	case r.Function:
		code = "function error " + code
	case r.Code == "" && r.Status == 0:
		return "no answer"
	case r.Code == "":
		return "any code"
	}
	if r.Reason != "" {
		code += ", reason `" + r.Reason + "`"
	}
	if r.Message != "" {
		code += ", message holding \"" + r.Message + "\""
	}
	return code
}

// sourceCell renders "title, URL" as a Markdown link.
func sourceCell(s string) string {
	i := strings.LastIndex(s, ", https://")
	if i < 0 {
		return s
	}
	return "[" + s[:i] + "](" + s[i+2:] + ")"
}

func rowLine(r Row) string {
	ops := "every call"
	if r.Operations != nil {
		ops = "`" + strings.Join(r.Operations, "`, `") + "`"
	}
	status := "—"
	if r.Status != 0 {
		status = strconv.Itoa(r.Status)
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s |", r.Service, ops, errorCell(r), status, r.Class, strings.ReplaceAll(r.Note, "|", "\\|"), sourceCell(r.Source))
}

func callLine(c Call) string {
	return fmt.Sprintf("| %s | %s | `%s` |", c.Service, c.Operation, strings.Join(c.Callers, "`, `"))
}

// section returns the table lines between begin and end in doc, and the
// offsets of what lies between.
func section(t *testing.T, doc, begin, end string) ([]string, int, int) {
	t.Helper()
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("docs/design/errors.md has no %s … %s table", begin, end)
	}
	var lines []string
	for _, l := range strings.Split(doc[i+len(begin):j], "\n") {
		if strings.HasPrefix(l, "| ") && !strings.HasPrefix(l, "| service ") && !strings.HasPrefix(l, "| ---") {
			lines = append(lines, l)
		}
	}
	return lines, i + len(begin), j
}

// TestTableInDocs keeps docs/design/errors.md's two tables equal to Calls
// and Table, row for row (go test ./internal/awsfault -run TestTableInDocs
// -update rewrites them).
func TestTableInDocs(t *testing.T) {
	path := filepath.Join(root, "docs", "design", "errors.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, tc := range []struct {
		begin, end, header string
		want               []string
	}{
		{"<!-- awsfault.Calls -->", "<!-- /awsfault.Calls -->", "| service | operation | callers |\n| --- | --- | --- |", func() (w []string) {
			for _, c := range Calls {
				w = append(w, callLine(c))
			}
			return w
		}()},
		{"<!-- awsfault.Table -->", "<!-- /awsfault.Table -->", "| service | operations | error | status | class | what bulkrun does | source |\n| --- | --- | --- | --- | --- | --- | --- |", func() (w []string) {
			for _, r := range Table {
				w = append(w, rowLine(r))
			}
			return w
		}()},
	} {
		got, from, to := section(t, doc, tc.begin, tc.end)
		if reflect.DeepEqual(got, tc.want) {
			continue
		}
		if *update {
			doc = doc[:from] + "\n" + tc.header + "\n" + strings.Join(tc.want, "\n") + "\n" + doc[to:]
			continue
		}
		t.Errorf("docs/design/errors.md's %s table differs; it should read (or run with -update):\n%s", tc.begin, strings.Join(tc.want, "\n"))
	}
	if *update {
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
