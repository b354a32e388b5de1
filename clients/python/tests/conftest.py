"""Shared fixtures: a loopback stand-in for the API that answers with the
golden answers of shared/wire/testdata, records every signed request and
checks requests and answers against docs/openapi.yaml."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import botocore.session
import pytest

from bulkrun import Client

from .contract import OpenAPI

Answer = tuple[int, Any, dict[str, str]]


class Recorded:
    """One request the stand-in received."""

    def __init__(self, method: str, path: str, headers: dict[str, str], body: Any) -> None:
        self.method, self.path, self.headers, self.body = method, path, headers, body


class StandIn:
    """The stand-in API: answer(method, path, body) decides each answer;
    every request is recorded, and both are checked against the contract."""

    def __init__(self, contract: OpenAPI) -> None:
        self.contract = contract
        self.requests: list[Recorded] = []
        self.answer: Callable[[str, str, Any], Answer] = lambda m, p, b: (404, {"code": "not_found", "message": "no route"}, {})
        self.errors: list[str] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw) if raw else None
                path = self.path.removeprefix("/v1")
                stand_in.requests.append(Recorded(self.command, path, dict(self.headers.items()), body))
                try:
                    stand_in.contract.check_request(self.command, path, body)
                except Exception as e:  # recorded, and the test fails on it
                    stand_in.errors.append(f"request {self.command} {path}: {e}")
                status, answer, headers = stand_in.answer(self.command, path, body)
                try:
                    stand_in.contract.check_answer(self.command, path, status, answer)
                except Exception as e:
                    stand_in.errors.append(f"answer {status} to {self.command} {path}: {e}")
                data = answer if isinstance(answer, bytes) else b"" if answer is None else json.dumps(answer).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if "Content-Type" not in headers:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="session")
def contract() -> OpenAPI:
    return OpenAPI()


@pytest.fixture
def stand_in(contract: OpenAPI) -> Iterator[StandIn]:
    s = StandIn(contract)
    yield s
    s.close()
    assert not s.errors, "\n".join(s.errors)


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> botocore.session.Session:
    """A botocore session with fixed credentials and region, reading no
    profile."""
    for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "BULKRUN_API_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    return botocore.session.Session()


@pytest.fixture
def client(stand_in: StandIn, session: botocore.session.Session) -> Client:
    c = Client(stand_in.url, bucket="example-bucket", session=session, timeout=5)
    c.sleep = lambda s: None
    return c
