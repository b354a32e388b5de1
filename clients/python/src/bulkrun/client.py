"""The client of bulkrun's REST API (docs/api.md, docs/openapi.yaml).

Requests are signed with AWS Signature Version 4 through botocore
(service "execute-api": the API uses IAM authorization), with the
credentials and region botocore finds (environment, profile, role). The
API is found from the stack's CloudFormation outputs as the Go client
(shared/client) finds it. Answers are the API's JSON, typed with the
TypedDicts of bulkrun.types.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import secrets
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any, Literal, cast

import botocore.session
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.httpsession import URLLib3Session

from .types import (
    FINISHED,
    TERMINAL_OUTCOMES,
    BatchPage,
    BatchView,
    Ceilings,
    CeilingsResult,
    CorrectionView,
    CorrectRequest,
    Error,
    InputPage,
    ItemPage,
    Item,
    Report,
    ResultLine,
    ResultPage,
    SourceSpec,
    SubmitRequest,
)

ENV_API_URL = "BULKRUN_API_URL"
"""When set, the API base URL to call instead of the stack's (a custom
domain, a proxy), as for the Go client and the CLI."""

DEFAULT_STACK = "bulkrun"
"""The stack name the client looks for by default."""

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
"""Answers after which submit sends the same request again: the request
may not have reached the API, or its outcome is unknown."""

MAX_POLL_INTERVAL = 15.0
"""The longest pause, in seconds, between two polls of wait()."""


class APIError(Exception):
    """An error answer of the API: status is the HTTP status, body the
    Error object (code, message, and field, line, key where they apply).
    Branch on code (not_found, batch_mismatch, invalid_request, conflict,
    expired, insufficient_storage, …), never on message."""

    def __init__(self, status: int, body: Error) -> None:
        # The server's message ends with the domain's sentinel ("…:
        # conflict"), which the text, led by the code, does not repeat.
        message = body["message"]
        said = ": " + body["code"].replace("_", " ")
        if message.endswith(said):
            message = message[: -len(said)]
        super().__init__(f"HTTP {status} {body['code']}: {message}")
        self.status = status
        self.body = body

    @property
    def code(self) -> str:
        """The error's code."""
        return self.body["code"]


class StackError(Exception):
    """The stack could not be found or lacks an output the client needs."""


def stack_outputs(name: str = DEFAULT_STACK, session: botocore.session.Session | None = None) -> dict[str, str]:
    """Read the outputs (key → value) of the CloudFormation stack name.

    Raises StackError when the stack is not there (not deployed, another
    name, another region or endpoint).
    """
    s = session or botocore.session.get_session()
    cfn: Any = s.create_client("cloudformation", region_name=_region(s))
    try:
        out = cfn.describe_stacks(StackName=name)
    except ClientError as e:
        raise StackError(f"describe stack {name}: {e} (is the stack deployed?)") from e
    stacks = out.get("Stacks") or []
    if not stacks:
        raise StackError(f"stack {name} not found")
    return {o["OutputKey"]: o.get("OutputValue", "") for o in stacks[0].get("Outputs", []) if "OutputKey" in o}


def _region(s: botocore.session.Session) -> str:
    region = os.environ.get("AWS_REGION") or s.get_config_variable("region")
    if not region:
        raise StackError("no AWS region: set AWS_REGION (or a profile's region)")
    return cast(str, region)


def api_base(outputs: dict[str, str]) -> str:
    """The API base URL for a stack's outputs, as the Go client derives it.

    $BULKRUN_API_URL when set; with AWS_ENDPOINT_URL set (an emulator)
    {endpoint}/restapis/{ApiId}/{ApiStage}/_user_request_; otherwise the
    ApiUrl output. Raises StackError naming a missing output.
    """
    if url := os.environ.get(ENV_API_URL):
        return url.rstrip("/")
    if endpoint := os.environ.get("AWS_ENDPOINT_URL"):
        api_id = _output(outputs, "ApiId")
        stage = outputs.get("ApiStage") or "v1"
        return f"{endpoint.rstrip('/')}/restapis/{api_id}/{stage}/_user_request_"
    return _output(outputs, "ApiUrl").rstrip("/")


def _output(outputs: dict[str, str], key: str) -> str:
    v = outputs.get(key)
    if not v:
        raise StackError(f"stack has no output {key!r} (is the stack deployed?)")
    return v


