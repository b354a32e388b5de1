// bulkrun console: the batch list and the batch page, drawn from the local
// console server's /api/ (which calls the bulkrun API with the user's
// credentials; this page never sees them). Plain DOM, no dependencies.
"use strict";

const TOKEN = document.querySelector('meta[name="bulkrun-token"]').content;
// A census's counts, in the bar's order: they add up to its total (the
// held outcomes — withheld, exhausted, suspended — are neither ended nor
// in flight).
const OUTCOMES = ["succeeded", "failed", "quarantined", "cancelled",
  "withheld", "exhausted", "suspended", "in_flight", "pending"];
const STATUSES = ["submitting", "running", "completed", "threshold_exceeded", "cancelled", "refused", "finalize_failed"];
const LIVE_MS = 2000;
// The items tabs of the batch page: those needing a look.
const ITEM_TABS = ["failed", "quarantined", "withheld", "exhausted", "suspended", "in_flight"];
const LABEL = {
  succeeded: "succeeded", failed: "failed", quarantined: "quarantined", cancelled: "cancelled",
  withheld: "withheld", exhausted: "exhausted", suspended: "suspended",
  in_flight: "in flight", pending: "pending", threshold_exceeded: "threshold exceeded", finalize_failed: "finalize failed",
  submitting: "submitting", running: "running", completed: "completed", refused: "refused",
};

let timer = null; // the live refresh of the page shown
let listCursors = []; // cursors of the list pages before the one shown
let pendingNotice = null; // [text, kind] to show on the next page drawn
let listSeq = 0; // the latest list drawing: an older one's answer is dropped

// el builds an element: el("a", {href: "#"}, "text", child…). Text is
// always set as text, never parsed as HTML.
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids.flat()) {
    if (k === undefined || k === null || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

async function get(path) {
  const r = await fetch(path, {headers: {Accept: "application/json"}});
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.message || ("HTTP " + r.status));
  return body;
}

async function act(path, body) {
  const r = await fetch(path, {
    method: "POST",
    headers: {"Content-Type": "application/json", "X-Bulkrun-Token": TOKEN},
    body: JSON.stringify(body || {}),
  });
  const out = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error((out.code ? out.code + ": " : "") + (out.message || ("HTTP " + r.status)));
  return out;
}

function notice(text, kind) {
  const n = document.getElementById("notice");
  n.replaceChildren(text ? el("p", {class: "notice " + (kind || "info")}, text) : "");
}

function fmtTime(s) {
  if (!s || s.startsWith("0001-")) return "—";
  const d = new Date(s);
  if (isNaN(d)) return s;
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z").replace("Z", " UTC");
}

function fmtInt(n) { return Number(n || 0).toLocaleString("en-US"); }

// fmtTimes writes the RFC 3339 times of an API text (a reason for
// attention: "next at 2026-12-02T07:21:00Z") as the page writes times.
function fmtTimes(s) { return String(s).replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z/g, (t) => fmtTime(t)); }

function pct(n, total) {
  if (!total) return "0\u00a0%";
  const p = (100 * n) / total;
  return (p === 100 || p === 0 ? p.toFixed(0) : p < 0.1 ? "<0.1" : p.toFixed(1)) + "\u00a0%";
}

// done returns the items done (ended: neither held, in flight nor
// pending) and the total of a batch (or null).
function doneOf(b) {
  const c = b.census;
  if (c) return {done: c.total - c.pending - c.in_flight - (c.withheld || 0) - (c.exhausted || 0) - (c.suspended || 0), total: c.total};
  if (b.progress) return {done: b.progress.done, total: b.item_count};
  return null;
}

// stopText is a stop as the CLI prints it: why, and that items already in
// flight when it was marked finish after it (how many, once finished:
// what ended then is stop_ran, the census has the rest).
function stopText(b) {
  let t = (LABEL[b.stop] || b.stop) + (b.stop_detail ? ": " + b.stop_detail : "");
  const c = b.census;
  if (running(b) || !c) return t + "; items already in flight finish after the stop";
  const failures = (c.failed || 0) + (c.quarantined || 0);
  const after = Math.max(0, (c.succeeded || 0) + failures - (b.stop_ran || 0));
  const failedAfter = Math.max(0, failures - (b.stop_failures || 0));
  if (after === 0) return t + "; no item in flight at the stop finished after it";
  if (after === 1) return t + "; 1 item already in flight finished after the stop and " + (failedAfter ? "failed" : "did not fail");
  return t + "; " + fmtInt(after) + " items already in flight finished after the stop, " + fmtInt(failedAfter) + " of them failed";
}

// count is n and a noun in words, singular for 1: "1 item", "3 items".
function count(n, noun) {
  return fmtInt(n) + " " + (n === 1 ? noun : noun + "s");
}

// stateOf is what a batch's badge says first, and its colour: the API's
// status, except for a running batch that is paused (by a caller, by an
// outage, by a budget: a status and a colour of its own) or stopping, and
// a completed batch by how its items ended — a run whose every item
// failed never reads as a success. Census c is the batch's (or a run's).
function stateOf(status, opts) {
  const {stop, pause, census: c} = opts || {};
  if (status === "running" && stop) return {key: "stopping", text: "stopping: " + (LABEL[stop] || stop), cls: "s-stopping"};
  if (status === "running" && pause) return {key: "paused", text: "paused", cls: "s-paused"};
  if (status === "completed" && c && c.total > 0) {
    const failures = (c.failed || 0) + (c.quarantined || 0);
    if (!c.succeeded) return {key: "none-succeeded", text: c.failed === c.total ? "completed: every item failed" : "completed: no item succeeded", cls: "s-none-succeeded"};
    if (failures > 0) return {key: "completed-failures", text: "completed with failures", cls: "s-completed-failures"};
  }
  return {key: status, text: LABEL[status] || status, cls: "s-" + status};
}

function statusBadge(status, opts) {
  const st = stateOf(status, opts);
  return el("span", {class: "badge " + st.cls, dataset: {status, state: st.key}}, st.text);
}

const PAUSED_BY = {caller: "a caller", outage: "an outage", budget: "its budget"};

// pauseWho is who paused a run, and why: "by an outage (http 502)",
// "by a caller".
function pauseWho(p) {
  return "by " + (PAUSED_BY[p.by] || p.by) + (p.class ? " (" + p.class + ")" : "");
}

// pauseText is a paused run as the CLI prints it: who paused it, since
// when, why (an outage: the failure class and one error; a budget: the
// budget and the spend that reached it), the probes and the next check.
function pauseText(p) {
  const next = p.next_check_at ? "; next check " + fmtTime(p.next_check_at) : "";
  if (p.by === "budget") return "at its budget — " + p.error + ", since " + fmtTime(p.since) +
    "; no item starts until the budget is raised above the spend (bulkrun budget ID --usd N)";
  if (p.by !== "outage") return pauseWho(p) + " since " + fmtTime(p.since) + next + "; no item starts until unpause";
  return "by an outage since " + fmtTime(p.since) + " (" + p.class + ": " + p.error + "); " + count(p.probes, "probe") + next +
    "; no item starts until a probe is answered or unpause";
}

// stopped reports whether the batch's run was stopped before every item
// ran (cancelled, or past its threshold): its items "ended", not "done".
function stopped(b) { return b.status === "cancelled" || b.status === "threshold_exceeded" || !!b.stop; }

// progressText is "N of M done (P %)", "ended" for a stopped run.
function progressText(b, d) {
  return fmtInt(d.done) + " of " + fmtInt(d.total) + (stopped(b) ? " ended" : " done") + " (" + pct(d.done, d.total) + ")";
}

// outcomeBar is a batch's progress as a bar of its outcomes (the census
// bar's colours and patterns): succeeded, failed, quarantined, cancelled,
// withheld, exhausted, suspended, in flight, then what is still pending;
// with the written progress under
// it. A running batch's counters count in-flight items as pending.
function outcomeBar(b, id) {
  const d = doneOf(b);
  if (!d) {
    return el("span", {class: "muted"}, b.status === "submitting" ? "reading the source" :
      b.status === "refused" ? "nothing ran" : b.status_error ? "status unavailable" : "—");
  }
  const c = b.census || {total: d.total, pending: d.total - d.done, succeeded: 0, failed: 0, quarantined: 0, cancelled: 0,
    withheld: 0, exhausted: 0, suspended: 0, in_flight: 0};
  const bar = el("div", {class: "mini-bar", id, role: "img", dataset: {done: d.done, total: d.total},
    "aria-label": progressText(b, d) + ": " + OUTCOMES.map((o) => fmtInt(c[o]) + " " + LABEL[o]).join(", ")});
  for (const o of OUTCOMES) {
    if (!c[o]) continue;
    const seg = el("span", {class: "seg o-" + o, dataset: {outcome: o, n: c[o]}, title: fmtInt(c[o]) + " " + LABEL[o]});
    seg.style.width = (100 * c[o] / (c.total || 1)) + "%";
    bar.append(seg);
  }
  const ok = b.census && !running(b) ? el("span", {class: "muted nowrap"}, " · " + pct(c.succeeded, c.total) + "\u00a0succeeded") : "";
  return el("div", {class: "outcome-progress"}, bar,
    el("span", {class: "ptext"}, el("span", {id: id ? id + "-text" : null}, progressText(b, d)), ok));
}

