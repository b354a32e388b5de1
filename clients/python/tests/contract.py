"""The contract the client is held to: docs/openapi.yaml, and the JSON
Schema of the Batch State Change event.

OpenAPI 3.1's schemas are JSON Schema 2020-12, so each request body the
client sends and each answer it parses is validated by the jsonschema
package against the operation's schema in the document, its $refs
resolved in the document itself (referencing).
"""

from __future__ import annotations

import json
import pathlib
import re
import urllib.parse
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

ROOT = pathlib.Path(__file__).resolve().parents[3]
OPENAPI = ROOT / "docs" / "openapi.yaml"
GOLDEN = ROOT / "shared" / "wire" / "testdata"
EVENT_SCHEMA = ROOT / "docs" / "events" / "batch-state-change.schema.json"
EVENT_EXAMPLES = ROOT / "docs" / "events" / "batch-state-change.v1.examples.json"

_URI = "urn:bulkrun:openapi"


def golden(name: str) -> Any:
    """A golden answer of shared/wire/testdata (NAME.golden.json)."""
    return json.loads((GOLDEN / f"{name}.golden.json").read_text())


def _pointer(*parts: str) -> str:
    return "#/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


class OpenAPI:
    """docs/openapi.yaml, for checking requests and answers."""

    def __init__(self) -> None:
        self.doc = yaml.safe_load(OPENAPI.read_text())
        self.registry: Registry[Any] = Registry().with_resource(_URI, Resource.from_contents(self.doc, default_specification=DRAFT202012))
        self.routes = []
        for template, ops in self.doc["paths"].items():
            rx = "^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$"
            self.routes.append((re.compile(rx), template, ops))

    def _validator(self, pointer: str) -> Draft202012Validator:
        return Draft202012Validator({"$ref": _URI + pointer}, registry=self.registry)

    def operation(self, method: str, path: str) -> tuple[str, dict[str, Any]]:
        """The path template and operation of a request (its path under the
        API base, query included). Raises AssertionError for none."""
        bare = urllib.parse.urlsplit(path).path
        for rx, template, ops in self.routes:
            if rx.match(bare) and method.lower() in ops:
                return template, ops[method.lower()]
        raise AssertionError(f"{method} {path}: no operation in docs/openapi.yaml")

    def check_request(self, method: str, path: str, body: Any) -> None:
        """Validate a request's JSON body (None: none) and its query
        parameters' names against its operation."""
        template, op = self.operation(method, path)
        names = {p["name"] for p in op.get("parameters", []) if "name" in p}
        for name in urllib.parse.parse_qs(urllib.parse.urlsplit(path).query):
            assert name in names, f"{method} {template}: query parameter {name!r} is not in the contract"
        if body is None:
            assert not op.get("requestBody", {}).get("required"), f"{method} {template}: the contract requires a body"
            return
        ptr = _pointer("paths", template, method.lower(), "requestBody", "content", "application/json", "schema")
        self._validator(ptr).validate(body)

    def check_answer(self, method: str, path: str, status: int, body: Any) -> None:
        """Validate an answer (status, JSON body or None) against its operation."""
        template, op = self.operation(method, path)
        responses = op["responses"]
        assert str(status) in responses, f"{method} {template}: status {status} is not in the contract"
        resp = responses[str(status)]
        base = ["paths", template, method.lower(), "responses", str(status)]
        if "$ref" in resp:
            name = resp["$ref"].rsplit("/", 1)[1]
            resp = self.doc["components"]["responses"][name]
            base = ["components", "responses", name]
        if "content" not in resp:
            assert body is None, f"{method} {template} {status}: the contract has no body, got one"
            return
        if isinstance(body, bytes):  # a body that is not JSON: its media type is in the contract
            assert any(not t.startswith("application/json") for t in resp["content"]), f"{method} {template} {status}: the contract answers JSON only"
            return
        self._validator(_pointer(*base, "content", "application/json", "schema")).validate(body)

    def check_schema(self, name: str, value: Any) -> None:
        """Validate value against components/schemas/name."""
        self._validator(_pointer("components", "schemas", name)).validate(value)


def event_validator() -> Draft202012Validator:
    """The Batch State Change schema, every object that lists properties
    closed to others (as the Go test holds bulkrun's events to it)."""
    schema = json.loads(EVENT_SCHEMA.read_text())

    def strict(v: Any) -> None:
        if isinstance(v, dict):
            if "properties" in v and "additionalProperties" not in v:
                v["additionalProperties"] = False
            for k, c in v.items():
                if k not in ("if", "then", "else"):
                    strict(c)
        elif isinstance(v, list):
            for c in v:
                strict(c)

    strict(schema)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