def _quote(segment: str) -> str:
    """One path segment, percent-encoded as the API decodes it once
    (wire.ItemPath: "/" as %2F, "%" as %25, "." and ".." escaped)."""
    if segment in (".", ".."):
        return segment.replace(".", "%2E")
    return urllib.parse.quote(segment, safe="")


class Client:
    """A client of one deployed stack's API. Safe to share between threads
    only as botocore's credentials and urllib3's pool are (they are).

    base: the API base URL (api_base()); bucket: the stack's bucket (for
    submit_file and results; the BucketName output). session: the botocore
    session whose credentials sign requests (default: a new one).
    timeout: whole seconds per HTTP request (default 60).
    """

    def __init__(
        self,
        base: str,
        bucket: str | None = None,
        session: botocore.session.Session | None = None,
        timeout: int = 60,
    ) -> None:
        self.base = base.rstrip("/")
        self.bucket = bucket
        self._session = session or botocore.session.get_session()
        self._region = _region(self._session)
        self._http = URLLib3Session(timeout=timeout)
        self._s3: Any = None
        self.sleep: Callable[[float], None] = time.sleep
        """How the client waits between tries and polls (tests replace it)."""

    @classmethod
    def from_stack(cls, stack: str = DEFAULT_STACK, session: botocore.session.Session | None = None) -> Client:
        """A client of the stack named stack, found from its CloudFormation outputs."""
        s = session or botocore.session.get_session()
        outputs = stack_outputs(stack, s)
        return cls(api_base(outputs), outputs.get("BucketName"), s)

    # -- the transport -------------------------------------------------

    def _send(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, str], bytes]:
        data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        req = AWSRequest(method=method, url=self.base + path, data=data, headers={"Content-Type": "application/json"})
        creds = self._session.get_credentials()
        if creds is None:
            raise StackError("no AWS credentials found (environment, profile or role)")
        SigV4Auth(creds.get_frozen_credentials(), "execute-api", self._region).add_auth(req)
        resp = self._http.send(req.prepare())
        return resp.status_code, dict(resp.headers.items()), resp.content

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """Send a signed request and return the 2xx answer's JSON (None for
        an empty one). Any other answer raises APIError (a redirect too)."""
        status, _, data = self._send(method, path, body)
        return _answer(status, data)

    # -- batches -------------------------------------------------------

    def submit(
        self,
        pipeline: str,
        *,
        items: list[Any] | None = None,
        object: str | None = None,
        prefix: str | None = None,
        batch_id: str | None = None,
        tries: int = 6,
        **options: Any,
    ) -> BatchView:
        """Submit a batch of inline items, an S3 object or an S3 prefix
        (exactly one). options are the request's other fields (key_field,
        threshold, stop_on_threshold, budget_usd, max_attempts, retry, max_concurrency,
        priority, items_per_message, on_interrupt, headers, pipeline_options, rerun,
        task_token: a Step Functions task token answered when the first run
        ends, docs/api.md "Step Functions"; task_heartbeat_seconds: with it,
        SendTaskHeartbeat while that run goes, at least 600; sample: 1–100,000
        items run first, the rest held until approve() or reject(), the
        batch's approval carrying an estimate of the whole run once they have
        ended, docs/api.md "Sample and approve"; auto_approve_usd: with
        sample, US dollars > 0 under which that estimate's cost_usd approves
        without a caller).

        The answer is the batch: status submitting (an S3 source, read in
        the background: wait() for it) or running; created False when the
        same batch existed. Without batch_id a new one is chosen before the
        first try, so that the same request can be sent again: answers 429,
        500, 502, 503, 504 and lost connections are retried, tries in all,
        1, 2, 4, 8, 16 s apart (plus jitter). Other errors raise APIError.
        """
        sources = [s for s in (items is not None, object is not None, prefix is not None) if s]
        if len(sources) != 1:
            raise ValueError("submit: give exactly one of items, object, prefix")
        src: SourceSpec = {}
        if items is not None:
            src["items"] = items
        if object is not None:
            src["object"] = object
        if prefix is not None:
            src["prefix"] = prefix
        req = cast(SubmitRequest, {"batch_id": batch_id or new_batch_id(), "pipeline": pipeline, "source": src, **options})
        return self.submit_request(req, tries=tries)

    def submit_request(self, req: SubmitRequest, tries: int = 6) -> BatchView:
        """POST /batches with req as given (a batch_id is added when absent),
        retried as submit() says."""
        if not req.get("batch_id"):
            req = cast(SubmitRequest, {**req, "batch_id": new_batch_id()})
        for attempt in range(1, tries + 1):
            try:
                return cast(BatchView, self.request("POST", "/batches", req))
            except (APIError, OSError, ConnectionError) as e:
                if attempt >= tries or not retryable(e):
                    raise
                self.sleep(min(2.0 ** (attempt - 1), 16.0) * (1 + random.random() / 2))
        raise AssertionError("unreachable")

    def submit_file(self, pipeline: str, path: str, *, batch_id: str | None = None, **options: Any) -> BatchView:
        """Upload the local file path to the stack's bucket under
        uploads/{first 16 hex digits of its SHA-256}/{name} (as the CLI
        does: not incoming/, which would start a second batch; the same
        content names the same object) and submit it as an S3 object."""
        uri = self.upload(path)
        return self.submit(pipeline, object=uri, batch_id=batch_id, **options)

    def upload(self, path: str) -> str:
        """Put the local file path under uploads/ in the stack's bucket and
        return its s3:// URI (see submit_file)."""
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        key = f"uploads/{h.hexdigest()[:16]}/{os.path.basename(path)}"
        bucket = self._bucket()
        with open(path, "rb") as f:
            self._s3_client().put_object(Bucket=bucket, Key=key, Body=f)
        return f"s3://{bucket}/{key}"

    def status(self, batch_id: str) -> BatchView:
        """GET /batches/{id}: the batch with its census."""
        return cast(BatchView, self.request("GET", "/batches/" + _quote(batch_id)))

    def wait(
        self,
        batch_id: str,
        *,
        interval: float = 1.0,
        timeout: float | None = None,
        progress: Callable[[BatchView], None] | None = None,
    ) -> BatchView:
        """Poll status() until the batch's run has finished or it was refused
        (FINISHED), calling progress with each view, and return the last.

        Polls are interval seconds apart while the batch moves (status,
        run or counts changed) and back off, doubling, to at most
        max(interval, 15 s) while it stands still, as the Go client's
        WaitUntil. timeout (seconds; None: no limit) raises TimeoutError.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.0
        seen = ""
        while True:
            v = self.status(batch_id)
            if progress is not None:
                progress(v)
            if v.get("status") in FINISHED:
                return v
            now = _movement(v)
            pause = interval if (now != seen or pause <= 0) else min(2 * pause, max(interval, MAX_POLL_INTERVAL))
            seen = now
            if deadline is not None and time.monotonic() + pause > deadline:
                raise TimeoutError(f"wait for batch {batch_id}: still {v.get('status')} after {timeout} s")
            self.sleep(pause)

    def items(self, batch_id: str, outcome: str = "failed", *, limit: int | None = None, cursor: str | None = None) -> ItemPage:
        """One page of the batch's items of outcome (failed, quarantined,
        in_flight), oldest key first; pass its next_cursor as cursor for the
        next. A page holds at most limit items (1–1,000, default 100) and
        2 MiB of them: it may hold fewer and still go on."""
        q: dict[str, str] = {"outcome": outcome}
        if limit is not None:
            q["limit"] = str(limit)
        if cursor:
            q["cursor"] = cursor
        path = f"/batches/{_quote(batch_id)}/items?" + urllib.parse.urlencode(q)
        return cast(ItemPage, self.request("GET", path))

    def iter_items(self, batch_id: str, outcome: str = "failed", *, cursor: str | None = None, limit: int | None = None) -> ItemIterator:
        """Every item of outcome, page after page (items()), from cursor
        (None: the first). The iterator's cursor is where a later call
        resumes: the next_cursor of the last page read whole."""
        return ItemIterator(self, batch_id, outcome, cursor, limit)

    def list_batches(self, *, status: list[str] | None = None, since: str | None = None, limit: int | None = None, cursor: str | None = None) -> BatchPage:
        """GET /batches: a page of batches, newest first."""
        q: dict[str, str] = {}
        if status:
            q["status"] = ",".join(status)
        if since:
            q["since"] = since
        if limit is not None:
            q["limit"] = str(limit)
        if cursor:
            q["cursor"] = cursor
        return cast(BatchPage, self.request("GET", "/batches" + ("?" + urllib.parse.urlencode(q) if q else "")))

    def report(self, batch_id: str) -> Report:
        """The last finished run's report.json. A report over 2 MiB comes as
        a link (303 See Other, a presigned URL), which is followed unsigned."""
        status, headers, data = self._send("GET", f"/batches/{_quote(batch_id)}/report")
        if status != 303:
            return cast(Report, _answer(status, data))
        link = json.loads(data)
        req = AWSRequest(method="GET", url=link["report_url"])
        resp = self._http.send(req.prepare())
        if resp.status_code != 200:
            raise APIError(resp.status_code, {"code": f"http_{resp.status_code}", "message": resp.text[:300]})
        return cast(Report, json.loads(resp.content))

    def results(self, batch_id: str, outcomes: tuple[str, ...] | list[str] | None = None) -> Iterator[ResultLine]:
        """The last finished run's results lines (one dict per item), outcome
        by outcome (succeeded, failed, quarantined, cancelled; or those of
        outcomes), read from the JSON Lines files the report names in the
        stack's bucket, as a stream."""
        rep = self.report(batch_id)
        files = rep.get("results", {}).get("files", {})
        for outcome in outcomes or TERMINAL_OUTCOMES:
            loc = files.get(outcome)
            if loc is None:
                continue
            uri = loc["uri"]
            if not uri.startswith("s3://"):
                raise ValueError(f"report of {batch_id}: results {outcome}: {uri!r} is not an s3:// URI")
            bucket, _, key = uri[len("s3://"):].partition("/")
            body = self._s3_client().get_object(Bucket=bucket, Key=key)["Body"]
            try:
                for line in body.iter_lines():
                    if line.strip():
                        yield cast(ResultLine, json.loads(line))
            finally:
                body.close()

    def partial_results_page(self, batch_id: str, *, cursor: str | None = None, limit: int | None = None) -> ResultPage:
        """GET /batches/{id}/results/partial: one page of the results lines
        the batch's current run has recorded so far (limit 1–1,000, default
        1,000; a page may hold fewer, even none, and still go on)."""
        q: dict[str, str] = {}
        if limit is not None:
            q["limit"] = str(limit)
        if cursor:
            q["cursor"] = cursor
        path = f"/batches/{_quote(batch_id)}/results/partial" + ("?" + urllib.parse.urlencode(q) if q else "")
        return cast(ResultPage, self.request("GET", path))

    def partial_results(self, batch_id: str, *, limit: int | None = None) -> Iterator[ResultLine]:
        """The results lines the batch's current run has recorded so far,
        without waiting for finalize, page after page
        (partial_results_page): the lines of its results files for the
        items whose outcome is recorded, in key byte order (manifest order
        for items per message > 1), pending and in-flight items absent;
        once the run has finished, its results."""
        cursor: str | None = None
        while True:
            page = self.partial_results_page(batch_id, cursor=cursor, limit=limit)
            yield from page.get("lines") or []
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def inputs_page(self, batch_id: str, outcome: str = "failed", *, limit: int | None = None, cursor: str | None = None) -> InputPage:
        """GET /batches/{id}/inputs: one page of the current inputs of the
        batch's items of outcome ("failed" or "quarantined", the outcomes a
        correction takes; another is APIError 400 naming outcome), in the
        source's own format: CSV with the source's header and delimiter, or
        JSON Lines. limit items a page (1–1,000, default 100; a page also
        holds at most 2 MiB of inputs); pass next_cursor as cursor for the
        next. A batch with positional keys is APIError 409."""
        q: dict[str, str] = {"outcome": outcome}
        if limit is not None:
            q["limit"] = str(limit)
        if cursor:
            q["cursor"] = cursor
        status, headers, data = self._send("GET", f"/batches/{_quote(batch_id)}/inputs?" + urllib.parse.urlencode(q))
        if status // 100 != 2:
            _answer(status, data)
        h = {k.lower(): v for k, v in headers.items()}
        fmt: Literal["csv", "jsonl"] = "csv" if h.get("content-type", "").split(";")[0].strip() == "text/csv" else "jsonl"
        return {"format": fmt, "body": data, "count": int(h.get("bulkrun-input-count", "0")), "next_cursor": h.get("bulkrun-next-cursor") or None}

    def inputs(self, batch_id: str, outcome: str = "failed", *, limit: int | None = None) -> bytes:
        """Every page of inputs_page joined into one file's bytes, ready to
        edit and hand to correct(): a CSV source's header once, then its
        records; JSON Lines as they come. Pages go in key order, each in
        source order. ValueError when a later CSV page's header is not the
        first's (a batch submitted before CSV headers were kept)."""
        out = bytearray()
        header: bytes | None = None
        cursor: str | None = None
        while True:
            page = self.inputs_page(batch_id, outcome, limit=limit, cursor=cursor)
            body = page["body"]
            if page["format"] == "csv":
                h = body[: _csv_header_len(body)]
                if header is None:
                    header = h
                elif h != header:
                    raise ValueError(f"inputs of {batch_id}: a page's CSV header {h!r} is not the first page's {header!r}")
                else:
                    body = body[len(h):]
            out += body
            cursor = page["next_cursor"]
            if not cursor:
                return bytes(out)

    def correct(
        self,
        batch_id: str,
        *,
        items: list[Any] | None = None,
        object: str | None = None,
        key_field: str | None = None,
    ) -> CorrectionView:
        """POST /batches/{id}/corrections: corrected inputs (inline items, or
        an S3 object) for failed, quarantined or cancelled items, run as a
        new revision; the same corrections again answer their revision
        (created False, no new run)."""
        if (items is None) == (object is None):
            raise ValueError("correct: give exactly one of items, object")
        src: SourceSpec = {"items": items} if items is not None else {"object": cast(str, object)}
        req: CorrectRequest = {"source": src}
        if key_field:
            req["key_field"] = key_field
        return cast(CorrectionView, self.request("POST", f"/batches/{_quote(batch_id)}/corrections", req))

    def cancel(self, batch_id: str) -> BatchView:
        """POST /batches/{id}/cancel: no call starts after it; the run ends cancelled."""
        return cast(BatchView, self.request("POST", f"/batches/{_quote(batch_id)}/cancel"))

    def pause(self, batch_id: str) -> BatchView:
        """POST /batches/{id}/pause: no item starts until unpause()."""
        return cast(BatchView, self.request("POST", f"/batches/{_quote(batch_id)}/pause"))

    def unpause(self, batch_id: str) -> BatchView:
        """POST /batches/{id}/unpause: ends the pause, whoever paused it."""
        return cast(BatchView, self.request("POST", f"/batches/{_quote(batch_id)}/unpause"))

    def approve(self, batch_id: str) -> BatchView:
        """POST /batches/{id}/approve: a sampled batch's held items run, each
        at its message's next check (within about 14 s in the 10
        minutes after the estimate, 64 s to the hour, 5 minutes later
        on); the sample's items
        are not run again. Idempotent; APIError 409 conflict
        for a batch with no sample, one rejected, or one whose first run
        ended undecided."""
        return cast(BatchView, self.request("POST", f"/batches/{_quote(batch_id)}/approve"))

    def reject(self, batch_id: str) -> BatchView:
        """POST /batches/{id}/reject: a sampled batch's run is cancelled, its
        held items ending cancelled, never called. Idempotent; APIError 409
        conflict for a batch with no sample, one approved (cancel() it
        instead while its first run runs), or one whose first run ended
        undecided."""
        return cast(BatchView, self.request("POST", f"/batches/{_quote(batch_id)}/reject"))

    def set_budget(self, batch_id: str, usd: float) -> BatchView:
        """POST /batches/{id}/budget: the batch's budget in US dollars (> 0).
        Above the run's spend, a batch paused at its budget resumes at the
        pause's next check; at or below it, APIError 409 conflict (the
        batch stays as it is). unpause() does not end a budget pause."""
        return cast(BatchView, self.request("POST", f"/batches/{_quote(batch_id)}/budget", {"budget_usd": usd}))

    def set_ceilings(self, batch_id: str, ceilings: Ceilings) -> CeilingsResult:
        """POST /batches/{id}/ceilings: sets the per-item ceilings named
        (spend_usd, tokens; each > 0, the others kept) and wakes every item
        exhausted whose run's totals are now under them: each runs exactly
        once more. done False asks for another call (the rest is left)."""
        return cast(CeilingsResult, self.request("POST", f"/batches/{_quote(batch_id)}/ceilings", dict(ceilings)))

    def signal(self, batch_id: str, key: str, payload: Any = None, *, token: str | None = None) -> dict[str, Any]:
        """POST /batches/{id}/items/{key}/signal: the suspended item runs
        once more, its next attempt given payload (any JSON value, at most
        4 KiB; None: none). token, when given, must be the token its
        suspension returned. Answers {"key", "woken", "by"}: woken False
        when it was woken already (by "signal", "timer", ...); APIError
        409 when it is not suspended. Each call names its signal with an
        id of its own (signal_id), which its retries keep: a retry after a
        lost answer is answered as delivered, never delivered to a later
        suspension."""
        body: dict[str, Any] = {"signal_id": secrets.token_hex(16)}
        if payload is not None:
            body["payload"] = payload
        if token:
            body["token"] = token
        path = f"/batches/{_quote(batch_id)}/items/{_quote(key)}/signal"
        return cast(dict[str, Any], self.request("POST", path, body))

    def resume(self, batch_id: str) -> BatchView:
        """POST /batches/{id}/resume: a new run of what did not succeed."""
        return cast(BatchView, self.request("POST", f"/batches/{_quote(batch_id)}/resume"))

    def forget(self, batch_id: str) -> None:
        """DELETE /batches/{id}: the batch and everything it owns, gone."""
        self.request("DELETE", "/batches/" + _quote(batch_id))

    # -- S3 ------------------------------------------------------------

    def _bucket(self) -> str:
        if not self.bucket:
            raise StackError("no stack bucket (the BucketName output): build the client with from_stack or give bucket")
        return self.bucket

    def _s3_client(self) -> Any:
        if self._s3 is None:
            cfg = Config(s3={"addressing_style": "path"}) if os.environ.get("AWS_ENDPOINT_URL") else None
            self._s3 = self._session.create_client("s3", region_name=self._region, config=cfg)
        return self._s3