// waitingText is a running batch's items waiting for a retry in words:
// how many, when the next is due, the commonest cause and one of its
// errors, and those that only wait out the receiver's throttling.
function waitingText(l) {
  let t = fmtInt(l.retry_waiting) + (l.next_retry_at ? ", next at " + fmtTime(l.next_retry_at) : "");
  const why = [];
  if (l.retry_cause) why.push(fmtInt(l.retry_cause.items) + " after " + l.retry_cause.class + (l.retry_cause.error ? " (" + l.retry_cause.error + ")" : ""));
  if (l.throttled) why.push(fmtInt(l.throttled) + " waiting out the receiver's throttling (no attempt used)");
  return t + (why.length ? "; " + why.join("; ") : "");
}

// adaptiveText is the adaptive pace a throttling downstream holds the
// batch to (api.AdaptivePace) in words: its key and limit, how the limit
// climbs back, a Retry-After's hold, and the calls booked ahead.
function adaptiveText(p) {
  const r = (x) => (x >= 100 ? x.toFixed(0) : x.toFixed(1));
  const resumed = p.cause === "resumed";
  let t = p.key + (resumed ? " restarted as a batch calling it resumed from a pause" : " throttled") +
    "; every batch with no rate calling it is held to " + r(p.limit_per_second) + " requests/s (" + (resumed ? "since " : "cut ") +
    fmtTime(p.cut_at) + "; " + (p.slow_start ? "doubling every 2 s" + (p.slow_start_to ? " up to " + r(p.slow_start_to) + " requests/s" : "") : "+" + r(p.step_per_second || 0) + " requests/s each second") +
    " while no call is throttled)";
  if (p.hold_until) t += "; no call before " + fmtTime(p.hold_until) + " (its Retry-After)";
  if (p.booked_ahead > 0 && p.clear_at) t += "; " + fmtInt(p.booked_ahead) + " calls booked ahead, the last due by " + fmtTime(p.clear_at) + " at this limit";
  return t;
}

// createdCell is a creation time as its date and, below it, its time
// (UTC), so that the column stays narrow.
function createdCell(s) {
  const t = fmtTime(s).replace(" UTC", "");
  const [day, time] = t.split(" ");
  return time ? el("span", {}, el("span", {class: "day"}, day), " ", el("span", {class: "time"}, time)) : t;
}

// sourceCell shows where a batch's items came from: its kind and label,
// the full source as the tooltip.
function sourceCell(b) {
  if (!b.source_label) return el("span", {class: "muted"}, b.status_error ? "—" : "not known");
  const kind = {upload: "upload", cli: "CLI file", s3: "S3", inline: "API", schedule: "schedule"}[b.source_kind] || b.source_kind;
  return el("span", {class: "source", title: b.source || ""},
    el("span", {class: "kind k-" + b.source_kind}, kind), " ", el("span", {class: "label"}, b.source_label));
}

function countsText(b) {
  if (b.census) {
    const parts = OUTCOMES.filter((o) => b.census[o] > 0).map((o) => fmtInt(b.census[o]) + " " + LABEL[o]);
    return parts.length ? parts.join(", ") : "no items";
  }
  if (b.progress) return fmtInt(b.progress.done) + " done, " + fmtInt(b.progress.failures) + " failures (counters)";
  if (b.refusal) return "none: refused";
  return "—";
}

// refusalReason is a refusal's message without what the list already
// shows (the source, the line), at most 120 characters.
function refusalReason(r) {
  let m = r.message || "";
  const at = r.line ? m.lastIndexOf("line " + r.line + ": ") : -1;
  if (at >= 0) m = m.slice(at + ("line " + r.line + ": ").length);
  else if (r.field && m.startsWith(r.field + ": ")) m = m.slice(r.field.length + 2);
  return m.length > 120 ? m.slice(0, 119) + "…" : m;
}

// refusalWhere says where a refused source went wrong: " at line N",
// " (field F)", " (key K)", or "".
function refusalWhere(r) {
  if (r.line) return " at line " + r.line;
  if (r.key) return " (key " + r.key + ")";
  if (r.field) return " (" + r.field + ")";
  return "";
}

// retryText is a batch's retry policy in words: the first wait, its
// growth and cap, the jitter ("" for a batch stored without one: the
// stack's default applies).
function retryText(r) {
  if (!r) return "";
  const secs = s => s >= 60 && s % 60 === 0 ? (s / 60) + " min" : s + " s";
  return "wait " + secs(r.interval_seconds) + ", ×" + r.backoff_rate + " after each retry, at most " + secs(r.max_delay_seconds) +
    (r.jitter ? ", + up to " + Math.round(r.jitter * 100) + " % jitter" : "");
}

// liveFacts is a running batch's live view: the items not ended by where
// they are, and why the run needs attention now; rate is the batch's
// own (api.Rate), which a rate conflict's line sets beside the other's.
function liveFacts(l, paused, rate) {
  const dl = el("dl", {class: "facts", id: "live"});
  const fact = (k, v) => dl.append(el("dt", {}, k), el("dd", {}, v));
  // The bar's "in flight" is both rows together: say so, so that 0 here
  // beside 12 in the bar reads as the 12 waiting below.
  fact("In flight: queued, running or due", fmtInt(l.in_flight));
  fact("In flight: waiting for a retry", waitingText(l));
  if (l.exhausted) fact("Exhausted at a per-item ceiling", fmtInt(l.exhausted) + " (Raise ceilings… resumes exactly those under the new ceilings)");
  fact("Interrupted attempts", fmtInt(l.interrupted));
  if (l.timed_out) fact("Timed-out attempts", fmtInt(l.timed_out) + " (the receiver may have finished them)");
  if (l.held_for_approval) fact("Held for approval", fmtInt(l.held_for_approval) + " (sent past the sample; they start once approved)");
  if (l.awaiting_track) fact("Waiting for a track", fmtInt(l.awaiting_track) + " (max_concurrency: unstarted until a track takes them)");
  fact("Not fanned out", fmtInt(l.not_fanned_out));
  fact("Last progress", fmtTime(l.last_progress_at));
  const e = l.estimate;
  if (e) {
    // The API's estimate (api.Estimate): the pace over the run's last
    // 60 s (rate_basis recent_60s) or, without a sample of that window,
    // over the run so far (run_average).
    const per = (r) => (r >= 100 ? r.toFixed(0) : r.toFixed(1)) + " items/s";
    if (e.rate_basis === "recent_60s") {
      fact("Pace (last 60 s)", per(e.rate_per_second) + " (run average " + per(e.run_rate_per_second) + ")");
    } else {
      fact("Pace (over the run so far)", per(e.rate_per_second));
    }
    // Held items wait for a signal, a lift or a raise, not for the pace:
    // the finish is that of the others.
    const held = e.held ? ", " + fmtInt(e.held) + " held, not in it" : "";
    fact("Estimated finish", fmtTime(e.finish_at) + " (" + fmtInt(e.remaining) + " to go" + held +
      (e.finish_booked ? "; no earlier: the rate key is booked until then" : "") + ")");
    const proj = [["cost", e.projected_cost], ["run_spent", e.projected_run_spent]]
      .filter(([, c]) => c && Object.keys(c).length)
      .map(([k, c]) => k + " " + Object.keys(c).sort().map((n) => n + "=" + fmtProjected(c[n])).join(" "));
    if (proj.length) fact("Projected at the end", proj.join("; "));
  }
  if (l.adaptive_pace) fact("Adaptive pace", adaptiveText(l.adaptive_pace));
  if (l.rate_booked) {
    const r = l.rate_booked;
    const limits = [r.requests_per_second ? r.requests_per_second + " requests/s" : "", r.tokens_per_second ? r.tokens_per_second + " tokens/s" : ""]
      .filter((s) => s).join(", ");
    fact("Rate key", r.key + " (this batch: " + limits + "): " + (r.by === "tokens" ? "its token budget" : "calls") + " booked until " + fmtTime(r.until) + ", " +
      r.ahead_seconds + " s ahead, by this batch or others naming the key; a unit that leases now starts after them (first come, first served)");
  }
  if (l.rate_conflict) {
    // Another running batch names the key at another rate: each lease is
    // spaced at its own batch's rate (docs/pipelines.md, "Rates").
    const c = l.rate_conflict;
    const of = c.batches > 1 ? " (the latest of " + c.batches + " batches noted at other rates)" : "";
    fact("Rate conflict", "rate key " + c.key + ": batch " + c.batch_id + of + " also names it, at " + limitsText(c.rate) +
      " (this batch: " + (rate ? limitsText(rate) : "none") + "; noted " + fmtTime(c.noted_at) + "); the downstream gets its calls at its own rate while both run; give every batch on the key the same rate");
  }
  const why = (l.attention || []).filter((a) => !(paused && a.startsWith("paused by"))).map((a) => el("li", {}, fmtTimes(a)));
  return el("div", {}, dl, why.length ? el("div", {class: "attn small"}, "⚠ Needs attention:", el("ul", {}, why)) : "");
}

// ---------- a sampled batch ----------

const DECIDED_BY = {caller: "a caller", auto_approve: "its auto-approval limit"};

