"""Unit tests of the client: no emulator. A loopback stand-in answers
with shared/wire's golden answers; every request and answer is checked
against docs/openapi.yaml (conftest.StandIn)."""

from __future__ import annotations

import io
import json
import re
from typing import Any, cast

import botocore.session
import pytest
from botocore.response import StreamingBody
from jsonschema import ValidationError

from bulkrun import APIError, Client, api_base, new_batch_id, retryable
from bulkrun.client import _quote

from .conftest import Answer, StandIn
from .contract import EVENT_EXAMPLES, EVENT_SCHEMA, OpenAPI, event_validator, golden


def test_requests_are_signed_for_execute_api(client: Client, stand_in: StandIn) -> None:
    stand_in.answer = lambda m, p, b: (200, golden("batch-view"), {})
    client.status("photos-2026-11-30")
    auth = stand_in.requests[0].headers["Authorization"]
    assert re.match(r"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/\d{8}/eu-west-1/execute-api/aws4_request, SignedHeaders=\S*host\S*, Signature=[0-9a-f]{64}$", auth), auth
    assert "X-Amz-Date" in stand_in.requests[0].headers


def test_golden_answers_follow_the_contract(contract: OpenAPI) -> None:
    # The answers the unit tests stand in with are themselves the contract's.
    for name, schema in [("batch-view", "BatchView"), ("item-page", "ItemPage"), ("batch-page", "BatchPage"), ("report", "Report"),
                         ("report-link", "ReportLink"), ("error", "Error"), ("correction-view", "CorrectionView"),
                         ("result-line", "ResultLine"), ("submit-request", "SubmitRequest"), ("correct-request", "CorrectRequest")]:
        contract.check_schema(schema, golden(name))


def test_submit_sends_the_contract_request_and_retries_the_same_batch(client: Client, stand_in: StandIn) -> None:
    tries: list[Any] = []

    def answer(m: str, p: str, b: Any) -> Answer:
        tries.append(b)
        if len(tries) < 3:
            return 500, {"code": "internal", "message": "try again"}, {}
        v = golden("batch-view")
        v["batch_id"] = b["batch_id"]
        return 201, v, {}

    stand_in.answer = answer
    v = client.submit("enrich", items=[{"key": "a", "text": "hi"}], key_field="key",
                      threshold={"tolerated_failure_percent": 5}, retry={"interval_seconds": 1, "backoff_rate": 2, "max_delay_seconds": 5, "jitter": 0})
    assert len(tries) == 3 and len({t["batch_id"] for t in tries}) == 1, tries
    assert v["batch_id"] == tries[0]["batch_id"] and len(v["batch_id"]) == 26
    assert tries[0]["source"] == {"items": [{"key": "a", "text": "hi"}]} and tries[0]["key_field"] == "key"


def test_submit_sends_a_sample_and_reads_its_approval(client: Client, stand_in: StandIn, contract: OpenAPI) -> None:
    stand_in.answer = lambda m, p, b: (201, dict(golden("batch-view"), batch_id=b["batch_id"]), {})
    v = client.submit("enrich", object="s3://bkt/in/orders.jsonl", batch_id="orders", sample=200, auto_approve_usd=40)
    body = stand_in.requests[0].body
    assert (body["sample"], body["auto_approve_usd"]) == (200, 40)
    assert (v["sample"], v["auto_approve_usd"]) == (200, 40)
    a = v["approval"]
    assert (a["state"], a["sample"], a.get("decided_by")) == ("approved", 200, "caller")
    est = a["estimate"]
    assert (est["items"], est["sample_items"], est["cost_usd"], est["failure_low"], est["failure_high"]) == (3000, 200, 0.84, 0.005, 0.043)
    # The contract's bounds: 1–100,000 items; auto_approve_usd > 0.
    req = {"pipeline": "enrich", "source": {"object": "s3://bkt/in/orders.jsonl"}}
    contract.check_schema("SubmitRequest", dict(req, sample=100000, auto_approve_usd=0.01))
    for bad in ({"sample": 100001}, {"sample": -1}, {"sample": 10, "auto_approve_usd": 0}):
        with pytest.raises(ValidationError):
            contract.check_schema("SubmitRequest", dict(req, **bad))


