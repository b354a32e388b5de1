package secretref

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
)

// ResolveError is Resolve's error when resolve failed for a reference:
// ARN names the reference (never a value), Err is resolve's error.
type ResolveError struct {
	ARN string
	Err error
}

func (e *ResolveError) Error() string { return fmt.Sprintf("resolve %s: %v", e.ARN, e.Err) }
func (e *ResolveError) Unwrap() error { return e.Err }

// Resolve returns headers and options with every secret reference
// (Refs) replaced by its value from resolve, each reference resolved
// once. With no reference it returns them as they are. A reference that
// resolve fails for ends it with a *ResolveError; options that hold
// references and do not encode again end it with that error. headers
// is not changed (a copy is returned).
func Resolve(ctx context.Context, resolve func(ctx context.Context, arn string) (string, error), headers map[string]string, options json.RawMessage) (map[string]string, json.RawMessage, error) {
	refs, err := Refs(headers, options)
	if err != nil || len(refs) == 0 {
		return headers, options, nil
	}
	values := map[string]string{}
	for _, arn := range refs {
		if _, ok := values[arn]; ok {
			continue
		}
		v, err := resolve(ctx, arn)
		if err != nil {
			return nil, nil, &ResolveError{ARN: arn, Err: err}
		}
		values[arn] = v
	}
	h := maps.Clone(headers)
	for k, v := range h {
		if arn, ok := Parse(v); ok {
			h[k] = values[arn]
		}
	}
	var v any
	if json.Unmarshal(options, &v) != nil {
		return h, options, nil
	}
	var subst func(v any) any
	subst = func(v any) any {
		switch t := v.(type) {
		case map[string]any:
			if ref, ok := t["secret"].(string); ok && len(t) == 1 {
				if val, ok := values[ref]; ok {
					return val
				}
			}
			for k, e := range t {
				t[k] = subst(e)
			}
		case []any:
			for i, e := range t {
				t[i] = subst(e)
			}
		case string:
			if arn, ok := Parse(t); ok {
				return values[arn]
			}
		}
		return v
	}
	out, err := json.Marshal(subst(v))
	if err != nil {
		return nil, nil, err
	}
	return h, out, nil
}