// undecided reports whether a batch holds the items outside its sample
// (approval state sampling or awaiting_approval): a decision, Approve…
// or Reject…, is still to come.
function undecided(b) {
  const a = b.approval;
  return !!a && (a.state === "sampling" || a.state === "awaiting_approval");
}

// approvalState is a batch's approval state, "" without a sample.
function approvalState(b) { return b.approval ? b.approval.state : ""; }

// fmtUSD is US dollars as the page writes them, to at most 6 places:
// "$0.84", "$1,250".
function fmtUSD(x) { return "$" + Number(x || 0).toLocaleString("en-US", {maximumFractionDigits: 6}); }

// fmtFrac is a fraction as a percentage to one place: 0.015 is "1.5 %".
function fmtFrac(f) { return (100 * (f || 0)).toFixed(1) + "\u00a0%"; }

// fmtInterval is an estimate's 95 % interval of the failure rate in
// percent: "0.5–4.3 %".
function fmtInterval(e) { return (100 * (e.failure_low || 0)).toFixed(1) + "–" + fmtFrac(e.failure_high); }

// fmtSeconds is a duration in seconds in words, rounded up to the
// second: "45 s", "2 min 47 s", "3 h 5 min", "2 d 4 h".
function fmtSeconds(secs) {
  const s = Math.ceil(secs || 0), m = Math.floor(s / 60), h = Math.floor(m / 60);
  if (s < 60) return s + " s";
  if (m < 60) return m + " min" + (s % 60 ? " " + (s % 60) + " s" : "");
  if (h < 48) return h + " h" + (m % 60 ? " " + (m % 60) + " min" : "");
  return Math.floor(h / 24) + " d" + (h % 24 ? " " + (h % 24) + " h" : "");
}

// fmtPace is items a second in words: "16.9 items/s", "0.05 items/s".
// fmtProjected is a projected amount (a decimal string or number) to 4
// significant digits, as status writes it: "9787", not "9786.666666667".
function fmtProjected(v) {
  const x = Number(v);
  return Number.isFinite(x) ? String(Number(x.toPrecision(4))) : String(v);
}

function fmtPace(r) { return (r >= 100 ? r.toFixed(0) : r >= 1 ? r.toFixed(1) : r.toPrecision(2)) + " items/s"; }

// approvalText is a sampled batch's approval state in words: what runs,
// what waits, who decided and when. A first run that stopped or ended
// before a decision is undecided, in the words of the CLI's status.
function approvalText(b) {
  const a = b.approval, e = a.estimate;
  if (undecided(b) && !(b.status === "running" && b.run === 1 && !b.stop)) {
    return "undecided (" + a.state.replace("_", " ") + " when the run stopped or ended)";
  }
  switch (a.state) {
    case "sampling":
      return "sampling: the first " + count(a.sample, "item") + " run; the rest waits for Approve… or Reject… (the estimate comes once the sample's items have ended)";
    case "awaiting_approval":
      return "awaiting approval since " + fmtTime(e && e.made_at) + ": the sample has ended; the rest waits for Approve… or Reject…";
    case "approved":
      return "approved by " + (DECIDED_BY[a.decided_by] || a.decided_by) +
        (a.decided_by === "auto_approve" && e && b.auto_approve_usd ? " (estimate " + fmtUSD(e.cost_usd) + ", at most " + fmtUSD(b.auto_approve_usd) + ")" : "") +
        " at " + fmtTime(a.decided_at) + (running(b) ? ": the rest runs" : ": the rest ran");
    case "rejected":
      return "rejected by " + (DECIDED_BY[a.decided_by] || a.decided_by) + " at " + fmtTime(a.decided_at) + (running(b) ? ": the run is cancelled" : ": the run was cancelled");
  }
  return a.state;
}

// estimateSummary is a sample's estimate in one sentence, for the
// approve dialog: cost, failures, time.
function estimateSummary(e) {
  return fmtUSD(e.cost_usd) + " for " + count(e.items, "item") + ", failures " + fmtFrac(e.failure_rate) +
    " (95 % interval " + fmtInterval(e) + ")" +
    (e.items_per_second > 0 ? ", the rest ≈ " + fmtSeconds(e.seconds) : "");
}

// renderApproval shows a sampled batch's sample, state and estimate (the
// API's approval: cost scaled from the sample's spend, failure rate with
// its 95 % Wilson interval, the rest's time at the sample's pace); no
// section for a batch without a sample.
function renderApproval(page) {
  const b = page.data.batch, a = b.approval, sec = page.sections.approval;
  if (!a) { sec.replaceChildren(); return; }
  const dl = el("dl", {class: "facts", id: "approval", dataset: {state: a.state}});
  const fact = (k, v) => { if (v !== undefined && v !== null && v !== "") dl.append(el("dt", {}, k), el("dd", {}, v)); };
  fact("State", approvalText(b));
  fact("Sample", count(a.sample, "item") + ", the first of the source (whole messages: up to " +
    count(a.sample + Math.max(1, b.items_per_message || 1) - 1, "item") + ")");
  fact("Auto-approve", b.auto_approve_usd ? "when the estimated cost is at most " + fmtUSD(b.auto_approve_usd) : "");
  const e = a.estimate;
  if (e) {
    fact("Estimated", fmtTime(e.made_at) + ", from " + count(e.sample_items, "sample item") + " ended in " + fmtSeconds(e.sample_seconds));
    fact("Projected cost", el("span", {id: "estimate-cost"}, fmtUSD(e.cost_usd) + " for " + count(e.items, "item") +
      " (pipeline " + fmtUSD(e.pipeline_usd) + ", DynamoDB " + fmtUSD(e.infra_usd) + "; Lambda and SQS not counted); the sample spent " + fmtUSD(e.sample_usd)));
    fact("Failure rate", el("span", {id: "estimate-failures"}, fmtFrac(e.failure_rate) + " (95 % interval " + fmtInterval(e) + "): " +
      count(e.failed, "failure") + " in " + count(e.sample_items, "sample item") +
      ", ≈ " + count(e.projected_failures, "failure") + " over the run"));
    fact("Projected time", el("span", {id: "estimate-time"}, e.items_per_second > 0 ?
      "≈ " + fmtSeconds(e.seconds) + " for the rest (" + count(Math.max(0, e.items - e.sample_items), "item") + ") at " + fmtPace(e.items_per_second) :
      "not known: the sample took no measurable time"));
    fact("Pace", el("span", {id: "estimate-pace"}, e.pace));
    const pc = e.projected_cost || {};
    const names = Object.keys(pc).sort();
    fact("Pipeline costs", names.length ? names.map((k) => k + " " + fmtProjected(pc[k])).join("; ") + ", projected for the run" : "");
  } else {
    fact("Estimate", a.state === "sampling" ? "written once the sample's items have ended" : "none: decided before the sample had ended");
  }
  section(sec, "approval", "Sample and approval", dl,
    el("p", {class: "muted small"}, "The sample is the source's first items: a fair one only if the source is not sorted by something that matters. " +
      "The time leaves out how fast Lambda scales up for the rest, and a receiver slowing under the larger load."));
}

// causeLine is a paused batch's cause, under its badge: who paused it,
// why and since when.
function causeLine(b) {
  if (b.status !== "running" || !b.pause || b.stop) return "";
  return el("div", {class: "cause small"}, pauseWho(b.pause) + " since " + fmtTime(b.pause.since));
}

// attention is what needs a look in a batch of the list, in red: the
// live view's reasons (the pause is the badge's already), a refusal, a
// deletion pending.
function attention(b) {
  const notes = [];
  const why = ((b.live && b.live.attention) || []).filter((a) => !(b.pause && a.startsWith("paused by")));
  if (b.needs_attention && (why.length || !b.pause)) notes.push("Needs attention" + (why.length ? ": " + why.map(fmtTimes).join("; ") : ""));
  if (b.refusal) notes.push("Refused: " + b.refusal.code + refusalWhere(b.refusal) + (b.refusal.message ? ": " + refusalReason(b.refusal) : ""));
  if (b.pending_deletion) notes.push("Deletion pending");
  if (b.status === "finalize_failed") notes.push("Finalize failed: resume once fixed");
  if (b.status_error) notes.push("Status unavailable");
  if (!notes.length) return "";
  return el("div", {class: "attn small"}, el("span", {"aria-hidden": "true"}, "⚠ "), notes.join("; "));
}

function batchHref(id) { return "#/batch/" + encodeURIComponent(id); }

// ---------- routing ----------

function route() {
  clearTimeout(timer);
  timer = null;
  notice(...(pendingNotice || [""]));
  pendingNotice = null;
  const h = location.hash || "#/";
  const m = h.match(/^#\/batch\/([^?]+)/);
  if (m) {
    // A hand-made address may hold a stray "%": show the batch id as
    // typed (the console answers that it is not one) rather than stop.
    let id = m[1];
    try { id = decodeURIComponent(id); } catch (e) { /* kept as typed */ }
    return showBatch(id);
  }
  const q = new URLSearchParams(h.split("?")[1] || "");
  return showList(q.get("status") || "", q.get("cursor") || "");
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", () => {
  document.getElementById("confirm").addEventListener("close", () => {});
  route();
});

// ---------- the list ----------

