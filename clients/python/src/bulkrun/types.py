"""The JSON shapes of bulkrun's REST API, as TypedDicts.

They are the schemas of docs/openapi.yaml (the contract; the Go types of
shared/wire and shared/api): a key that is optional there is NotRequired
here. The client returns the parsed JSON as is, typed with these; the
tests check every request it sends and every answer it parses against
the OpenAPI document.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

Status = Literal["submitting", "refused", "running", "completed", "threshold_exceeded", "cancelled", "finalize_failed"]
"""A batch's status. Finished: completed, threshold_exceeded, cancelled,
finalize_failed (and refused, which never ran)."""

Outcome = Literal["pending", "in_flight", "succeeded", "failed", "quarantined", "cancelled", "withheld",
                  "exhausted", "suspended"]
"""An item's outcome; the terminal ones are succeeded, failed, quarantined
and cancelled."""

FINISHED: frozenset[str] = frozenset({"refused", "completed", "threshold_exceeded", "cancelled", "finalize_failed"})
"""The statuses wait() stops at: a run that ended, or a refused batch."""

TERMINAL_OUTCOMES: tuple[Outcome, ...] = ("succeeded", "failed", "quarantined", "cancelled")
"""The outcomes that have a results file, in the order results() reads them."""

Cost = dict[str, float]
"""Cost name → amount, an exact decimal sum (units are the name's own: calls, usd)."""


class Threshold(TypedDict, total=False):
    """Failures tolerated before the run fails (Distributed Map's rule)."""

    tolerated_failure_percent: float
    tolerated_failure_count: int


class RetryPolicy(TypedDict):
    """How an item's attempts are spaced after transient errors (seconds)."""

    interval_seconds: float
    backoff_rate: float
    max_delay_seconds: float
    jitter: float


class SourceSpec(TypedDict, total=False):
    """Exactly one of items (inline), object (s3://bucket/key) or prefix (s3://bucket/prefix/)."""

    items: list[Any]
    object: str
    etag: str
    prefix: str
    format: str
    csv_delimiter: str


class SubmitRequest(TypedDict, total=False):
    """POST /batches (docs/api.md; schema SubmitRequest)."""

    batch_id: str
    pipeline: str
    source: SourceSpec
    key_field: str
    threshold: Threshold
    stop_on_threshold: bool
    budget_usd: float
    ceilings: "Ceilings"
    max_attempts: int
    retry: RetryPolicy
    max_concurrency: int
    priority: int
    sample: int
    auto_approve_usd: float
    items_per_message: int
    on_interrupt: Literal["retry", "quarantine"]
    headers: dict[str, str]
    pipeline_options: dict[str, Any]
    rerun: bool
    task_token: str
    task_heartbeat_seconds: int


class CorrectRequest(TypedDict, total=False):
    """POST /batches/{id}/corrections."""

    source: SourceSpec
    key_field: str


class Ceilings(TypedDict, total=False):
    """Per-item ceilings: what one item's attempts of a run may report
    (usd, tokens) before it ends exhausted instead of being retried."""

    spend_usd: float
    tokens: float


class CeilingsResult(TypedDict):
    """The answer of POST /batches/{id}/ceilings."""

    ceilings: Ceilings
    woken: int
    already_woken: int
    still_exhausted: int
    done: bool


class Census(TypedDict):
    """A run's items by outcome and its cost."""

    total: int
    succeeded: int
    failed: int
    quarantined: int
    cancelled: int
    withheld: NotRequired[int]
    exhausted: NotRequired[int]
    suspended: NotRequired[int]
    in_flight: int
    pending: int
    cost: Cost | None
    run_spent: Cost | None
    cost_names_omitted: NotRequired[int]


class Progress(TypedDict, total=False):
    """A running batch's progress from its counters."""

    done: int
    failures: int


Pause = TypedDict(
    "Pause",
    {
        "by": Literal["outage", "caller", "budget"],
        "since": str,
        "probes": int,
        "class": NotRequired[str],
        "error": NotRequired[str],
        "next_check_at": NotRequired[str],
    },
)
"""A running batch's pause: by a caller, on an outage (class, error), or at
its budget (class "budget", error: the budget and the spend that reached it)."""


ApprovalState = Literal["sampling", "awaiting_approval", "approved", "rejected"]
"""Where a sampled batch stands: sampling (the sample's items run, the rest
waits), awaiting_approval (the sample has ended, its estimate is written),
approved (by a caller or by auto_approve_usd: the rest runs), rejected (by
a caller: the run is cancelled)."""


class SampleEstimate(TypedDict):
    """What a sample projects for its whole run (Approval.estimate), made
    once, when the sample's items had ended: failure_rate, failure_low and
    failure_high are fractions (0.015 is 1.5 %; low–high its 95 % Wilson
    score interval); *_usd are US dollars to 6 places (cost_usd, the
    sample's spend × items / sample_items, is pipeline_usd + infra_usd);
    sample_seconds and seconds are seconds (the rest's time at
    items_per_second); pace says what set the pace."""

    made_at: str
    items: int
    sample_items: int
    failed: int
    failure_rate: float
    failure_low: float
    failure_high: float
    projected_failures: int
    sample_usd: float
    cost_usd: float
    pipeline_usd: float
    infra_usd: float
    projected_cost: NotRequired[Cost]
    sample_seconds: float
    items_per_second: float
    seconds: float
    pace: str


class Approval(TypedDict):
    """A sampled batch's sample (items), estimate and decision
    (BatchView.approval; absent on a batch without a sample): decided_at
    and decided_by ("caller" or "auto_approve") once decided; estimate once
    the sample has ended (absent when a decision came first)."""

    state: ApprovalState
    sample: int
    decided_at: NotRequired[str]
    decided_by: NotRequired[Literal["caller", "auto_approve"]]
    estimate: NotRequired[SampleEstimate]


class Error(TypedDict):
    """Every error answer's body; branch on code, never on message."""

    code: str
    message: str
    field: NotRequired[str]
    line: NotRequired[int]
    element: NotRequired[int]
    key: NotRequired[str]


class BatchView(TypedDict, total=False):
    """A batch as GET /batches/{id} and every command answer it (schema BatchView).

    Only batch_id and status are always there; see docs/openapi.yaml for
    the rest (census while a run goes is its counters': census_source).
    """

    batch_id: str
    status: Status
    pipeline: str
    item_count: int
    run: int
    manifest_digest: str
    created_at: str
    finished_at: str
    census: Census
    census_source: str
    progress: Progress
    needs_attention: bool
    stop: Status
    pause: Pause
    budget_usd: float
    sample: int
    auto_approve_usd: float
    approval: Approval
    refusal: Error
    failure: str
    paused: "PausedSummary"
    report: str
    created: bool
    submitted_by: str
    warnings: list[str]
    source_format: str
    csv: CSVShape


class CSVShape(TypedDict, total=False):
    """A CSV source's delimiter and header as the submit read them (BatchView.csv)."""

    delimiter: str
    header: list[str]


class InputPage(TypedDict):
    """One page of GET /batches/{id}/inputs (Client.inputs_page): body is
    the page as the API answers it, in the source's format (format "csv":
    the source's header and delimiter, a header on every page; "jsonl": one
    input a line); count is how many items' inputs it holds; next_cursor is
    None on the last page."""

    format: Literal["csv", "jsonl"]
    body: bytes
    count: int
    next_cursor: str | None


class Item(TypedDict):
    """An item of GET /batches/{id}/items."""

    key: str
    run_id: str
    run: int
    outcome: Outcome
    attempt: int
    attempts: int
    error: NotRequired[str]
    reason: NotRequired[str]
    output: NotRequired[Any]
    output_ref: NotRequired[str]
    revision: NotRequired[int]
    cost: NotRequired[Cost]
    updated_at: NotRequired[str]


class ItemPage(TypedDict):
    """One page of items, oldest key first; next_cursor absent at the end."""

    items: list[Item] | None
    next_cursor: NotRequired[str]


class BatchPage(TypedDict):
    """One page of GET /batches, newest first."""

    batches: list[BatchView]
    next_cursor: NotRequired[str]


class Location(TypedDict):
    """An S3 object the report names."""

    uri: str
    bytes: int
    digest: NotRequired[str]


class Results(TypedDict):
    """The report's results: one JSON Lines file per outcome."""

    manifest: str
    files: dict[str, Location]


class RetryCounts(TypedDict):
    """A run's attempts that did not end their item, from its counters
    (lower bounds; schema Report, retries). Each cause is a dict with the
    keys class, error and items."""

    scheduled: int
    throttled: int
    interrupted: int
    timed_out: int
    causes: NotRequired[list[dict[str, Any]]]


class Halt(TypedDict):
    """A halt on a refused credential (schema Halt)."""

    subject: str
    since: str
    reason: NotRequired[str]


class PausedSummary(TypedDict):
    """What a run's pauses took (schema Report, paused): their number,
    their time in all in seconds, and the last one as a dict with the keys
    by, since, until, class, error, probes and ended_by (absent when it
    stood at the run's end)."""

    pauses: int
    seconds: float
    last: NotRequired[dict[str, Any]]


class LiftedHalt(TypedDict):
    """A halt a caller lifted (schema Report, lifted.last): the halt as it
    stood and when it was lifted."""

    subject: str
    since: str
    reason: NotRequired[str]
    lifted_at: str


class LiftedSummary(TypedDict):
    """What callers lifted of a batch's halts by a run's end (schema
    Report, lifted): how many, and the last."""

    lifts: int
    last: NotRequired[LiftedHalt]


class Report(TypedDict, total=False):
    """A finished run's report.json (schema Report)."""

    batch_id: str
    run: int
    pipeline: str
    status: Status
    needs_attention: bool
    census: Census
    results: Results
    outputs: str
    created_at: str
    finished_at: str
    retries: RetryCounts
    paused: PausedSummary
    halts: list[Halt]
    lifted: LiftedSummary


class ResultLine(TypedDict):
    """One line of a results file (docs/cli.md, "Results lines")."""

    key: str
    outcome: Outcome
    run: int
    revision: int
    attempts: int
    output: NotRequired[Any]
    output_ref: NotRequired[str]
    error: NotRequired[str]
    reason: NotRequired[str]
    cost: NotRequired[Cost]


class ResultPage(TypedDict):
    """One page of GET /batches/{id}/results/partial: the results lines
    the current run has recorded so far; order "key" (key byte order) or
    "manifest" (items per message > 1); next_cursor absent at the end."""

    batch_id: str
    run: int
    status: Status
    order: Literal["key", "manifest"]
    lines: list[ResultLine]
    next_cursor: NotRequired[str]


class Revision(TypedDict, total=False):
    """A correction's revision of the batch's inputs."""

    revision: int
    digest: str
    items: int
    run: int


class CorrectionView(TypedDict):
    """The answer of POST /batches/{id}/corrections."""

    batch: BatchView
    revision: Revision