def test_approve_and_reject_post_to_their_routes(client: Client, stand_in: StandIn) -> None:
    stand_in.answer = lambda m, p, b: (202, golden("batch-view"), {})
    assert client.approve("photos-2026-11-30")["approval"]["state"] == "approved"
    client.reject("photos-2026-12-01")
    assert [(r.method, r.path, r.body) for r in stand_in.requests] == [
        ("POST", "/batches/photos-2026-11-30/approve", None), ("POST", "/batches/photos-2026-12-01/reject", None)]
    stand_in.answer = lambda m, p, b: (409, {"code": "conflict", "message": "reject photos-2026-11-30: approved already (by caller); cancel it instead"}, {})
    with pytest.raises(APIError) as e:
        client.reject("photos-2026-11-30")
    assert e.value.status == 409 and e.value.code == "conflict" and not retryable(e.value)


def test_submit_does_not_retry_a_refusal(client: Client, stand_in: StandIn) -> None:
    stand_in.answer = lambda m, p, b: (400, golden("error"), {})
    with pytest.raises(APIError) as e:
        client.submit("enrich", object="s3://bkt/in/orders.jsonl", batch_id="orders")
    assert e.value.status == 400 and e.value.code == golden("error")["code"] and len(stand_in.requests) == 1


def test_submit_needs_one_source(client: Client) -> None:
    with pytest.raises(ValueError):
        client.submit("enrich", items=[], object="s3://b/k")
    with pytest.raises(ValueError):
        client.submit("enrich")


def test_wait_calls_progress_and_backs_off_while_nothing_moves(client: Client, stand_in: StandIn) -> None:
    base = golden("batch-view")
    views: list[dict[str, Any]] = []
    for status, n in [("submitting", 0), ("running", 1), ("running", 1), ("running", 1), ("running", 2), ("completed", 3)]:
        v: dict[str, Any] = dict(base, status=status)
        v.pop("pause", None)
        v.pop("stop", None)
        v["progress"] = {"done": n, "failures": 0}
        views.append(v)
    calls = iter(views)
    stand_in.answer = lambda m, p, b: (200, next(calls), {})
    pauses: list[float] = []
    client.sleep = pauses.append
    seen: list[str] = []
    done = client.wait("photos-2026-11-30", interval=0.5, progress=lambda v: seen.append(v["status"]))
    assert done["status"] == "completed" and seen == ["submitting", "running", "running", "running", "running", "completed"]
    assert pauses == [0.5, 0.5, 1.0, 2.0, 0.5], pauses


def test_wait_times_out(client: Client, stand_in: StandIn) -> None:
    stand_in.answer = lambda m, p, b: (200, dict(golden("batch-view"), status="running"), {})
    with pytest.raises(TimeoutError):
        client.wait("b", interval=10, timeout=1)


def test_items_page_and_resume(client: Client, stand_in: StandIn) -> None:
    item = golden("item-page")["items"][0]
    pages = {None: ["k1", "k2"], "c1": ["k3"], "c2": ["k4", "k5"]}
    nxt = {None: "c1", "c1": "c2", "c2": None}

    def answer(m: str, p: str, b: Any) -> Answer:
        q = dict(x.split("=", 1) for x in p.split("?", 1)[1].split("&"))
        cur = q.get("cursor")
        page: dict[str, Any] = {"items": [dict(item, key=k) for k in pages[cur]]}
        if nxt[cur]:
            page["next_cursor"] = nxt[cur]
        return 200, page, {}

    stand_in.answer = answer
    it = client.iter_items("b1", "quarantined", limit=2)
    first = [next(it)["key"] for _ in range(2)]
    assert first == ["k1", "k2"] and it.cursor == "c1" and not it.done
    rest = [i["key"] for i in client.iter_items("b1", "quarantined", cursor=it.cursor)]
    assert rest == ["k3", "k4", "k5"]
    assert "outcome=quarantined" in stand_in.requests[0].path and "limit=2" in stand_in.requests[0].path