async function showList(status, cursor) {
  const main = document.getElementById("main");
  const sel = el("select", {id: "status-filter", name: "status"},
    el("option", {value: ""}, "every status"),
    STATUSES.map((s) => el("option", {value: s, selected: s === status}, LABEL[s])));
  sel.addEventListener("change", () => {
    listCursors = [];
    location.hash = "#/" + (sel.value ? "?status=" + sel.value : "");
  });
  const refresh = el("button", {class: "secondary", onclick: () => route()}, "Refresh");
  const cols = ["Batch", "Source", "Status", "Pipeline", "Created (UTC)", "Progress", "Items by outcome"];
  const table = el("table", {id: "batches"},
    el("caption", {class: "sr-only"}, "Batches, newest first"),
    el("colgroup", {}, cols.map((t) => el("col", {class: "c-" + t.split(" ")[0].toLowerCase()}))),
    el("thead", {}, el("tr", {}, cols.map((t) => el("th", {scope: "col"}, t)))),
    el("tbody", {}, el("tr", {}, el("td", {colspan: 7, class: "muted"}, "Loading…"))));
  const pager = el("nav", {class: "pager", "aria-label": "Pages"});
  const draw = () => main.replaceChildren(
    el("div", {class: "titlebar"}, el("h1", {}, "Batches"), el("span", {class: "muted"}, "newest first")),
    el("form", {class: "filters", onsubmit: (e) => e.preventDefault()},
      el("label", {for: "status-filter"}, "Status "), sel, refresh,
      el("span", {class: "muted", id: "list-live"})),
    el("div", {class: "scroll"}, table), pager);
  // A refresh of the page shown keeps it until the new one has come (no
  // "Loading…" flash); another page or filter shows "Loading…" at once.
  const query = status + "|" + cursor;
  const refreshing = !!document.getElementById("batches") && main.dataset.list === query;
  main.dataset.list = query;
  const seq = ++listSeq;
  if (!refreshing) draw();
  let page;
  try {
    page = await get("/api/batches?limit=20" + (status ? "&status=" + encodeURIComponent(status) : "") +
      (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""));
  } catch (e) {
    if (seq !== listSeq) return; // another page was asked for meanwhile
    if (refreshing) draw();
    table.tBodies[0].replaceChildren(el("tr", {}, el("td", {colspan: 7, class: "error"}, "Could not list the batches: " + e.message)));
    return;
  }
  if (seq !== listSeq || (refreshing && !document.getElementById("batches"))) return; // another page, or the batch page, was asked for meanwhile
  if (refreshing) draw();
  const rows = page.batches.map((b) => el("tr", {dataset: {id: b.batch_id, status: b.status}},
    el("td", {"data-label": "Batch"}, el("a", {href: batchHref(b.batch_id), class: "mono"}, b.batch_id)),
    el("td", {"data-label": "Source", class: "src"}, sourceCell(b)),
    el("td", {"data-label": "Status"}, el("div", {}, el("div", {}, statusBadge(b.status, {stop: b.stop, pause: b.pause, census: b.census}),
      b.run > 1 ? el("span", {class: "muted small"}, " run " + b.run) : ""), causeLine(b), attention(b))),
    el("td", {"data-label": "Pipeline"}, b.pipeline),
    el("td", {"data-label": "Created (UTC)", class: "created"}, createdCell(b.created_at)),
    el("td", {"data-label": "Progress"}, outcomeBar(b)),
    el("td", {"data-label": "Items by outcome", class: "counts"}, countsText(b))));
  table.tBodies[0].replaceChildren(...(rows.length ? rows :
    [el("tr", {}, el("td", {colspan: 7, class: "muted"}, status ? "No " + LABEL[status] + " batches on this page." : "No batches yet. Submit one: bulkrun submit FILE --pipeline NAME"))]));
  const back = listCursors.length > 0;
  pager.replaceChildren(
    el("button", {class: "secondary", disabled: !back && !cursor, onclick: () => {
      const prev = listCursors.pop() || "";
      location.hash = "#/?" + new URLSearchParams({status, cursor: prev}).toString();
    }}, "← Newer"),
    el("span", {class: "muted"}, page.batches.length + " batches on this page"),
    el("button", {class: "secondary", id: "next-page", disabled: !page.next_cursor, onclick: () => {
      listCursors.push(cursor);
      location.hash = "#/?" + new URLSearchParams({status, cursor: page.next_cursor}).toString();
    }}, "Older →"));
  if (page.batches.some((b) => b.status === "running" || b.status === "submitting")) {
    document.getElementById("list-live").textContent = "live: refreshes every 5 s while batches run";
    // Redrawn only while nothing on the page has the keyboard focus, so
    // that a keyboard user's place is never taken away.
    const again = () => {
      const f = document.activeElement;
      if (document.querySelector("dialog[open]") || (f && f !== document.body && main.contains(f) && f !== main)) {
        timer = setTimeout(again, 5000);
        return;
      }
      route();
    };
    timer = setTimeout(again, 5000);
  }
}

// ---------- the batch page ----------

async function showBatch(id) {
  listSeq++; // a list still loading is not drawn over this page
  const main = document.getElementById("main");
  main.replaceChildren(el("p", {class: "muted"}, "Loading " + id + "…"));
  let data;
  try {
    data = await get("/api/batches/" + encodeURIComponent(id));
  } catch (e) {
    main.replaceChildren(el("p", {}, el("a", {href: "#/"}, "← Batches")),
      el("h1", {class: "mono"}, id), el("p", {class: "error"}, "Could not read the batch: " + e.message));
    return;
  }
  const page = {id, data, sections: {}};
  const s = page.sections;
  for (const k of ["summary", "approval", "progress", "cost", "verdict", "runs", "locations", "items", "thumbs"]) {
    s[k] = el("section", {id: "sec-" + k, "aria-labelledby": "h-" + k});
  }
  s.actions = el("div", {class: "actions", role: "group", "aria-label": "Actions"});
  s.todo = el("div", {id: "what-to-do"});
  // The state first: the status and its cause, what to do, then the
  // progress (left, and first on a phone), the summary beside it.
  main.replaceChildren(
    el("p", {class: "crumbs"}, el("a", {href: "#/"}, "← Batches")),
    el("div", {class: "titlebar"}, el("h1", {class: "mono", id: "batch-title"}, id), el("span", {id: "batch-status"})),
    el("p", {id: "state-cause", class: "cause"}),
    s.actions, s.todo, s.approval,
    el("div", {class: "grid2"}, s.progress, s.summary),
    el("div", {class: "grid2"}, s.verdict, s.cost),
    s.items, s.runs, s.locations, s.thumbs);
  renderLive(page);
  renderActions(page);
  renderVerdict(page);
  renderLocations(page);
  loadRuns(page);
  loadItems(page, "failed");
  loadThumbs(page, "");
  if (running(data.batch)) live(page);
}

function running(b) { return b.status === "running" || b.status === "submitting"; }

// live polls the batch while its run goes; when it finishes, the whole
// page is read again (report, runs, items, thumbnails).
function live(page) {
  timer = setTimeout(async () => {
    if (!document.body.contains(page.sections.summary)) return;
    try {
      const data = await get("/api/batches/" + encodeURIComponent(page.id));
      const was = page.data.batch;
      page.data = data;
      if (!running(data.batch) || data.batch.run !== was.run) return showBatch(page.id);
      renderLive(page);
      if (data.batch.stop !== was.stop || !data.batch.pause !== !was.pause || approvalState(data.batch) !== approvalState(was)) renderActions(page);
      const c = data.batch.census, pc = was.census;
      const focusInItems = page.sections.items.contains(document.activeElement);
      if (c && pc && !page.itemsPaged && !focusInItems && c[page.tab] !== pc[page.tab]) loadItems(page, page.tab);
    } catch (e) {
      notice("Live update failed: " + e.message + " (retrying)", "error");
    }
    live(page);
  }, LIVE_MS);
}

function section(sec, id, title, ...body) {
  sec.replaceChildren(el("h2", {id: "h-" + id}, title), ...body);
}

