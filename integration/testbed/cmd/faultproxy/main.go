// Command faultproxy runs bulkrun's fault-injecting proxy
// (integration/testbed/faultproxy) in front of an AWS emulator:
//
//	faultproxy -listen 127.0.0.1:4566 -upstream http://127.0.0.1:14566 [-config faults.json] [-v]
//	           [-iam-lane tools/iam [-iam-stack bulkrun] [-iam-audit]] [-verify-sigv4 test:test]
//	faultproxy -iam-report http://localhost:4566 [-iam-reset]
//
// -iam-lane puts the IAM-checked lane (integration/testbed/iamlane) in
// front of the rules: every call of a bulkrun function is evaluated against its role as
// the stack -iam-stack deployed it, by the evaluator in that folder
// (tools/iam, `npm ci` there first); a denied call is answered AccessDenied
// (recorded only, with -iam-audit). GET /_iam reports the denials.
//
// -verify-sigv4 applies API Gateway's rules to the calls of a REST API
// (integration/testbed/apigw): SigV4 signatures verified against the
// given access keys (AKID:SECRET, comma-separated; the emulator's callers
// sign with test:test), a mismatch answered 403 as API Gateway answers
// it, and a function's answer larger than Lambda returns answered 502.
//
// -iam-report prints the lane's record of the proxy at that URL (the
// calls checked, each denial with its function, action, resource and
// tests, each call it could not check) and exits 1 when it holds any
// denial (but those a test provoked on purpose) or unchecked call; with
// -iam-reset it then forgets them. `make
// demo` ends with it when the lane is on.
//
// Point AWS_ENDPOINT_URL at -listen. It starts with no rules (every call
// passes unchanged) or with the Config in -config ({"seed": 1, "rules":
// [...]}); POST /_faults changes them at runtime, GET /_faults reports the
// faults injected by kind. It stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/bulkrun/bulkrun/integration/testbed/apigw"
	"github.com/bulkrun/bulkrun/integration/testbed/faultproxy"
	"github.com/bulkrun/bulkrun/integration/testbed/iamlane"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:4566", "address to serve on")
	upstream := flag.String("upstream", "", "the emulator's URL, e.g. http://127.0.0.1:14566 (required)")
	configFile := flag.String("config", "", "JSON file with the initial {\"seed\": …, \"rules\": […]}")
	verbose := flag.Bool("v", false, "log every injected fault")
	lane := flag.String("iam-lane", "", "folder of the IAM lane's evaluator (tools/iam): check every bulkrun function's calls against its deployed role")
	stack := flag.String("iam-stack", "bulkrun", "the stack whose roles the IAM lane reads")
	audit := flag.Bool("iam-audit", false, "IAM lane: record denials without refusing the calls")
	report := flag.String("iam-report", "", "print the IAM lane's record of the proxy at this URL and exit 1 on any denial")
	reset := flag.Bool("iam-reset", false, "with -iam-report: forget the record after printing it")
	sigv4 := flag.String("verify-sigv4", "", "AKID:SECRET,…: verify the SigV4 signatures of execute-api calls with these keys (API Gateway's rules, integration/testbed/apigw)")
	flag.Parse()
	if *report != "" {
		ok, err := printReport(os.Stdout, *report, *reset)
		if err != nil {
			fmt.Fprintln(os.Stderr, "faultproxy:", err)
			os.Exit(1)
		}
		if !ok {
			os.Exit(1)
		}
		return
	}
	if err := run(*listen, *upstream, *configFile, *verbose, laneFlags{*lane, *stack, *audit}, *sigv4); err != nil {
		fmt.Fprintln(os.Stderr, "faultproxy:", err)
		os.Exit(1)
	}
}

// laneFlags are the IAM lane's flags.
type laneFlags struct {
	dir, stack string
	audit      bool
}

func run(listen, upstream, configFile string, verbose bool, lf laneFlags, sigv4 string) error {
	if upstream == "" {
		return errors.New("-upstream is required")
	}
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	p, err := faultproxy.New(upstream, log)
	if err != nil {
		return err
	}
	if configFile != "" {
		b, err := os.ReadFile(configFile)
		if err != nil {
			return err
		}
		var c faultproxy.Config
		if err := json.Unmarshal(b, &c); err != nil {
			return fmt.Errorf("%s: %w", configFile, err)
		}
		if err := p.Set(c); err != nil {
			return fmt.Errorf("%s: %w", configFile, err)
		}
	}
	var gates faultproxy.Gates
	if lf.dir != "" {
		ev, err := iamlane.StartEvaluator(lf.dir)
		if err != nil {
			return err
		}
		defer ev.Close()
		gates = append(gates, iamlane.New(iamlane.Options{Upstream: upstream, Stack: lf.stack, Region: "us-east-1", Account: "000000000000",
			Audit: lf.audit, Evaluator: ev, Log: log}))
		log.Info("IAM lane on", "stack", lf.stack, "audit", lf.audit)
	}
	if sigv4 != "" {
		secrets := map[string]string{}
		for _, pair := range strings.Split(sigv4, ",") {
			id, secret, ok := strings.Cut(pair, ":")
			if !ok || id == "" || secret == "" {
				return fmt.Errorf("-verify-sigv4 %q: want AKID:SECRET,…", sigv4)
			}
			secrets[id] = secret
		}
		gates = append(gates, &apigw.Gate{Secrets: secrets})
		log.Info("API Gateway's rules on: SigV4 verified, Lambda's response limit", "access_keys", len(secrets))
	}
	switch len(gates) {
	case 0:
	case 1:
		p.SetGate(gates[0])
	default:
		p.SetGate(gates)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	log.Info("serving", "listen", ln.Addr().String(), "upstream", upstream)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// printReport prints the IAM lane's record at base and says whether it is
// clean (no denial, no unchecked call).
func printReport(w io.Writer, base string, reset bool) (bool, error) {
	u := strings.TrimRight(base, "/") + faultproxy.GatePath
	resp, err := http.Get(u)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s: %s (is the proxy running with -iam-lane?)", u, resp.Status)
	}
	var rep iamlane.Report
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		return false, err
	}
	fmt.Fprintf(w, "IAM lane (%s, stack %s): %d calls of bulkrun functions checked, %d allowed, %d denials, %d unchecked\n",
		rep.Mode, rep.Stack, rep.Checked, rep.Allowed, len(rep.Denials), len(rep.Problems))
	for _, d := range rep.Denials {
		fmt.Fprintln(w, "  "+d.String())
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "  unchecked: %s (%d call(s)): %s\n", p.Call, p.Count, p.Message)
	}
	for _, l := range rep.Loops {
		fmt.Fprintf(w, "  recursive loop stopped: function %s sent %s to %s for the %dth time (expected %v)\n", l.Function, l.Message, l.Queue, l.Hops, l.Expected)
	}
	if reset {
		req, _ := http.NewRequest(http.MethodDelete, u, nil)
		if r, err := http.DefaultClient.Do(req); err == nil {
			r.Body.Close()
		}
	}
	return rep.Clean(), nil
}