class ItemIterator(Iterator[Item]):
    """Items page after page; cursor is where a later iter_items resumes
    (the next_cursor of the last page read whole; None at the start), and
    done is True once the last page was read."""

    def __init__(self, client: Client, batch_id: str, outcome: str, cursor: str | None, limit: int | None) -> None:
        self._client, self._id, self._outcome, self._limit = client, batch_id, outcome, limit
        self.cursor = cursor
        self.done = False
        self._page: list[Item] = []
        self._next: str | None = cursor

    def __iter__(self) -> ItemIterator:
        return self

    def __next__(self) -> Item:
        while not self._page:
            if self.done:
                raise StopIteration
            self.cursor = self._next
            page = self._client.items(self._id, self._outcome, limit=self._limit, cursor=self._next)
            self._page = list(page.get("items") or [])
            self._next = page.get("next_cursor")
            if not self._next:
                self.done = True
        item = self._page.pop(0)
        if not self._page:
            self.cursor = self._next
        return item


def _csv_header_len(b: bytes) -> int:
    """The length of the head of the CSV text b: a first line "sep=X" when
    there is one, then the first record, its line feed included (up to the
    first line feed outside quotes, RFC 4180), or all of b."""
    start = 0
    if b.startswith(b"sep="):
        nl = b.find(b"\n")
        if nl < 0:
            return len(b)
        start = nl + 1
    quoted = False
    for i in range(start, len(b)):
        c = b[i]
        if c == 0x22:
            quoted = not quoted
        elif c == 0x0A and not quoted:
            return i + 1
    return len(b)