function renderLive(page) {
  const b = page.data.batch;
  document.getElementById("batch-status").replaceChildren(statusBadge(b.status, {stop: b.stop, pause: b.pause, census: b.census}),
    b.needs_attention && !running(b) ? el("span", {class: "attn"}, " ⚠ Needs attention") : "");
  document.getElementById("state-cause").replaceChildren(stateCause(b));
  renderApproval(page);
  const s = page.sections;
  const dl = el("dl", {class: "facts"});
  const fact = (k, v) => { if (v !== undefined && v !== null && v !== "") dl.append(el("dt", {}, k), el("dd", {}, v)); };
  fact("Pipeline", b.pipeline);
  fact("Items", b.status === "submitting" ? "not known yet (reading the source, attempt " + (b.submit_attempts || 1) + ")" : fmtInt(b.item_count));
  fact("Run", String(b.run || "—") + (b.run_revision ? " (a correction: revision " + b.run_revision + ")" : ""));
  fact("Corrections", revisionsText(b));
  fact("Source", el("span", {}, sourceCell({source: b.source, source_kind: page.data.source_kind, source_label: page.data.source_label}),
    el("br"), el("code", {class: "uri small"}, b.source)));
  fact("Created", fmtTime(b.created_at));
  fact("Run started", fmtTime(b.run_started_at));
  fact("Finished", running(b) ? "—" : fmtTime(b.finished_at));
  fact("Submitted by", b.submitted_by);
  fact("Max attempts", b.max_attempts ? String(b.max_attempts) : "");
  fact("Retry policy", retryText(b.retry));
  fact("Max concurrency", b.max_concurrency ? String(b.max_concurrency) : "");
  fact("Rate", b.rate ? rateText(b.rate) : "");
  fact("Priority", b.priority > 1 ? String(b.priority) : "");
  fact("On interrupt", b.on_interrupt);
  if (b.stop) fact(running(b) ? "Stopping" : "Stopped", stopText(b));
  if (b.pause && running(b)) fact("Paused", pauseText(b.pause));
  if (b.refusal) fact("Refused", b.refusal.code + ": " + b.refusal.message);
  if (b.failure) fact("Finalize failed", b.failure + " (the items ended; resume once the cause is fixed)");
  if (b.pending_deletion) fact("Deletion", "pending: forget it again to finish");
  fact("Expires", fmtTime(b.expires_at));
  section(s.summary, "summary", "Summary", dl);

  // One bar of outcomes with its written counts: the progress and the
  // census say the same, once.
  const d = doneOf(b);
  const c = b.census;
  const legend = c ? el("ul", {class: "legend", id: "census"}, OUTCOMES.map((o) =>
    el("li", {dataset: {outcome: o}, class: c[o] ? "" : "zero"},
      el("span", {class: "sw o-" + o, "aria-hidden": "true"}),
      el("span", {class: "lbl"}, LABEL[o]), " ",
      el("strong", {class: "n"}, fmtInt(c[o])), " ",
      el("span", {class: "muted"}, "(" + pct(c[o], c.total) + ")")))) : "";
  section(s.progress, "progress", running(b) ? "Progress (live)" : "Progress",
    outcomeBar(b, "progress"), legend,
    c ? el("p", {class: "muted small"}, count(c.total, "item") + "; counted from the " +
      ({items: "item rows", report: "finished run's report", counters: "run's counters"}[b.census_source] || b.census_source) +
      (running(b) ? ", updated every " + LIVE_MS / 1000 + " s while the run goes" : "") + ".") :
      el("p", {class: "muted small"}, b.progress ? "A large running batch shows its counters; the census comes with the report." :
        b.status === "refused" ? "Refused: nothing ran." : running(b) ? "Updates every " + LIVE_MS / 1000 + " s while the run goes." : "No census yet."),
    d && !running(b) && d.done === d.total ? el("p", {class: "muted small"}, "Every item of run " + b.run + " has an outcome.") : "",
    running(b) && b.live ? liveFacts(b.live, !!b.pause, b.rate) : "");
  if (c) renderCost(page, c);
  else section(s.cost, "cost", "Cost", el("p", {class: "muted"}, "Known once items have run."));
}

// stateCause says, under the title, why the batch is in its state: who
// paused it and why, what stops it, why a finished run needs a look.
function stateCause(b) {
  if (b.status === "running" && b.stop) return "Stopping: " + stopText(b) + ".";
  if (b.status === "running" && b.pause) return "Paused " + pauseText(b.pause) + ".";
  if (b.status === "running" && undecided(b)) return (b.approval.state === "sampling" ?
    "Sampling: the first " + count(b.approval.sample, "item") + " run; the rest waits for a decision." :
    "Awaiting approval: the sample has ended; the rest waits for Approve… or Reject… (its estimate is below).");
  if (b.status === "running" && b.live && b.live.retry_cause) {
    const c = b.live.retry_cause;
    return count(c.items, "item") + " waiting for a retry after " + c.class + (c.error ? ": " + c.error : "") + ".";
  }
  const c = b.census;
  if (b.status === "completed" && c && c.total > 0 && !c.succeeded) {
    return (c.failed === c.total ? "Every item failed: " : "No item succeeded: ") + count(c.failed, "failure") + " of " + count(c.total, "item") +
      (thresholdSet(b.threshold) ? "." : "; the batch has no threshold, so its status is completed.");
  }
  return "";
}

function renderCost(page, c) {
  const names = [...new Set([...Object.keys(c.cost || {}), ...Object.keys(c.run_spent || {})])].sort();
  const b = page.data.batch;
  const live = b.census_source === "counters";
  if (!names.length) {
    section(page.sections.cost, "cost", live ? "Cost (so far)" : "Cost", el("p", {class: "muted", id: "cost-none"},
      live ? "No item that ended so far recorded a cost." : "The pipeline recorded no cost for this run's items."));
    return;
  }
  section(page.sections.cost, "cost", live ? "Cost (so far)" : "Cost",
    el("table", {class: "narrow", id: "cost"},
      el("thead", {}, el("tr", {}, el("th", {scope: "col"}, "Name"), el("th", {scope: "col", class: "num"}, "Ending attempts"), el("th", {scope: "col", class: "num"}, "Spent by this run"))),
      el("tbody", {}, names.map((n) => el("tr", {},
        el("th", {scope: "row"}, n),
        el("td", {class: "num"}, n in (c.cost || {}) ? String(c.cost[n]) : "—"),
        el("td", {class: "num"}, n in (c.run_spent || {}) ? String(c.run_spent[n]) : "—"))))),
    el("p", {class: "muted small"}, "Ending attempts: the attempt that ended each item. Spent: every attempt of this run, retries included." +
      (live ? " Live, from the run's counters as items end (exact sums); the report has the final figures." : "")));
}

// thresholdSet reports whether a batch has a threshold.
function thresholdSet(t) {
  return !!t && (t.tolerated_failure_percent !== undefined || t.tolerated_failure_count !== undefined);
}

// retriesText is a report's retries (api.RetryCounts) in a sentence, as
// the CLI's report says them: lower bounds from the run's counters.
function retriesText(r) {
  let t = "Retries (from the counters, at least): " + fmtInt(r.scheduled) + " scheduled, " +
    r.throttled + " of them throttled by the downstream (no attempt used); " + r.interrupted + " interrupted; " + r.timed_out + " timed out";
  const causes = (r.causes || []).map(c => c.class + " (" + c.items + (c.error ? ": " + c.error : "") + ")");
  return t + (causes.length ? "; causes: " + causes.join(", ") : "") + ".";
}

// pausedText is a report's pauses (api.PausedSummary) in a sentence, as
// the CLI's report says them: how many, their time in all, the last one
// and who ended it.
function pausedText(p) {
  let t = "Paused " + count(p.pauses, "time") + ", " + fmtSeconds(p.seconds) + " in all";
  const l = p.last;
  if (!l) return t + ".";
  const who = {outage: "an outage", caller: "a caller", budget: "its budget"};
  const why = [];
  if (l.class && l.by !== "budget") why.push(l.class);
  if (l.probes) why.push(count(l.probes, "probe"));
  t += "; the last by " + (who[l.by] || l.by) + (why.length ? " (" + why.join(", ") + ")" : "") + " from " + fmtTime(l.since);
  const ended = {outage: ", ended by its probe answered", caller: ", ended by a caller's unpause", budget: ", ended by a raise of the budget"};
  return t + (l.ended_by ? " to " + fmtTime(l.until) + (ended[l.ended_by] || ", ended by " + l.ended_by) : " to the run's end at " + fmtTime(l.until)) + ".";
}

// liftedText is a report's lifted halts (api.LiftedSummary) in a
// sentence, as the CLI's report says them.
function liftedText(l) {
  const t = "Halts lifted: " + l.lifts;
  const h = l.last;
  if (!h) return t + ".";
  return t + "; the last on " + h.subject + " (halted " + fmtTime(h.since) + (h.reason ? ": " + h.reason : "") + "), lifted " + fmtTime(h.lifted_at) + ".";
}

// renderVerdict shows the threshold and the last run's verdict. A run
// without a threshold tolerates any failure, but its result is still
// said for what it is: every item succeeded (✓), some failed (⚠), or
// none succeeded (✗) — never "within threshold" for a run whose every
// item failed.
function renderVerdict(page) {
  const b = page.data.batch, rep = page.data.report;
  const t = b.threshold || {};
  const tol = [];
  if (t.tolerated_failure_percent !== undefined) tol.push("more than " + t.tolerated_failure_percent + " % of the items");
  if (t.tolerated_failure_count !== undefined) tol.push("more than " + count(t.tolerated_failure_count, "item"));
  const body = [el("p", {}, tol.length ? "The run fails when failures (failed + quarantined) are " + tol.join(" or ") + "." :
    "No threshold: the run completes whatever fails; needs attention tells when items failed.")];
  if (tol.length) body.push(el("p", {}, "Stops at the threshold: " + (b.stop_on_threshold === false ? "no (every item runs, judged at the end)" : "yes")));
  body.push(el("p", {}, b.budget_usd ? "Budget: $" + b.budget_usd + " per run — the run pauses when the pipeline's reported usd plus its DynamoDB units reach it (bulkrun budget ID --usd N raises it)." :
    "No budget: the run is not paused for what it spends."));
  body.push(el("p", {id: "ceilings-text"}, ceilingsText(b.ceilings)));
  if (rep) {
    const v = rep.verdict, c = rep.census;
    const of = " — run " + rep.run + ": " + count(v.failures, "failure") + " of " + count(v.total, "item");
    let cls = "ok", head = tol.length ? "✓ Within threshold" : "✓ Every item succeeded";
    if (v.exceeded) {
      cls = "bad"; head = "✗ Threshold exceeded";
    } else if (c.total > 0 && !c.succeeded) {
      cls = "bad"; head = c.failed === c.total ? "✗ Every item failed" : "✗ No item succeeded";
    } else if (v.failures > 0) {
      cls = tol.length ? "ok" : "warn"; head = tol.length ? "✓ Within threshold" : "⚠ Some items failed";
    }
    body.push(el("p", {id: "verdict", class: "verdict " + cls, dataset: {verdict: cls}},
      el("strong", {}, head), of + (v.detail ? " (" + v.detail + ")" : "") +
        (!v.exceeded && tol.length && cls === "bad" ? " (within the threshold)" : "")));
    if (rep.retries) body.push(el("p", {id: "retries"}, retriesText(rep.retries)));
    if (rep.paused) body.push(el("p", {id: "paused"}, pausedText(rep.paused)));
    for (const h of rep.halts || []) {
      body.push(el("p", {class: "halt-kept"}, "Halt kept at the run's end on ", el("code", {}, h.subject),
        " since " + fmtTime(h.since) + " (" + h.reason + "): its items stay withheld until it is lifted (bulkrun lift " + b.batch_id + " " + h.subject + ")."));
    }
    if (rep.lifted) body.push(el("p", {id: "lifted"}, liftedText(rep.lifted)));
  } else {
    body.push(el("p", {class: "muted"}, "The verdict comes with the first finished run's report."));
  }
  section(page.sections.verdict, "verdict", tol.length ? "Threshold and verdict" : "Verdict", ...body);
}