def test_partial_results_follow_every_page(client: Client, stand_in: StandIn) -> None:
    page = golden("result-page")
    line = page["lines"][0]
    pages = {None: ["k1", "k2"], "c1": [], "c2": ["k3"]}
    nxt = {None: "c1", "c1": "c2", "c2": None}

    def answer(m: str, p: str, b: Any) -> Answer:
        q = dict(x.split("=", 1) for x in p.split("?", 1)[1].split("&")) if "?" in p else {}
        cur = q.get("cursor")
        out: dict[str, Any] = dict(page, lines=[dict(line, key=k) for k in pages[cur]])
        out.pop("next_cursor")
        if nxt[cur]:
            out["next_cursor"] = nxt[cur]
        return 200, out, {}

    stand_in.answer = answer
    keys = [ln["key"] for ln in client.partial_results("photos-2026-11-30", limit=2)]
    assert keys == ["k1", "k2", "k3"]
    assert [r.path for r in stand_in.requests] == [
        "/batches/photos-2026-11-30/results/partial?limit=2",
        "/batches/photos-2026-11-30/results/partial?limit=2&cursor=c1",
        "/batches/photos-2026-11-30/results/partial?limit=2&cursor=c2",
    ]
    assert client.partial_results_page("photos-2026-11-30")["order"] == "key"


def test_keys_and_ids_are_one_path_segment(client: Client, stand_in: StandIn) -> None:
    assert _quote("a/b") == "a%2Fb" and _quote("100%") == "100%25" and _quote("..") == "%2E%2E" and _quote("é x") == "%C3%A9%20x"
    stand_in.answer = lambda m, p, b: (202, golden("batch-view"), {})
    client.pause("photos-2026-11-30")
    client.unpause("photos-2026-11-30")
    client.cancel("photos-2026-11-30")
    assert [r.path for r in stand_in.requests] == ["/batches/photos-2026-11-30/pause", "/batches/photos-2026-11-30/unpause", "/batches/photos-2026-11-30/cancel"]


def test_set_budget_posts_the_dollars(client: Client, stand_in: StandIn) -> None:
    stand_in.answer = lambda m, p, b: (202, golden("batch-view"), {})
    assert client.set_budget("photos-2026-11-30", 40.5)["budget_usd"] == 25
    r = stand_in.requests[-1]
    assert (r.method, r.path, r.body) == ("POST", "/batches/photos-2026-11-30/budget", {"budget_usd": 40.5})


def test_set_ceilings_posts_them(client: Client, stand_in: StandIn) -> None:
    answer = {"ceilings": {"spend_usd": 2}, "woken": 50, "already_woken": 0, "still_exhausted": 0, "done": True}
    stand_in.answer = lambda m, p, b: (200, answer, {})
    assert client.set_ceilings("photos-2026-11-30", {"spend_usd": 2})["woken"] == 50
    r = stand_in.requests[-1]
    assert (r.method, r.path, r.body) == ("POST", "/batches/photos-2026-11-30/ceilings", {"spend_usd": 2})


def test_signal_posts_the_payload(client: Client, stand_in: StandIn) -> None:
    stand_in.answer = lambda m, p, b: (200, {"key": "a/b", "woken": True}, {})
    assert client.signal("b1", "a/b", {"approved": True}, token="t-1")["woken"] is True
    r = stand_in.requests[-1]
    sid = r.body.pop("signal_id")
    assert len(sid) == 32 and all(c in "0123456789abcdef" for c in sid)
    assert (r.method, r.path, r.body) == ("POST", "/batches/b1/items/a%2Fb/signal", {"payload": {"approved": True}, "token": "t-1"})


