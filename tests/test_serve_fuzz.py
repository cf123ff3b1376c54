"""Fuzz the HTTP API from its own /openapi.json: every documented operation, with path and
query values and bodies drawn by hypothesis (well-formed per the schema, or not), against a
real `flowctl serve` process, serving a SQLite file and then a PostgreSQL database. No answer may be a 500, carry a traceback, or fall outside the
statuses the document lists for the operation; every refusal is a one-line JSON `{error}`.

FLOWCTL_API_FUZZ_EXAMPLES sets the number of requests (default 300); FLOWCTL_API_FUZZ_TALLY
names a file that gets one JSON line per request (operation, status), for the figures.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.serve_helpers import TOKEN, Api, port_of, start_serve

pytestmark = pytest.mark.crash  # a real server process

EXAMPLES = int(os.environ.get("FLOWCTL_API_FUZZ_EXAMPLES", "300"))
TALLY = os.environ.get("FLOWCTL_API_FUZZ_TALLY")

FLOWS = """\
from flowctl import workflow

@workflow(secret_inputs=["token"])
def followup(ctx, user: str = "u", token: str = ""):
    return ctx.wait_signal("replied", timeout="7d")
"""


class Target:
    def __init__(self, api: Api, doc: dict[str, Any], run_id: str, project: Path) -> None:
        self.api = api
        self.doc = doc
        self.run_id = run_id
        self.project = project
        self.operations = sorted(
            (path, method, op) for path, ops in doc["paths"].items() for method, op in ops.items()
        )


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served_db(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The database served, once per store: a SQLite file, or a fresh PostgreSQL database
    (skipped without a server: tests/pg.py). PostgreSQL refuses what SQLite keeps (a NUL
    in text or JSON, tests/test_nul_values.py): that must be a 400, not a 500."""
    if request.param == "sqlite":
        yield str(tmp_path_factory.mktemp("fuzzdb") / "f.db")
        return
    from tests.pg import fresh_database

    with fresh_database() as url:
        yield url


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory, served_db: str) -> Iterator[Target]:
    project = tmp_path_factory.mktemp("fuzz")
    (project / "flows.py").write_text(FLOWS)
    proc, log = start_serve(project, served_db)
    try:
        api = Api(port_of(proc, log))
        doc = api.call("GET", "/openapi.json").json()
        made = api.call(
            "POST",
            "/runs",
            {"target": "flows.py:followup", "input": {"token": "s3cret"}, "key": "k"},
        )
        assert made.status == 201, made.body
        yield Target(api, doc, made.json()["id"], project)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log.read_text()
    assert "Traceback" not in text and "Internal" not in text, text[-2000:]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
durations = (
    st.sampled_from(
        [
            "15m",
            "1s",
            "0s",
            "-5m",
            "7d",
            "99999999999d",
            "2026-12-01T09:00Z",
            "now",
            "1h30m",
            "",
            "soon",
        ]
    )
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
)


def _start_bodies() -> st.SearchStrategy[Any]:
    fields = {
        "target": st.sampled_from(
            [
                "flows.py:followup",
                "followup",
                "os:system",
                "../x.py:f",
                "/etc/x.yaml",
                "flows.py",
                "nope.yaml",
                "",
            ]
        )
        | st.text(max_size=20),
        "input": st.dictionaries(st.sampled_from(["user", "token", "x"]), json_values, max_size=3)
        | json_values,
        "key": st.text(max_size=12) | json_values,
        "in": durations,
        "at": durations,
        "deadline": durations,
        "timeout": durations,
        "max_attempts": st.integers(-5, 2**65) | json_values,
        "bogus": json_values,
    }
    return st.fixed_dictionaries({}, optional=fields)  # type: ignore[arg-type]


def _path_value(target: Target, name: str) -> st.SearchStrategy[str]:
    if name == "id":
        return st.sampled_from([target.run_id, target.run_id[:6], "no-such-run"]) | st.text(
            max_size=20
        )
    return st.sampled_from(["replied", "_reserved", "x"]) | st.text(max_size=20)


def _query_value(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    if schema.get("type") == "integer":
        return st.integers(-(2**66), 2**66).map(str) | st.text(max_size=8)
    return st.sampled_from(["queued", "dead,completed", "bogus", "followup", "k", ""]) | st.text(
        max_size=12
    )


@st.composite
def requests(draw: st.DrawFn, target: Target) -> tuple[str, str, str, bytes | None, Any]:
    path, method, op = draw(st.sampled_from(target.operations))
    url = path
    query: dict[str, str] = {}
    for p in op.get("parameters", []):
        if p["in"] == "path":
            url = url.replace(
                "{" + p["name"] + "}", quote(draw(_path_value(target, p["name"])), safe="")
            )
        elif p.get("required") or draw(st.booleans()):
            query[p["name"]] = draw(_query_value(p.get("schema", {})))
    if draw(st.integers(0, 9)) == 0:
        query[draw(st.text(min_size=1, max_size=6))] = "1"
    if query:
        url += "?" + urlencode(query)
    body: bytes | None = None
    if "requestBody" in op:
        shape = draw(st.integers(0, 3))
        if path == "/runs" and shape < 2:
            body = json.dumps(draw(_start_bodies())).encode()
        elif shape < 3:
            body = json.dumps(draw(json_values)).encode()
        else:
            body = draw(st.binary(max_size=40))
    token = draw(st.sampled_from([True, True, True, True, None, "wrong-token-0123456789"]))
    return path, method, url, body, token


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_no_request_from_the_document_gets_a_500_or_a_traceback(
    target: Target, data: st.DataObject
) -> None:
    path, method, url, body, token = data.draw(requests(target))
    reply = target.api.call(method.upper(), url, raw=body, token=token)
    op = target.doc["paths"][path][method]
    if TALLY:
        with open(TALLY, "a") as f:
            f.write(json.dumps({"op": op["operationId"], "status": reply.status}) + "\n")
    shown = f"{method.upper()} {url} -> {reply.status} {reply.body[:300]!r}"
    assert reply.status != 500, shown
    assert b"Traceback" not in reply.body, shown
    assert TOKEN.encode() not in reply.body and b"s3cret" not in reply.body, shown
    # An unroutable path (a drawn id containing nothing, say) is a JSON 404 too.
    assert str(reply.status) in op["responses"] or reply.status in (404, 405), shown
    if reply.status >= 400:
        error = json.loads(reply.body)["error"]
        assert isinstance(error, str) and error and "\n" not in error, shown
