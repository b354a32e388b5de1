package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/bulkrun/bulkrun/shared/secretref"
)

// DiffPlan compares the plan of a repeated submit (given: the row it asks
// for) with b's, the stored batch's: the whole api.Plan, then the
// HiddenPlan, each field in its order. It returns the first field that
// differs as a 409 names it (api.MismatchError.Field; "" when the plans
// are the same) and its stored and given values as the 409 shows them:
// headers and options redacted (RedactHeaders, RedactOptions), a task
// token only as whether there is one, the checks by digest. Values that
// mean the same are the same: options spaced differently, no headers and
// empty headers, stop_on_threshold unset and true, items_per_message 0
// and 1; a retry policy or an interrupt policy missing from the stored
// row (written before the option) matches any.
func (b Batch) DiffPlan(given Batch) (field, was, now string) {
	s, g := b.Plan, given.Plan
	compact := func(raw json.RawMessage) string {
		var b bytes.Buffer
		if len(raw) == 0 || json.Compact(&b, raw) != nil {
			return string(raw)
		}
		return b.String()
	}
	asJSON := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	switch {
	case s.Digest != g.Digest:
		return "manifest_digest", s.Digest, g.Digest
	case s.Pipeline != g.Pipeline:
		return "pipeline", s.Pipeline, g.Pipeline
	case compact(s.Options) != compact(g.Options):
		return "pipeline_options", compact(secretref.RedactOptions(s.Options)), compact(secretref.RedactOptions(g.Options))
	case asJSON(s.Headers) != asJSON(g.Headers) && len(s.Headers)+len(g.Headers) > 0:
		return "headers", asJSON(secretref.RedactHeaders(s.Headers)), asJSON(secretref.RedactHeaders(g.Headers))
	case asJSON(s.Threshold) != asJSON(g.Threshold):
		return "threshold", asJSON(s.Threshold), asJSON(g.Threshold)
	case s.EarlyStop() != g.EarlyStop():
		return "stop_on_threshold", fmt.Sprint(s.EarlyStop()), fmt.Sprint(g.EarlyStop())
	case s.MaxAttempts != g.MaxAttempts:
		return "max_attempts", fmt.Sprint(s.MaxAttempts), fmt.Sprint(g.MaxAttempts)
	case asJSON(s.Retry) != asJSON(g.Retry) && s.Retry != nil:
		return "retry", asJSON(s.Retry), asJSON(g.Retry)
	case s.MaxConcurrency != g.MaxConcurrency:
		return "max_concurrency", fmt.Sprint(s.MaxConcurrency), fmt.Sprint(g.MaxConcurrency)
	case asJSON(s.Rate) != asJSON(g.Rate):
		return "rate", asJSON(s.Rate), asJSON(g.Rate)
	case s.Weight() != g.Weight():
		return "priority", fmt.Sprint(s.Weight()), fmt.Sprint(g.Weight())
	case s.Sample != g.Sample:
		return "sample", fmt.Sprint(s.Sample), fmt.Sprint(g.Sample)
	case s.AutoApproveUSD != g.AutoApproveUSD:
		return "auto_approve_usd", fmt.Sprint(s.AutoApproveUSD), fmt.Sprint(g.AutoApproveUSD)
	case b.Pack() != given.Pack():
		return "items_per_message", fmt.Sprint(b.Pack()), fmt.Sprint(given.Pack())
	case s.OnInterrupt != g.OnInterrupt && s.OnInterrupt != "":
		return "on_interrupt", string(s.OnInterrupt), string(g.OnInterrupt)
	}
	sh, gh := b.HiddenPlan, given.HiddenPlan
	switch {
	case sh.TaskToken != gh.TaskToken:
		return "task_token", redactToken(sh.TaskToken), redactToken(gh.TaskToken)
	case sh.TaskHeartbeat != gh.TaskHeartbeat:
		return "task_heartbeat_seconds", fmt.Sprint(sh.TaskHeartbeat), fmt.Sprint(gh.TaskHeartbeat)
	case sh.CheckPlan != gh.CheckPlan:
		return "schema", checkPlanText(sh.CheckPlan), checkPlanText(gh.CheckPlan)
	}
	return "", "", ""
}

// redactToken is how a 409 shows a task token: whether there is one,
// never the token (whoever holds it can answer the task).
func redactToken(t string) string {
	if t == "" {
		return "(none)"
	}
	return "(a task token)"
}

// checkPlanText shows a CheckPlan in a 409: "none", or sha256: and 12 hex
// digits.
func checkPlanText(plan string) string {
	if plan == "" {
		return "none"
	}
	return "sha256:" + plan[:12]
}
