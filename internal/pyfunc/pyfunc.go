// Package pyfunc deploys a folder of Python code as a Lambda function, for
// the local emulator: the function a team's `lambda` pipeline calls
// (docs/pipelines.md, "Pipelines in any language"), and the example the
// integration suite calls. On AWS a team deploys its function with its own
// tooling; this is the emulator's shortcut.
package pyfunc

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	ltypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/bulkrun/bulkrun/shared/config"
)

// Function is a Python function to deploy.
type Function struct {
	// Name is the function's name (as RunnerProps.LambdaFunctions names it).
	Name string
	// Dir is the folder whose .py files (recursively, paths relative to
	// it) make the deployment package.
	Dir string
	// Handler is "module.function", default "handler.handler".
	Handler string
	// Runtime is the Lambda runtime, default python3.12.
	Runtime ltypes.Runtime
	// Env are the function's environment variables (nil for none).
	Env map[string]string
	// Timeout is the function's timeout, default 30 s.
	Timeout time.Duration
	// Role is the execution role's ARN; the emulator takes any, default
	// arn:aws:iam::000000000000:role/{Name}.
	Role string
}

// Zip is the deployment package of the .py files under dir, each under
// its path relative to dir, in name order (the same folder gives the same
// bytes). A folder without .py files is an error.
func Zip(dir string) ([]byte, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && strings.HasSuffix(p, ".py") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s holds no .py file", dir)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, p := range files {
		src, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(dir, p)
		w, err := zw.CreateHeader(&zip.FileHeader{Name: filepath.ToSlash(rel), Method: zip.Deflate})
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(src); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Deploy creates f, or replaces the code and the environment of the
// function of that name, and waits (a minute at most) until it is active.
// Idempotent.
func Deploy(ctx context.Context, c *lambda.Client, f Function) error {
	code, err := Zip(f.Dir)
	if err != nil {
		return err
	}
	if f.Handler == "" {
		f.Handler = "handler.handler"
	}
	if f.Runtime == "" {
		f.Runtime = ltypes.RuntimePython312
	}
	if f.Timeout == 0 {
		f.Timeout = 30 * time.Second
	}
	if f.Role == "" {
		f.Role = "arn:aws:iam::000000000000:role/" + f.Name
	}
	env := &ltypes.Environment{Variables: f.Env}
	_, err = c.CreateFunction(ctx, &lambda.CreateFunctionInput{
		FunctionName: &f.Name, Runtime: f.Runtime, Handler: &f.Handler, Role: &f.Role,
		Code: &ltypes.FunctionCode{ZipFile: code}, Timeout: aws.Int32(int32(f.Timeout / time.Second)), Environment: env,
	})
	var exists *ltypes.ResourceConflictException
	if errors.As(err, &exists) {
		if _, err = c.UpdateFunctionCode(ctx, &lambda.UpdateFunctionCodeInput{FunctionName: &f.Name, ZipFile: code}); err != nil {
			return fmt.Errorf("update %s: %w", f.Name, err)
		}
		if err := lambda.NewFunctionUpdatedV2Waiter(c).Wait(ctx, &lambda.GetFunctionInput{FunctionName: &f.Name}, time.Minute); err != nil {
			return fmt.Errorf("update %s: %w", f.Name, err)
		}
		_, err = c.UpdateFunctionConfiguration(ctx, &lambda.UpdateFunctionConfigurationInput{FunctionName: &f.Name, Handler: &f.Handler, Environment: env})
	}
	if err != nil {
		return fmt.Errorf("deploy %s: %w", f.Name, err)
	}
	return lambda.NewFunctionActiveV2Waiter(c).Wait(ctx, &lambda.GetFunctionInput{FunctionName: &f.Name}, time.Minute)
}

// AllowHint is what to run once function name is deployed so that the
// emulator's stack may call it (docs/pipelines.md, "Pipelines in any
// language"): make deploy naming it and the example, which the suite's
// lambda tests need (naming functions replaces the default list); for
// the example itself, nothing: the emulator's stack allows it unless
// told otherwise.
func AllowHint(name string) string {
	if name == config.ExampleLambdaFunction {
		return "the emulator's stack allows it unless LAMBDA_FUNCTIONS names others (make deploy, if the stack is not deployed yet)"
	}
	return fmt.Sprintf("allow it: make deploy LAMBDA_FUNCTIONS=%s,%s (naming functions replaces the default list: keep %s to keep running make test)",
		name, config.ExampleLambdaFunction, config.ExampleLambdaFunction)
}
