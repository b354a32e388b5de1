// Command pyfunc deploys a folder of Python code onto the local emulator as
// a Lambda function — a team's function for the `lambda` pipeline
// (docs/pipelines.md, "Pipelines in any language"): every .py file of the
// folder, created or its code replaced, python3.12. `make lambda-function
// FUNCTION=score SRC=path/to/folder` runs it; then `make deploy
// LAMBDA_FUNCTIONS=score` lets the stack call it.
//
// Usage: go run ./localstack/pyfunc -name score -dir path/to/folder [-handler handler.handler] [-env K=V]…
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/bulkrun/bulkrun/internal/pyfunc"
)

type envFlag map[string]string

func (e envFlag) String() string { return fmt.Sprint(map[string]string(e)) }
func (e envFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want NAME=value, got %q", s)
	}
	e[k] = v
	return nil
}

func main() {
	f := pyfunc.Function{Env: map[string]string{}}
	flag.StringVar(&f.Name, "name", "", "function name (required)")
	flag.StringVar(&f.Dir, "dir", "", "folder of the function's .py files (required)")
	flag.StringVar(&f.Handler, "handler", "handler.handler", "handler, module.function")
	flag.Var(envFlag(f.Env), "env", "NAME=value: an environment variable of the function (repeatable)")
	flag.Parse()
	if f.Name == "" || f.Dir == "" {
		fmt.Fprintln(os.Stderr, "pyfunc: -name and -dir are required")
		os.Exit(2)
	}
	if os.Getenv("AWS_ENDPOINT_URL") == "" {
		fmt.Fprintln(os.Stderr, "pyfunc: AWS_ENDPOINT_URL is not set: this deploys onto the local emulator only (on AWS, deploy your function with your own tooling)")
		os.Exit(2)
	}
	ctx := context.Background()
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err == nil {
		err = pyfunc.Deploy(ctx, lambda.NewFromConfig(cfg), f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pyfunc:", err)
		os.Exit(1)
	}
	fmt.Printf("pyfunc: %s deployed from %s (handler %s); %s\n", f.Name, f.Dir, f.Handler, pyfunc.AllowHint(f.Name))
}
