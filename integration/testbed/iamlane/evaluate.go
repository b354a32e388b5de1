package iamlane

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Decision is the evaluator's answer for one authorization, as AWS's
// policy evaluation logic names it.
type Decision string

const (
	Allowed          Decision = "Allowed"
	ImplicitlyDenied Decision = "ImplicitlyDenied" // no statement allows it
	ExplicitlyDenied Decision = "ExplicitlyDenied" // a Deny statement matches
)

// Evaluator evaluates IAM requests with @cloud-copilot/iam-simulate in a
// Node.js process (tools/iam/evaluate.mjs). It is safe for concurrent use;
// requests are answered in order, one at a time.
type Evaluator struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	mu    sync.Mutex // one request on the pipe at a time
	out   *bufio.Reader
	sets  map[string]bool
	cache sync.Map // cache key → Decision
}

// StartEvaluator starts `node evaluate.mjs` in dir (tools/iam, with its
// node_modules installed: `npm ci`). A relative dir is taken from the
// working directory.
func StartEvaluator(dir string) (*Evaluator, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("iamlane: the evaluator's folder: %w", err)
	}
	script := filepath.Join(dir, "evaluate.mjs")
	cmd := exec.Command("node", script)
	cmd.Dir = dir
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &limited{w: &stderr, n: 4096}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("iamlane: start the evaluator (node %s): %w", script, err)
	}
	return &Evaluator{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<16), sets: map[string]bool{}}, nil
}

// Close stops the Node.js process.
func (e *Evaluator) Close() error {
	_ = e.in.Close()
	return e.cmd.Wait()
}

// roundTrip sends one message and reads its answer.
func (e *Evaluator) roundTrip(msg any, answer any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.in.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("iamlane: evaluator: %w", err)
	}
	line, err := e.out.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("iamlane: evaluator: %w", err)
	}
	return json.Unmarshal(line, answer)
}

// policySet is the policies one principal is evaluated against: its
// identity policies and the resource policies its requests may meet.
type policySet struct {
	key      string // unique per content
	identity []NamedPolicy
	resource map[string]Document
}

func (e *Evaluator) define(s *policySet) error {
	e.mu.Lock()
	known := e.sets[s.key]
	e.mu.Unlock()
	if known {
		return nil
	}
	var ack struct{ Set, Error string }
	if err := e.roundTrip(map[string]any{"op": "policies", "set": s.key, "identity": s.identity, "resource": s.resource}, &ack); err != nil {
		return err
	}
	if ack.Set != s.key {
		return fmt.Errorf("iamlane: evaluator refused policy set %s: %s", s.key, ack.Error)
	}
	e.mu.Lock()
	e.sets[s.key] = true
	e.mu.Unlock()
	return nil
}

// singleValued are the condition keys a request holds one value of
// (String, not ArrayOfString, in the Service Authorization Reference):
// the evaluator compares them with StringEquals only as a single value.
var singleValued = map[string]bool{"kms:ViaService": true, "iam:PassedToService": true}

// Evaluate decides whether principal may do n under set, with the
// resource policy named by rpKey ("" for none) and the request context.
func (e *Evaluator) Evaluate(set *policySet, principal, account string, n Need, rpKey string, context map[string]string) (Decision, error) {
	key := cacheKey(set, n, rpKey)
	vars := make(map[string]any, len(context)+len(n.Context))
	for k, v := range context {
		vars[k] = v
	}
	for k, v := range n.Context {
		if singleValued[k] && len(v) == 1 {
			vars[k] = v[0]
			continue
		}
		vars[k] = v
	}
	if d, ok := e.cache.Load(key); ok {
		return d.(Decision), nil
	}
	if err := e.define(set); err != nil {
		return "", err
	}
	var ans struct {
		ID     int64
		Result Decision
		Error  string
	}
	msg := map[string]any{"op": "eval", "id": 1, "set": set.key, "principal": principal, "action": n.Action,
		"resource": n.Resource, "account": account, "resourcePolicy": rpKey, "context": vars}
	if err := e.roundTrip(msg, &ans); err != nil {
		return "", err
	}
	if ans.Error != "" {
		return "", fmt.Errorf("iamlane: iam-simulate refused %s on %s: %s", n.Action, n.Resource, ans.Error)
	}
	if ans.Result == "" {
		return "", errors.New("iamlane: evaluator answered no result")
	}
	e.cache.Store(key, ans.Result)
	return ans.Result, nil
}

// cacheKey names a decision (the request context of the set is fixed; a
// need's own condition keys are part of the key). S3 object ARNs (one per item, unbounded) are
// keyed by which of the set's resource patterns they match — two objects
// matching the same patterns get the same decision, the principal, action
// and context being the same — every other resource by itself.
func cacheKey(set *policySet, n Need, rpKey string) string {
	res := n.Resource
	if strings.HasPrefix(res, "arn:aws:s3:::") && strings.Contains(res, "/") {
		var sig strings.Builder
		bucket := res[:strings.IndexByte(res, '/')]
		sig.WriteString(bucket + "#")
		for _, p := range set.patterns(rpKey) {
			if globMatch(p, res) {
				sig.WriteByte('1')
			} else {
				sig.WriteByte('0')
			}
		}
		res = sig.String()
	}
	key := set.key + "\x00" + rpKey + "\x00" + n.Action + "\x00" + res
	names := make([]string, 0, len(n.Context))
	for k := range n.Context {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		key += "\x00" + k + "=" + strings.Join(n.Context[k], "\x01")
	}
	return key
}

// patterns lists every Resource and NotResource pattern of the set's
// identity policies and of one resource policy, in a fixed order.
func (s *policySet) patterns(rpKey string) []string {
	var out []string
	add := func(doc Document) {
		sts, ok := doc["Statement"].([]any)
		if !ok {
			if one, ok := doc["Statement"].(map[string]any); ok {
				sts = []any{one}
			}
		}
		for _, st := range sts {
			m, _ := st.(map[string]any)
			for _, k := range []string{"Resource", "NotResource"} {
				switch v := m[k].(type) {
				case string:
					out = append(out, v)
				case []any:
					for _, e := range v {
						out = append(out, fmt.Sprint(e))
					}
				}
			}
		}
	}
	for _, p := range s.identity {
		add(p.Policy)
	}
	if rp, ok := s.resource[rpKey]; ok {
		add(rp)
	}
	return out
}

// globMatch reports whether s matches the IAM pattern p: * any run of
// characters, ? one character.
func globMatch(p, s string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for i := len(s); i >= 0; i-- {
				if globMatch(p[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
		default:
			if len(s) == 0 || s[0] != p[0] {
				return false
			}
		}
		p, s = p[1:], s[1:]
	}
	return len(s) == 0
}

// limited writes at most n bytes to w.
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(b []byte) (int, error) {
	if l.n > 0 {
		k := min(l.n, len(b))
		l.n -= k
		_, _ = l.w.Write(b[:k])
	}
	return len(b), nil
}