function renderLocations(page) {
  const b = page.data.batch, rep = page.data.report;
  const rows = [];
  const row = (k, v) => rows.push(el("tr", {}, el("th", {scope: "row"}, k), el("td", {}, el("code", {class: "uri"}, v))));
  if (b.report) row("Report", b.report);
  if (rep) {
    row("Results manifest", rep.results.manifest);
    for (const o of ["succeeded", "failed", "quarantined", "cancelled"]) {
      const f = (rep.results.files || {})[o];
      if (f) rows.push(el("tr", {}, el("th", {scope: "row"}, "Results: " + LABEL[o]),
        el("td", {}, el("code", {class: "uri"}, f.uri), el("span", {class: "muted"}, " " + fmtInt(f.bytes) + " bytes"))));
    }
    row("Outputs", rep.outputs);
    row("Manifest", rep.manifest.uri);
  } else if (b.manifest_key) {
    row("Manifest key", b.manifest_key);
  }
  section(page.sections.locations, "locations", "Report and results",
    rows.length ? el("div", {class: "scroll"}, el("table", {class: "kv", id: "locations"}, el("tbody", {}, rows))) :
      el("p", {class: "muted"}, "The report and results are written when a run finishes."),
    el("p", {class: "muted small"}, "Command line: ", el("code", {}, "bulkrun results " + b.batch_id + " --outcome failed"),
      ", ", el("code", {}, "bulkrun report " + b.batch_id)));
}

// repeatCause is the one cause every item of a finished run failed
// for, when a rerun would meet it again — every item failed, all of them
// (every results line read) with one permanent error — else null.
function repeatCause(page) {
  const b = page.data.batch, c = b.census, f = page.data.failures;
  if (running(b) || !c || !c.total || c.failed !== c.total || !f || !f.complete || f.causes.length !== 1) return null;
  const cause = f.causes[0];
  return cause.reason === "permanent" && cause.items === c.failed ? cause : null;
}

// permanentOnly reports whether a finished run's only items to run again
// are failed ones that all failed permanently (every results line read):
// a resume would run them as they are and fail them again.
function permanentOnly(page) {
  const b = page.data.batch, c = b.census || {}, f = page.data.failures;
  return !running(b) && c.failed > 0 && !c.quarantined && !c.cancelled && !!f && f.complete &&
    f.causes.length > 0 && f.causes.every((x) => x.reason === "permanent");
}

// primaryAction is the one action that applies, filled: approve for a
// sampled batch awaiting approval; unpause for a
// paused run (for one paused at its budget, raising the budget: only a raise ends that); resume for a finished run with items a new run may get
// through — none for a run whose every item succeeded, and none when its
// failed items all failed permanently (a rerun would repeat it:
// renderToDo says what to do instead).
function primaryAction(b, page) {
  if (b.status === "running" && !b.pause && !b.stop && approvalState(b) === "awaiting_approval") return "act-approve";
  if (b.status === "running" && !b.pause && b.census && b.census.exhausted > 0) return "act-ceilings";
  if (b.status === "running") return b.pause ? (b.pause.by === "budget" ? "act-budget" : "act-unpause") : "";
  if (b.status === "refused" || b.status === "submitting") return "";
  const c = b.census || {};
  if (c.total > 0 && c.succeeded === c.total) return "";
  if (repeatCause(page) || permanentOnly(page)) return "";
  return "act-resume";
}

function renderActions(page) {
  const b = page.data.batch;
  const finished = !running(b) && b.status !== "refused";
  const c = b.census || {};
  const fixable = (c.failed || 0) + (c.quarantined || 0) + (c.cancelled || 0);
  const allSucceeded = finished && c.total > 0 && c.succeeded === c.total;
  // Styled by weight: the one action that applies is primary (filled),
  // the others that start or hold work are plain, cancel, reject and
  // forget (stop or delete) are outlined in red, never primary.
  const primary = primaryAction(b, page);
  const weight = (id) => id === primary ? "primary" : id === "act-cancel" || id === "act-forget" || id === "act-reject" ? "danger" : "secondary";
  const btn = (id, text, enabled, why, run) => el("button", {id, disabled: !enabled, title: enabled ? null : why,
    class: weight(id), onclick: run}, text);
  page.sections.actions.replaceChildren(
    btn("act-resume", "Resume…", finished && !allSucceeded, allSucceeded ? "Every item succeeded: nothing to run again" : "Resume starts a new run of a finished batch",
      () => confirmAct("Resume batch " + b.batch_id + "?",
        "A new run starts: failed and cancelled items run again, released quarantined items too; succeeded items do not.",
        "Resume", "/resume", {}, page, false, "primary")),
    btn("act-correct", "Correct…", finished && fixable > 0, finished ? "No failed, quarantined or cancelled item to correct" : "Correct a finished batch",
      () => correctAct(page)),
    // A batch with failed items and a key field: their inputs, to edit
    // and hand to Correct… (a download of GET …/inputs, every page).
    ...(c.failed > 0 && b.key_field ? [el("a", {id: "act-inputs", class: "button secondary", download: "",
      href: "/api/batches/" + encodeURIComponent(b.batch_id) + "/inputs?outcome=failed",
      title: "The failed items' inputs in the source's own format, to edit and hand to Correct…"}, "Failed items' inputs")] : []),
    btn("act-cancel", "Cancel run…", b.status === "running" && !b.stop, "Only a running batch can be cancelled",
      () => confirmAct("Cancel the run of " + b.batch_id + "?",
        "Items not yet started end cancelled; started items finish. The run ends cancelled; resume runs the rest later.",
        "Cancel run", "/cancel", {}, page, false, "danger")),
    btn("act-pause", "Pause…", b.status === "running" && !b.stop && !(b.pause && b.pause.by === "caller"), "Only a running batch not paused by hand can be paused",
      () => confirmAct("Pause the run of " + b.batch_id + "?",
        "No item starts until you unpause; items running finish, waiting items use no attempt.",
        "Pause", "/pause", {}, page, false, "primary")),
    btn("act-unpause", "Unpause…", b.status === "running" && !!b.pause && b.pause.by !== "budget",
      b.pause && b.pause.by === "budget" ? "Paused at its budget: raise the budget (bulkrun budget ID --usd N)" : "Only a paused batch can be unpaused",
      () => confirmAct("Unpause the run of " + b.batch_id + "?",
        "Waiting items start again at the pause's next check (within about 5 minutes).",
        "Unpause", "/unpause", {}, page, false, "primary")),
    // A sampled batch's decision, while it is still to come.
    ...(undecided(b) ? approvalButtons(b, page, btn) : []),
    btn("act-budget", b.pause && b.pause.by === "budget" ? "Raise budget…" : "Budget…", b.status === "running",
      "Only a running batch's budget can be set", () => budgetAct(page)),
    btn("act-ceilings", (c.exhausted || 0) > 0 ? "Raise ceilings…" : "Ceilings…", b.status === "running",
      "Only a running batch's per-item ceilings can be raised here", () => ceilingsAct(page)),
    btn("act-forget", "Forget…", !running(b), "A running batch cannot be forgotten: cancel it first",
      () => confirmAct("Forget batch " + b.batch_id + "?",
        "Deletes its rows, manifest, outputs, results and report. This cannot be undone.",
        "Forget for good", "/forget", {}, page, true, "danger")),
    el("span", {class: "muted small"}, "Each action asks first."));
  renderToDo(page);
}