def test_report_follows_its_link_unsigned(client: Client, stand_in: StandIn) -> None:
    report = golden("report")

    def answer(m: str, p: str, b: Any) -> Answer:
        if p.startswith("/batches/"):
            link = dict(golden("report-link"), report_url=stand_in.url.removesuffix("/v1") + "/presigned/report.json?X-Amz-Signature=abc")
            return 303, link, {"Location": link["report_url"]}
        return 200, report, {}

    stand_in.answer = answer
    stand_in.contract = _Passthrough(stand_in.contract)  # the presigned GET is S3's, not the API's
    assert client.report("photos-2026-11-30") == report
    assert "Authorization" not in stand_in.requests[1].headers


class _Passthrough(OpenAPI):
    """The contract, but requests outside /batches are S3's."""

    def __init__(self, inner: OpenAPI) -> None:
        self.__dict__.update(inner.__dict__)

    def check_request(self, method: str, path: str, body: Any) -> None:
        if path.startswith("/batches"):
            super().check_request(method, path, body)

    def check_answer(self, method: str, path: str, status: int, body: Any) -> None:
        if path.startswith("/batches"):
            super().check_answer(method, path, status, body)


def test_results_reads_the_reports_files(client: Client, stand_in: StandIn) -> None:
    report = golden("report")
    stand_in.answer = lambda m, p, b: (200, report, {})
    line = golden("result-line")
    read: list[tuple[str, str]] = []

    class FakeS3:
        def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
            read.append((Bucket, Key))
            data = (json.dumps(line) + "\n" + json.dumps(dict(line, key="z")) + "\n").encode()
            return {"Body": StreamingBody(io.BytesIO(data), len(data))}

    client._s3 = FakeS3()
    lines = list(client.results("photos-2026-11-30", ["failed", "succeeded"]))
    files = report["results"]["files"]
    want = [o for o in ("failed", "succeeded") if o in files]
    assert len(lines) == 2 * len(want) and lines[0] == line and lines[1]["key"] == "z"
    assert [f"s3://{b}/{k}" for b, k in read] == [files[o]["uri"] for o in want]


def test_correct_sends_the_contract_request(client: Client, stand_in: StandIn) -> None:
    stand_in.answer = lambda m, p, b: (202, golden("correction-view"), {})
    v = client.correct("photos-2026-11-30", items=[{"key": "c", "text": "fixed"}], key_field="key")
    assert v["revision"] == golden("correction-view")["revision"]
    assert stand_in.requests[0].body == {"source": {"items": [{"key": "c", "text": "fixed"}]}, "key_field": "key"}


def test_errors_carry_the_code(client: Client, stand_in: StandIn) -> None:
    stand_in.answer = lambda m, p, b: (404, {"code": "not_found", "message": "batch nope: not found"}, {})
    with pytest.raises(APIError) as e:
        client.status("nope")
    assert e.value.code == "not_found" and not retryable(e.value)
    assert str(e.value) == "HTTP 404 not_found: batch nope"  # the code said once
    assert str(APIError(409, {"code": "conflict", "message": "approve b1: rejected already: conflict"})) == "HTTP 409 conflict: approve b1: rejected already"
    assert retryable(APIError(503, {"code": "internal", "message": ""})) and not retryable(APIError(507, {"code": "insufficient_storage", "message": ""}))


