"""The client against the stack deployed on the emulator (make deploy, or
what make test left deployed): every call through botocore's SigV4 to the
real API, each request and answer checked against docs/openapi.yaml.
Skipped without AWS_ENDPOINT_URL, failed under CI=true then."""

from __future__ import annotations

import json
import os
import pathlib
import secrets
from typing import Any

import pytest

from bulkrun import APIError, Client

from .contract import OpenAPI

pytestmark = pytest.mark.emulator

STACK = os.environ.get("BULKRUN_STACK", "bulkrun")


@pytest.fixture(scope="module")
def live(contract: OpenAPI) -> Client:
    if not os.environ.get("AWS_ENDPOINT_URL"):
        if os.environ.get("CI") == "true":
            pytest.fail("AWS_ENDPOINT_URL is not set; under CI=true the emulator tests must run (make python-test)")
        pytest.skip("AWS_ENDPOINT_URL is not set (start the emulator and deploy: make deploy)")
    c = Client.from_stack(STACK)
    send = c._send

    def checked(method: str, path: str, body: Any = None) -> tuple[int, dict[str, str], bytes]:
        contract.check_request(method, path, body)
        status, headers, data = send(method, path, body)
        ct = {k.lower(): v for k, v in headers.items()}.get("content-type", "application/json")
        if ct.startswith("application/json"):
            contract.check_answer(method, path, status, json.loads(data) if data.strip() else None)
        else:  # an answer that is not JSON (GET …/inputs): its media type is in the contract
            contract.check_answer(method, path, status, data)
        return status, headers, data

    c._send = checked  # type: ignore[method-assign]
    return c


def new_id(name: str) -> str:
    return f"py-{name}-{secrets.token_hex(4)}"


def test_submit_wait_items_results_correct(live: Client) -> None:
    bid = new_id("life")
    items = [{"key": "a", "text": "hello big world"}, {"key": "b", "text": "durable bulk runs"}, {"key": "c", "txt": "a typo"}]
    v = live.submit("enrich", items=items, key_field="key", batch_id=bid)
    assert v["batch_id"] == bid and v.get("created") is True
    seen: list[str] = []
    done = live.wait(bid, interval=0.5, timeout=180, progress=lambda v: seen.append(v["status"]))
    assert done["status"] == "completed" and seen[-1] == "completed"
    census = done["census"]
    assert (census["succeeded"], census["failed"]) == (2, 1), census
    # Submitting the same request again answers the same batch.
    again = live.submit("enrich", items=items, key_field="key", batch_id=bid)
    assert again["batch_id"] == bid and again.get("created") is False

    it = live.iter_items(bid, "failed", limit=1)
    failed = list(it)
    assert [i["key"] for i in failed] == ["c"] and it.done
    lines = list(live.results(bid))
    assert sorted((l["key"], l["outcome"]) for l in lines) == [("a", "succeeded"), ("b", "succeeded"), ("c", "failed")]
    assert next(l for l in lines if l["key"] == "a")["output"]["words"] == 3
    # The finished run's partial results are its results lines.
    partial = list(live.partial_results(bid, limit=2))
    assert sorted(partial, key=lambda l: l["key"]) == sorted(lines, key=lambda l: l["key"])

    # The failed item's input, as submitted, edited and handed back.
    page = live.inputs_page(bid, limit=1)
    assert (page["format"], page["count"], page["next_cursor"]) == ("jsonl", 1, None), page
    raw = live.inputs(bid)
    assert raw == b'{"key":"c","txt":"a typo"}\n', raw
    edited = [dict(text="the field name fixed", **{k: v for k, v in json.loads(line).items() if k != "txt"}) for line in raw.splitlines()]
    fix = live.correct(bid, items=edited, key_field="key")
    assert fix["revision"]["revision"] == 2
    done = live.wait(bid, interval=0.5, timeout=180)
    assert done["census"]["succeeded"] == 3 and done["run"] == 2
    assert live.inputs(bid) == b""
    assert live.report(bid)["census"]["succeeded"] == 3
    live.forget(bid)
    with pytest.raises(APIError) as e:
        live.status(bid)
    assert e.value.code == "not_found"


def test_submit_a_file(live: Client, tmp_path: pathlib.Path) -> None:
    f = tmp_path / "texts.jsonl"
    f.write_text('{"key": "x", "text": "one two"}\n{"key": "y", "text": "three"}\n')
    bid = new_id("file")
    v = live.submit_file("enrich", str(f), key_field="key", batch_id=bid)
    assert v["status"] in ("submitting", "running")
    done = live.wait(bid, interval=0.5, timeout=180)
    assert done["status"] == "completed" and done["census"]["succeeded"] == 2
    live.forget(bid)


def test_pause_unpause_cancel(live: Client) -> None:
    bid = new_id("hold")
    live.submit("enrich", items=[{"key": f"k{i:04d}", "text": "w " * (i % 7)} for i in range(300)], key_field="key", batch_id=bid,
                items_per_message=1)
    paused = live.pause(bid)
    if paused["status"] == "running":
        assert paused.get("pause", {}).get("by") == "caller", paused
        assert "pause" not in live.unpause(bid)
    stopped = live.cancel(bid)
    # Stopping: no call starts after it; the items that waited on the
    # pause come back at its next check, so the run's end is not awaited.
    assert stopped["batch_id"] == bid and (stopped.get("stop") == "cancelled" or stopped["status"] in ("cancelled", "completed")), stopped
    with pytest.raises(APIError) as e:
        live.correct(bid, items=[{"key": "nope", "text": "x"}], key_field="key")
    assert e.value.code in ("conflict", "invalid_request")  # 409 while the run stops, 400 once ended (no such key)