// approvalButtons are a sampled batch's Approve… and Reject… (POST
// …/approve, …/reject), enabled while its first run goes and is not
// stopping.
function approvalButtons(b, page, btn) {
  const open = b.status === "running" && b.run === 1 && !b.stop;
  const why = b.status === "submitting" ? "The source is still being read" : "Only a running first run's sample can be decided";
  const e = b.approval.estimate;
  return [
    btn("act-approve", "Approve…", open, why,
      () => confirmAct("Approve the rest of " + b.batch_id + "?",
        (e ? "The sample's estimate: " + estimateSummary(e) + ". " : "No estimate yet: the sample's items have not all ended. ") +
          "The items outside the sample run, each held message at its next check (within about 14 s in the 10 minutes after the estimate, 64 s to the hour, 5 minutes later on); the sample's items do not run again.",
        "Approve", "/approve", {}, page, false, "primary")),
    btn("act-reject", "Reject…", open, why,
      () => confirmAct("Reject " + b.batch_id + "?",
        "The run is cancelled: the items outside the sample end cancelled, never called; sample items still running finish. " +
          "A resume later runs what did not succeed, without a sample.",
        "Reject", "/reject", {}, page, false, "danger")),
  ];
}

// renderToDo says what to do when the obvious action would not help: a
// run whose every item failed for one cause that a resume would repeat
// (the same inputs, the same settings — a wrong header sent again).
function renderToDo(page) {
  const b = page.data.batch, cause = repeatCause(page);
  if (!cause && permanentOnly(page)) {
    page.sections.todo.replaceChildren(el("div", {class: "todo", role: "note"},
      el("strong", {}, "What to do: "),
      "the failed items failed permanently (their errors are below): a resume would run them as they are and fail them again. " +
        "Correct their inputs (", el("strong", {}, "Correct…"), "), fix what they call and submit them again, or leave them."));
    return;
  }
  if (!cause) { page.sections.todo.replaceChildren(); return; }
  page.sections.todo.replaceChildren(el("div", {class: "todo", role: "note"},
    el("strong", {}, "What to do: "),
    "every item failed the same way (" + cause.reason + ": " + cause.error.replaceAll("{key}", cause.example) +
      "). A resume runs the same inputs with the same settings and would fail the same way again. " +
      "If a setting is wrong — a URL, a header, a credential — submit the items again as a new batch with it fixed " +
      "(another setting is another batch: ",
    el("code", {}, "bulkrun submit FILE --pipeline " + b.pipeline + " …"),
    "). If the inputs are wrong, correct them: ", el("strong", {}, "Correct…"), "."));
}

// confirmAct asks in a modal dialog (Esc or "Keep as is" declines), then
// runs the action and reads the page again. weight styles the confirm
// button: "primary" for an action that starts work, "danger" (the
// default) for one that stops or deletes.
async function confirmAct(title, text, yes, path, body, page, leave, weight) {
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-yes").textContent = yes;
  document.getElementById("confirm-yes").className = weight || "danger";
  const ok = await ask("confirm", document.getElementById("confirm-no"));
  if (!ok) { notice("Nothing done."); return; }
  try {
    const out = await act("/api/batches/" + encodeURIComponent(page.id) + path, body);
    if (leave) {
      pendingNotice = [(out.message || "Done.") + ".", "ok"];
      location.hash = "#/";
      return;
    }
    await showBatch(page.id);
    notice((out.message || (yes + ": done" + (out.run ? ", run " + out.run : ""))) + ".", "ok");
  } catch (e) {
    notice(yes + " failed: " + e.message, "error");
  }
}

// correctAct asks for a corrections file and its key field in a modal
// dialog (Esc or "Keep as is" declines), sends it, and reads the page
// again: the correction's run is the batch's run.
async function correctAct(page) {
  const b = page.data.batch;
  const file = document.getElementById("correct-file");
  const key = document.getElementById("correct-key");
  document.getElementById("correct-title").textContent = "Correct items of " + b.batch_id;
  file.value = "";
  key.value = b.key_field || "";
  const ok = await ask("correct", file);
  const f = file.files[0];
  if (!ok || !f) { notice("Nothing done."); return; }
  try {
    const out = await act("/api/batches/" + encodeURIComponent(page.id) + "/corrections",
      {file_name: f.name, content: await f.text(), key_field: key.value.trim()});
    const r = out.revision;
    await showBatch(page.id);
    notice(out.batch.created ?
      "Revision " + r.revision + ": " + fmtInt(r.items) + " corrected items run in run " + r.run + "." :
      "These corrections are revision " + r.revision + " already (run " + r.run + "); nothing new started.", "ok");
  } catch (e) {
    notice("Correct failed: " + e.message, "error");
  }
}

// budgetAct asks for a batch's new budget in a modal dialog (Esc or
// "Keep as is" declines), sends it (POST …/budget), and reads the page
// again; the API refuses a budget at or under the run's spend (409).
async function budgetAct(page) {
  const b = page.data.batch;
  const usd = document.getElementById("budget-usd");
  document.getElementById("budget-title").textContent = "Budget of " + b.batch_id;
  usd.value = b.budget_usd ? String(b.budget_usd) : "";
  const ok = await ask("budget", usd);
  const v = Number(usd.value);
  if (!ok || !(v > 0)) { notice("Nothing done."); return; }
  try {
    await act("/api/batches/" + encodeURIComponent(page.id) + "/budget", {budget_usd: v});
    await showBatch(page.id);
    notice("Budget set to $" + v + ".", "ok");
  } catch (e) {
    notice("Budget failed: " + e.message, "error");
  }
}

// ask shows modal dialog id with focus on first, and answers whether it
// was closed with its "ok" button (Esc or "Keep as is": false); the
// element focused before it gets the focus back.
async function ask(id, first) {
  const d = document.getElementById(id);
  const opener = document.activeElement;
  d.returnValue = "";
  d.showModal();
  first.focus();
  const ok = await new Promise((res) => d.addEventListener("close", () => res(d.returnValue === "ok"), {once: true}));
  if (opener && document.body.contains(opener)) opener.focus();
  return ok;
}

// ceilingsText is a batch's per-item ceilings in words.
function ceilingsText(c) {
  const parts = [];
  if (c && c.spend_usd) parts.push("$" + c.spend_usd + " spend");
  if (c && c.tokens) parts.push(fmtInt(c.tokens) + " tokens");
  return parts.length ? "Per-item ceilings: " + parts.join(", ") + " per item and run — an item at one, at an attempt that would be retried, ends exhausted (not failed) until they are raised (bulkrun ceilings ID)." :
    "No per-item ceilings.";
}

// ceilingsAct asks for a batch's new per-item ceilings in a modal dialog
// (Esc or "Keep as is" declines), sends them (POST …/ceilings), and says
// how many exhausted items the raise woke and how many stay at a ceiling.
async function ceilingsAct(page) {
  const b = page.data.batch;
  const usd = document.getElementById("ceilings-usd"), tokens = document.getElementById("ceilings-tokens");
  document.getElementById("ceilings-title").textContent = "Per-item ceilings of " + b.batch_id;
  usd.value = b.ceilings && b.ceilings.spend_usd ? String(b.ceilings.spend_usd) : "";
  tokens.value = b.ceilings && b.ceilings.tokens ? String(b.ceilings.tokens) : "";
  const ok = await ask("ceilings", usd);
  const raise = {};
  if (Number(usd.value) > 0) raise.spend_usd = Number(usd.value);
  if (Number(tokens.value) > 0) raise.tokens = Number(tokens.value);
  if (!ok || !Object.keys(raise).length) { notice("Nothing done."); return; }
  try {
    const r = await act("/api/batches/" + encodeURIComponent(page.id) + "/ceilings", {ceilings: raise});
    await showBatch(page.id);
    notice("Ceilings set; " + count(r.woken, "exhausted item") + " woken" + (r.still_exhausted ? ", " + count(r.still_exhausted, "item") + " still at a ceiling" : "") + ".", "ok");
  } catch (e) {
    notice("Ceilings failed: " + e.message, "error");
  }
}

// revisionsText lists a batch's corrections: revision, items, run.
function revisionsText(b) {
  return (b.revisions || []).map((r) => "revision " + r.revision + ": " + fmtInt(r.items) + " corrected items, run " + r.run +
    (b.run_revision === r.revision && b.run === r.run ? " (this run)" : "")).join("; ");
}

// runVerdict is a finished run's verdict in the runs table, as the
// verdict box says it: exceeded, or within a threshold (tol) — but never
// a tick for a run none of whose items succeeded; without a threshold,
// the result itself: every item succeeded, some failed.
function runVerdict(r, tol) {
  const v = r.verdict, c = r.census;
  if (!v) return "—";
  if (v.exceeded) return "✗ exceeded";
  if (c && c.total > 0 && !c.succeeded) return "✗ none succeeded";
  if (tol) return "✓ within";
  return v.failures > 0 ? "⚠ some failed" : "✓ all succeeded";
}

