// Command faultproxy runs bulkrun's fault-injecting proxy
// (internal/faultproxy) in front of an AWS emulator:
//
//	faultproxy -listen 127.0.0.1:4566 -upstream http://127.0.0.1:14566 [-config faults.json] [-v]
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
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/bulkrun/bulkrun/internal/faultproxy"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:4566", "address to serve on")
	upstream := flag.String("upstream", "", "the emulator's URL, e.g. http://127.0.0.1:14566 (required)")
	configFile := flag.String("config", "", "JSON file with the initial {\"seed\": …, \"rules\": […]}")
	verbose := flag.Bool("v", false, "log every injected fault")
	flag.Parse()
	if err := run(*listen, *upstream, *configFile, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "faultproxy:", err)
		os.Exit(1)
	}
}

func run(listen, upstream, configFile string, verbose bool) error {
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