def test_api_base_as_the_go_client(monkeypatch: pytest.MonkeyPatch) -> None:
    outs = {"ApiId": "a1b2c3", "ApiStage": "v1", "ApiUrl": "https://a1b2c3.execute-api.eu-west-1.amazonaws.com/v1/"}
    for k in ("BULKRUN_API_URL", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(k, raising=False)
    assert api_base(outs) == "https://a1b2c3.execute-api.eu-west-1.amazonaws.com/v1"
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://localhost:4566/")
    assert api_base(outs) == "http://localhost:4566/restapis/a1b2c3/v1/_user_request_"
    monkeypatch.setenv("BULKRUN_API_URL", "https://bulkrun.example.internal/")
    assert api_base(outs) == "https://bulkrun.example.internal"


def test_new_batch_ids_are_ulids() -> None:
    ids = {new_batch_id() for _ in range(100)}
    assert len(ids) == 100 and all(re.fullmatch(r"[0-9A-HJKMNP-TV-Z]{26}", i) for i in ids)


def test_event_examples_follow_the_event_schema() -> None:
    v = event_validator()
    examples = json.loads(EVENT_EXAMPLES.read_text())
    for ex in examples:
        v.validate(ex)
    # An example of every change the schema names, and of no other.
    changes = set(json.loads(EVENT_SCHEMA.read_text())["properties"]["change"]["enum"])
    assert {"submitted", "running", "paused", "unpaused", "finished", "refused", "awaiting_approval", "approved"} <= changes
    assert {e["change"] for e in examples} == changes
    assert not v.is_valid(dict(examples[0], undocumented=1))


def test_client_needs_credentials(stand_in: StandIn, session: botocore.session.Session, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    c = Client(stand_in.url, session=botocore.session.Session())
    with pytest.raises(Exception, match="credentials"):
        c.status("b")


def test_inputs_join_the_pages_in_the_sources_format(client: Client, stand_in: StandIn) -> None:
    # Three CSV pages with ";" and quoted cells: the file holds the header
    # once; the count and cursor come from the headers.
    pages = {None: b'id;name\na;"Al; ""x"""\n', "c1": b"id;name\n", "c2": b"id;name\nb;Bo\n"}
    nxt = {None: "c1", "c1": "c2", "c2": None}

    def answer(m: str, p: str, b: Any) -> Answer:
        q = dict(x.split("=", 1) for x in p.split("?", 1)[1].split("&"))
        cur = q.get("cursor")
        h = {"Content-Type": "text/csv; charset=utf-8; header=present", "Bulkrun-Input-Count": str(pages[cur].count(b"\n") - 1)}
        if nxt[cur]:
            h["Bulkrun-Next-Cursor"] = cast(str, nxt[cur])
        return 200, pages[cur], h

    stand_in.answer = answer
    first = client.inputs_page("b1", limit=1)
    assert first == {"format": "csv", "body": pages[None], "count": 1, "next_cursor": "c1"}
    assert client.inputs("b1", limit=1) == b'id;name\na;"Al; ""x"""\nb;Bo\n'
    assert "outcome=failed" in stand_in.requests[0].path and "limit=1" in stand_in.requests[0].path
    assert [r.path.split("cursor=")[-1] for r in stand_in.requests[2:4]] == ["c1", "c2"]


def test_inputs_json_lines_and_refusals(client: Client, stand_in: StandIn) -> None:
    stand_in.answer = lambda m, p, b: (200, b'{"id":"a"}\n', {"Content-Type": "application/x-ndjson", "Bulkrun-Input-Count": "1"})
    assert client.inputs_page("b1", "quarantined") == {"format": "jsonl", "body": b'{"id":"a"}\n', "count": 1, "next_cursor": None}
    assert client.inputs("b1") == b'{"id":"a"}\n'
    stand_in.answer = lambda m, p, b: (400, {"code": "invalid_request", "message": "outcome: bad", "field": "outcome"}, {})
    with pytest.raises(APIError) as e:
        client.inputs_page("b1", "withheld")
    assert e.value.status == 400 and e.value.body.get("field") == "outcome"
    stand_in.answer = lambda m, p, b: (200, b"id\nx\n", {"Content-Type": "text/csv", "Bulkrun-Input-Count": "1", "Bulkrun-Next-Cursor": "c"}) if "cursor" not in p else (
        200, b"other\ny\n", {"Content-Type": "text/csv", "Bulkrun-Input-Count": "1"})
    with pytest.raises(ValueError):
        client.inputs("b1")
    # A delimiter a reader would not detect: the sep= line stays once, with the header.
    stand_in.answer = lambda m, p, b: (200, b"sep=|\nid|n\nx|1\n", {"Content-Type": "text/csv", "Bulkrun-Input-Count": "1", "Bulkrun-Next-Cursor": "c"}) if "cursor" not in p else (
        200, b"sep=|\nid|n\ny|2\n", {"Content-Type": "text/csv", "Bulkrun-Input-Count": "1"})
    assert client.inputs("b1") == b"sep=|\nid|n\nx|1\ny|2\n"