async function loadRuns(page) {
  const sec = page.sections.runs;
  section(sec, "runs", "Runs", el("p", {class: "muted"}, "Loading…"));
  let out;
  try {
    out = await get("/api/batches/" + encodeURIComponent(page.id) + "/runs");
  } catch (e) {
    section(sec, "runs", "Runs", el("p", {class: "error"}, "Could not read the runs: " + e.message));
    return;
  }
  if (!out.runs.length) { section(sec, "runs", "Runs", el("p", {class: "muted"}, "No run yet.")); return; }
  const cell = (r, o) => el("td", {class: "num", "data-label": LABEL[o]}, r.census ? fmtInt(r.census[o]) : "—");
  section(sec, "runs", "Runs", el("div", {class: "scroll"}, el("table", {id: "runs", class: "cards"},
    el("thead", {}, el("tr", {}, ["Run", "Status", "Succeeded", "Failed", "Quarantined", "Cancelled", "Started", "Finished", "Verdict"].map((t) => el("th", {scope: "col"}, t)))),
    el("tbody", {}, out.runs.map((r) => el("tr", {dataset: {run: r.run}},
      el("td", {"data-label": "Run"}, String(r.run) + (r.revision ? " · revision " + r.revision : "")),
      el("td", {"data-label": "Status"}, statusBadge(r.status, {census: r.census,
        pause: r.run === page.data.batch.run ? page.data.batch.pause : null, stop: r.run === page.data.batch.run ? page.data.batch.stop : null})),
      cell(r, "succeeded"), cell(r, "failed"), cell(r, "quarantined"), cell(r, "cancelled"),
      el("td", {"data-label": "Started"}, fmtTime(r.run_started_at)),
      el("td", {"data-label": "Finished"}, fmtTime(r.finished_at)),
      el("td", {"data-label": "Verdict"}, runVerdict(r, thresholdSet(page.data.batch.threshold)))))))));
}

// loadItems shows the first page of the items of outcome (or, with
// cursor, appends the next page).
async function loadItems(page, outcome, cursor) {
  page.tab = outcome;
  page.itemsPaged = !!cursor;
  const sec = page.sections.items;
  const c = page.data.batch.census;
  const tabs = el("div", {class: "tabs", role: "tablist", "aria-label": "Items needing a look"},
    ITEM_TABS.map((o) => el("button", {
      role: "tab", id: "tab-" + o, "aria-selected": o === outcome ? "true" : "false", "aria-controls": "items",
      tabindex: o === outcome ? "0" : "-1", class: "tab",
      onclick: () => loadItems(page, o),
      onkeydown: (e) => {
        const order = ITEM_TABS;
        const i = order.indexOf(o) + (e.key === "ArrowRight" ? 1 : e.key === "ArrowLeft" ? -1 : 0);
        if (i !== order.indexOf(o) && order[i]) { e.preventDefault(); loadItems(page, order[i]).then(() => document.getElementById("tab-" + order[i]).focus()); }
      },
    }, LABEL[o] + (c ? " (" + fmtInt(c[o] || 0) + ")" : ""))));
  let tbody = cursor && document.querySelector("#items tbody");
  if (!tbody) {
    tbody = el("tbody", {});
    section(sec, "items", "Items needing a look", tabs,
      el("div", {class: "scroll", role: "tabpanel", "aria-labelledby": "tab-" + outcome},
        el("table", {id: "items", class: "cards", dataset: {outcome}},
          el("thead", {}, el("tr", {}, ["Key", "Reason", "Run", "Attempts", "Error", "Updated", ""].map((t) => el("th", {scope: "col"}, t)))),
          tbody)),
      el("div", {id: "items-more", class: "pager"}));
  }
  let p;
  try {
    p = await get("/api/batches/" + encodeURIComponent(page.id) + "/items?limit=25&outcome=" + outcome +
      (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""));
  } catch (e) {
    tbody.append(el("tr", {}, el("td", {colspan: 7, class: "error"}, "Could not read the items: " + e.message)));
    return;
  }
  if (page.tab !== outcome) return; // another tab was chosen meanwhile
  for (const it of p.items) {
    const rel = outcome === "quarantined" ? (it.released ? el("span", {class: "muted"}, "released: runs in the next run") :
      el("button", {class: "secondary small", dataset: {release: it.key}, onclick: () => confirmAct(
        "Release item " + it.key + "?", "The item stays quarantined in this run's results and runs again in the next run (resume).",
        "Release", "/release", {key: it.key}, page, false, "primary")}, "Release…")) :
      outcome === "suspended" ? signalButton(page, it) : "";
    tbody.append(el("tr", {dataset: {key: it.key}},
      el("td", {"data-label": "Key"}, el("code", {class: "key"}, it.key)),
      el("td", {"data-label": "Reason"}, it.reason || "—"),
      el("td", {"data-label": "Run", class: "num"}, String(it.run) + (it.revision > 1 ? " · rev " + it.revision : "")),
      el("td", {"data-label": "Attempts", class: "num"}, String(it.attempts)),
      el("td", {"data-label": "Error", class: "err"}, it.error || (outcome === "in_flight" ? "lease until " + fmtTime(it.lease_until) : "—")),
      el("td", {"data-label": "Updated"}, fmtTime(it.updated_at)),
      el("td", {"data-label": ""}, rel)));
  }
  if (!tbody.children.length) {
    tbody.append(el("tr", {}, el("td", {colspan: 7, class: "muted"}, "No " + LABEL[outcome] + " items.")));
  }
  const more = document.getElementById("items-more");
  more.replaceChildren(p.next_cursor ? el("button", {class: "secondary", id: "items-next", onclick: () => loadItems(page, outcome, p.next_cursor)}, "Show more " + LABEL[outcome] + " items") : "");
}

// signalButton is a suspended item's "Signal…" (signalAct); a woken
// item says what woke it instead.
function signalButton(page, it) {
  if (it.hold && it.hold.woken) return el("span", {class: "muted"}, "woken by " + it.hold.woken + ": runs once more");
  return el("button", {class: "secondary small", dataset: {signal: it.key}, onclick: () => signalAct(page, it)}, "Signal…");
}

// signalAct asks for a suspended item's signal — a JSON payload and the
// suspension's token, both optional — in a modal dialog, sends it (POST
// …/signal), and reads the items again. A payload that is not JSON is
// refused here, nothing sent.
async function signalAct(page, it) {
  const payload = document.getElementById("signal-payload"), token = document.getElementById("signal-token");
  const wake = it.hold && it.hold.wake_at ? " (its timer would wake it at " + fmtTime(it.hold.wake_at) + ")" : "";
  document.getElementById("signal-title").textContent = "Signal item " + it.key + wake;
  payload.value = "";
  token.value = "";
  if (!(await ask("signal", payload))) { notice("Nothing done."); return; }
  const body = {key: it.key};
  if (payload.value.trim() !== "") {
    try {
      body.payload = JSON.parse(payload.value);
    } catch (e) {
      notice("The payload is not JSON (" + e.message + "); nothing sent.", "error");
      return;
    }
  }
  if (token.value.trim() !== "") body.token = token.value.trim();
  try {
    const out = await act("/api/batches/" + encodeURIComponent(page.id) + "/signal", body);
    await showBatch(page.id);
    notice((out.message || "Signalled " + it.key) + ".", "ok");
  } catch (e) {
    notice("Signal failed: " + e.message, "error");
  }
}

async function loadThumbs(page, cursor) {
  const sec = page.sections.thumbs;
  const b = page.data.batch;
  if (!page.data.report) {
    if (b.pipeline === "thumbnail") section(sec, "thumbs", "Thumbnails", el("p", {class: "muted"}, "Shown once a run has finished (read from its results)."));
    return;
  }
  let p;
  try {
    p = await get("/api/batches/" + encodeURIComponent(page.id) + "/thumbnails?limit=24" + (cursor ? "&cursor=" + cursor : ""));
  } catch (e) {
    section(sec, "thumbs", "Thumbnails", el("p", {class: "error"}, "Could not read the thumbnails: " + e.message));
    return;
  }
  if (!cursor && !p.thumbnails.length) {
    if (b.pipeline === "thumbnail") section(sec, "thumbs", "Thumbnails", el("p", {class: "muted"}, "No thumbnails in the last finished run."));
    return;
  }
  let grid = cursor && document.getElementById("thumbs");
  if (!grid) {
    grid = el("ul", {class: "thumbs", id: "thumbs"});
    section(sec, "thumbs", "Thumbnails", el("p", {class: "muted small"}, "Outputs of the succeeded items of run " + page.data.report.run + ", served through this console."),
      grid, el("div", {class: "pager", id: "thumbs-more"}));
  }
  for (const t of p.thumbnails) {
    grid.append(el("li", {}, el("figure", {},
      el("img", {src: t.src, alt: "Thumbnail of " + t.key}),
      el("figcaption", {class: "key", title: t.key}, t.key.split("/").pop()))));
  }
  document.getElementById("thumbs-more").replaceChildren(p.next_cursor ?
    el("button", {class: "secondary", onclick: () => loadThumbs(page, p.next_cursor)}, "Show more thumbnails") : "");
}

// rateText is a batch's rate in words: requests a second, a token budget,
// or both, and the key they are shared on (the CLI's status says the same
// as "50/s, 90000 tokens/min on api.openai.com").
function rateText(r) {
  return limitsText(r) + " on " + (r.key || "this batch alone");
}

// limitsText is a rate's limits without its key: "50 requests/s, 90000
// tokens/min".
function limitsText(r) {
  const parts = [];
  if (r.requests_per_second) parts.push(r.requests_per_second + " requests/s");
  if (r.tokens_per_second) parts.push(r.tokens_per_second + " tokens/s");
  if (r.tokens_per_minute) parts.push(r.tokens_per_minute + " tokens/min");
  return parts.join(", ");
}
