// Package builtin registers bulkrun's built-in pipelines, "lambda",
// "thumbnail" and "webhook", in a pipeline.Registry. An item binary calls Register once at
// start, then adds its own pipelines to the same registry.
package builtin

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/bulkrun/bulkrun/internal/egress"
	"github.com/bulkrun/bulkrun/internal/pipeline/lambdafn"
	"github.com/bulkrun/bulkrun/internal/pipeline/thumbnail"
	"github.com/bulkrun/bulkrun/internal/pipeline/webhook"
	"github.com/bulkrun/bulkrun/shared/pipeline"
)

// Names returns the names of the built-in pipelines in byte order:
// ["lambda", "thumbnail", "webhook"]. The slice is new on every call.
func Names() []string {
	return []string{lambdafn.Name, thumbnail.Name, webhook.Name}
}

// Register adds the built-in pipelines to r: lam under "lambda" (nil:
// lambdafn.New(nil, nil), which allows no function), thumbnail.New(src)
// under "thumbnail" and webhook.New(client, allow) under "webhook" (a nil
// client gets webhook's default transport, which checks every connection
// against allow, the egress allow-list; nil allows no non-public
// destination). It registers nothing and returns an error when src is nil
// or when r already holds any of the names; it is not atomic with respect
// to a concurrent Register of the same names.
func Register(r *pipeline.Registry, src thumbnail.Source, client *http.Client, allow *egress.Policy, lam *lambdafn.Pipeline) error {
	if r == nil {
		return errors.New("builtin: nil registry")
	}
	if src == nil {
		return fmt.Errorf("builtin: register %q: nil thumbnail.Source", thumbnail.Name)
	}
	for _, name := range Names() {
		if _, ok := r.Lookup(name); ok {
			return fmt.Errorf("builtin: register %q: already registered", name)
		}
	}
	if lam == nil {
		lam = lambdafn.New(nil, nil)
	}
	if err := r.Register(lambdafn.Name, lam); err != nil {
		return fmt.Errorf("builtin: %w", err)
	}
	if err := r.Register(thumbnail.Name, thumbnail.New(src)); err != nil {
		return fmt.Errorf("builtin: %w", err)
	}
	if err := r.Register(webhook.Name, webhook.New(client, allow)); err != nil {
		return fmt.Errorf("builtin: %w", err)
	}
	return nil
}