def _answer(status: int, data: bytes) -> Any:
    if status // 100 != 2:
        try:
            body = json.loads(data)
            if not isinstance(body, dict) or not body.get("code"):
                raise ValueError
        except ValueError:
            body = {"code": f"http_{status}", "message": data.decode(errors="replace").strip()}
        raise APIError(status, cast(Error, body))
    return json.loads(data) if data.strip() else None


def retryable(err: BaseException) -> bool:
    """Whether a call that failed with err may be sent again with the same
    request: answers 429, 500, 502, 503, 504, and errors that got no answer
    (a refused or reset connection, a timeout). Not 507, nor another 4xx."""
    if isinstance(err, APIError):
        return err.status in RETRY_STATUSES
    return isinstance(err, (OSError, ConnectionError))


def _movement(v: BatchView) -> str:
    c: Any = v.get("census") or {}
    p: Any = v.get("progress") or {}
    return json.dumps([v.get("status"), v.get("run"), v.get("stop"), p, c and [c.get(k) for k in ("succeeded", "failed", "quarantined", "cancelled", "in_flight", "pending")]])


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_batch_id() -> str:
    """A new batch id: a ULID (26 characters, time-ordered), the id the API
    gives a batch submitted without one."""
    n = (int(time.time() * 1000) << 80) | random.SystemRandom().getrandbits(80)
    return "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in reversed(range(26)))
