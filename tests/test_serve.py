"""`flowctl serve` driven over a real socket: a real server process on an ephemeral port,
serving a SQLite file and a PostgreSQL database (`served_db`, `db`) in turn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from flowctl.serve.app import build_app
from flowctl.serve.openapi import spec
from tests.helpers import query, wait_until
from tests.serve_helpers import ROOT, TOKEN, Api, port_of, start_serve

pytestmark = pytest.mark.crash  # real processes

FLOWS = """\
from flowctl import workflow

@workflow(secret_inputs=["token"])
def followup(ctx, user: str, token: str = ""):
    ctx.sleep("1h")
    return ctx.wait_signal("replied", timeout="7d")
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("project")
    (root / "flows.py").write_text(FLOWS)
    (root / "outside").mkdir()
    return root


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served_db(request: pytest.FixtureRequest, project: Path) -> Iterator[str]:
    """The database the module's server serves, once per store: a SQLite file in the
    project, or a fresh PostgreSQL database (skipped without a server: tests/pg.py)."""
    if request.param == "sqlite":
        yield str(project / "f.db")
        return
    from tests.pg import fresh_database

    with fresh_database() as url:
        yield url


@pytest.fixture(scope="module")
def api(project: Path, served_db: str) -> Iterator[Api]:
    proc, log = start_serve(project, served_db)
    try:
        yield Api(port_of(proc, log))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "Traceback" not in log.read_text()


def rows(db: str) -> tuple[int, int, int]:
    """What a request could have written: runs, signals, timeline events."""
    (runs,) = query(db, "SELECT COUNT(*) FROM runs")[0]
    (signals,) = query(db, "SELECT COUNT(*) FROM signals")[0]
    (events,) = query(db, "SELECT COUNT(*) FROM timeline")[0]
    return runs, signals, events


def start(api: Api, key: str, **extra: object) -> str:
    reply = api.call(
        "POST",
        "/runs",
        {"target": "flows.py:followup", "input": {"user": "42", "token": "s3cret"}, "key": key}
        | extra,
    )
    assert reply.status == 201, reply.body
    created = reply.json()
    assert created["created"] is True
    return str(created["id"])


def test_start_read_signal_by_key_and_cancel(api: Api, served_db: str) -> None:
    assert api.call("GET", "/healthz", token=None).json() == {"ok": True}
    run_id = start(api, "user-42", deadline="30d", max_attempts=2)
    again = api.call("POST", "/runs", {"target": "flows.py:followup", "key": "user-42"})
    assert (again.status, again.json()["id"], again.json()["created"]) == (200, run_id, False)

    listed = api.call("GET", "/runs?status=queued&workflow=followup&limit=10").json()["runs"]
    assert [r["id"] for r in listed] == [run_id]
    shown = api.call("GET", f"/runs/{run_id}").json()
    assert shown["run"]["input"] == {"user": "42", "token": "***"}  # secret masked
    assert shown["run"]["max_attempts"] == 2
    assert [e["type"] for e in shown["timeline"]] == ["created"]
    assert b"s3cret" not in api.call("GET", "/runs?limit=1000").body

    sent = api.call("POST", "/signals/replied?key=user-42", {"text": "thanks"})
    assert (sent.status, sent.json()["id"]) == (202, run_id)
    by_id = api.call("POST", f"/runs/{run_id}/signals/replied", raw=b"")
    assert by_id.status == 202
    signals = query(
        served_db, "SELECT name, payload FROM signals WHERE run_id = ? ORDER BY seq", (run_id,)
    )
    assert [(name, json.loads(payload)) for name, payload in signals] == [
        ("replied", {"text": "thanks"}),
        ("replied", None),
    ]

    paused = api.call("POST", f"/runs/{run_id}/pause")
    assert (paused.status, paused.json()["run"]["status"]) == (200, "paused")
    assert api.call("POST", f"/runs/{run_id}/resume").json()["run"]["status"] == "queued"
    cancelled = api.call("POST", f"/runs/{run_id}/cancel")
    assert (cancelled.status, cancelled.json()["run"]["status"]) == (200, "cancelled")
    redriven = api.call("POST", f"/runs/{run_id}/redrive")
    assert (redriven.status, redriven.json()["run"]["status"]) == (200, "queued")
    assert api.call("POST", f"/runs/{run_id}/cancel").status == 200


def test_cancel_records_the_reason_its_body_gives(api: Api, served_db: str) -> None:
    run_id = start(api, "reasoned-1")
    reply = api.call("POST", f"/runs/{run_id}/cancel", {"reason": "customer replied"})
    assert (reply.status, reply.json()["run"]["status"]) == (200, "cancelled")
    shown = api.call("GET", f"/runs/{run_id}").json()
    assert "customer replied" in json.dumps(shown["timeline"])


def test_every_refusal_is_json_and_writes_nothing(api: Api, served_db: str) -> None:
    done = start(api, "done-1")
    assert api.call("POST", f"/runs/{done}/cancel").status == 200
    live = start(api, "live-1")
    big = b'{"target": "flows.py:followup", "input": {"pad": "' + b"x" * (1024 * 1024) + b'"}}'
    cases = [
        (401, "POST", "/runs", {"target": "flows.py:followup"}, {"token": None}),
        (401, "POST", "/signals/replied?key=live-1", 1, {"token": "wrong-token-0123456789"}),
        (
            401,
            "GET",
            "/runs",
            None,
            {"headers": {"Authorization": f"Basic {TOKEN}"}, "token": None},
        ),
        (401, "GET", "/metrics", None, {"token": None}),
        (401, "GET", "/openapi.json", None, {"token": None}),
        (400, "POST", "/runs", None, {"raw": b"{bad json"}),
        (400, "POST", "/runs", None, {"raw": b"\xff\xfe"}),
        (400, "POST", "/runs", [1, 2], {}),
        (400, "POST", "/runs", {"target": "flows.py:followup", "bogus": 1}, {}),
        (400, "POST", "/runs", {"target": "flows.py:followup", "input": {"nope": 1}}, {}),
        (
            400,
            "POST",
            "/runs",
            {"target": "flows.py:followup", "input": {"user": "1"}, "in": "soon"},
            {},
        ),
        (400, "POST", "/runs", {"target": "flows.py:followup", "max_attempts": 0}, {}),
        (400, "POST", "/runs", {"target": "flows.py:followup", "in": -5}, {}),
        # A lone surrogate is no text: refused, where it used to be stored and then made
        # every listing that met it a 500.
        (
            400,
            "POST",
            "/runs",
            None,
            {"raw": b'{"target": "flows.py:followup", "input": {"user": "\\ud800"}}'},
        ),
        (400, "POST", "/runs", {"target": "flows.py:followup", "timeout": -1.5}, {}),
        (400, "POST", "/runs", {"target": "flows.py:followup", "deadline": -60}, {}),
        (400, "POST", "/runs", {"target": "flows.py:followup", "max_attempts": True}, {}),
        (400, "POST", "/runs", {"target": "os:system"}, {}),
        (400, "POST", "/runs", {"target": "../flows.py:followup"}, {}),
        (400, "POST", "/runs", {"target": "/etc/passwd.yaml"}, {}),
        (400, "POST", "/runs", {"target": "no-such-workflow"}, {}),
        (
            400,
            "POST",
            "/runs",
            {
                "target": "flows.py:followup",
                "input": {"user": "1"},
                "deadline": "2001-01-01T00:00Z",
            },
            {},
        ),
        (400, "GET", "/runs?status=bogus", None, {}),
        (400, "GET", "/runs?limit=0", None, {}),
        (400, "GET", "/runs?limit=abc", None, {}),
        (400, "GET", "/runs?color=red", None, {}),
        (400, "GET", "/runs?workflow=", None, {}),
        (400, "POST", "/runs", {"target": "nosuch", "key": "k-1"}, {}),
        (400, "POST", "/runs", {"target": "followup", "key": " "}, {}),
        (400, "GET", f"/runs/{live}?bogus=1", None, {}),
        (400, "POST", f"/runs/{live}/cancel", None, {"raw": b"{bad"}),
        (400, "POST", f"/runs/{live}/cancel", {"reason": ""}, {}),
        (400, "POST", f"/runs/{live}/cancel", {"why": "x"}, {}),
        (400, "POST", f"/runs/{live}/pause", {"reason": "x"}, {}),
        (400, "POST", f"/runs/{live}/wake", [1], {}),
        (400, "GET", "/runs?status=", None, {}),
        (400, "POST", f"/runs/{live}/signals/_reserved", 1, {}),
        (400, "POST", f"/runs/{live}/signals/replied", None, {"raw": b"{nope"}),
        (400, "POST", "/signals/replied", 1, {}),
        (404, "GET", "/runs/no-such-run", None, {}),
        (404, "POST", "/runs/no-such-run/cancel", None, {}),
        (404, "POST", "/runs/no-such-run/signals/replied", 1, {}),
        (404, "POST", "/signals/replied?key=no-such-key", 1, {}),
        (404, "POST", "/signals/replied?key=done-1", 1, {}),  # its run ended
        (404, "GET", "/no/such/endpoint", None, {}),
        (404, "GET", "/runs/", None, {}),  # no redirect to /runs
        (404, "POST", "/runs//cancel", None, {}),
        (405, "DELETE", "/runs", None, {}),
        (409, "POST", f"/runs/{done}/signals/replied", 1, {}),
        (409, "POST", f"/runs/{done}/pause", None, {}),
        (409, "POST", f"/runs/{done}/wake", None, {}),
        (409, "POST", f"/runs/{live}/redrive", None, {}),
        (409, "POST", f"/runs/{live}/resume", None, {}),
        (413, "POST", "/runs", None, {"raw": big}),
        (413, "POST", "/signals/replied?key=live-1", None, {"raw": big}),
    ]
    before = rows(served_db)
    for status, method, path, body, options in cases:
        reply = api.call(method, path, body, **options)  # type: ignore[arg-type]
        assert reply.status == status, (method, path, reply.status, reply.body[:300])
        assert reply.headers["content-type"].startswith("application/json"), path
        error = reply.json()["error"]
        assert isinstance(error, str) and error and "\n" not in error, (path, error)
        assert "Traceback" not in error
        assert "--" not in error and "module:function" not in error, (path, error)  # no CLI
        if status == 401:
            assert reply.headers["www-authenticate"] == "Bearer"
        if status == 405:
            assert "GET" in reply.headers["allow"] and "POST" in reply.headers["allow"]
    assert rows(served_db) == before


def test_redrive_past_the_deadline_needs_a_new_deadline_or_no_deadline(
    api: Api, served_db: str
) -> None:
    run_id = start(api, "late-1", deadline="1s")
    assert api.call("POST", f"/runs/{run_id}/cancel").status == 200
    deadline = datetime.fromisoformat(api.call("GET", f"/runs/{run_id}").json()["run"]["deadline"])
    wait_until(lambda: datetime.now(UTC) > deadline, timeout=5)
    before = rows(served_db)
    for body, needle in [
        (None, f"run {run_id} is past its deadline"),
        ({"deadline": "2h", "no_deadline": True}, "give deadline or no_deadline, not both"),
        ({"no_deadline": "yes"}, "no_deadline must be true or false"),
        ({"deadline": "whenever"}, "deadline 'whenever' is neither a duration"),
        ({"until": "2h"}, "accepted: deadline, no_deadline"),
    ]:
        refused = api.call("POST", f"/runs/{run_id}/redrive", body)
        assert (refused.status, needle in refused.json()["error"]) == (400, True), refused.body
        assert "--" not in refused.json()["error"]  # the API's own field names, no CLI flags
    assert rows(served_db) == before
    redriven = api.call("POST", f"/runs/{run_id}/redrive", {"deadline": 7200}).json()["run"]
    assert redriven["status"] == "queued"
    new = datetime.fromisoformat(redriven["deadline"])
    assert timedelta(hours=1) < new - datetime.now(UTC) <= timedelta(hours=2)
    assert api.call("POST", f"/runs/{run_id}/cancel").status == 200
    dropped = api.call("POST", f"/runs/{run_id}/redrive", {"no_deadline": True}).json()["run"]
    assert (dropped["status"], dropped["deadline"]) == ("queued", None)


def test_openapi_describes_every_route() -> None:
    from starlette.routing import Route

    from flowctl.serve.routes import Served

    app = build_app(Served(None, None, None, Path("."), Path("."), lambda: b""))  # type: ignore[arg-type]
    served = {
        (method.lower(), route.path)
        for route in app.routes
        if isinstance(route, Route)
        for method in (route.methods or ()) - {"HEAD"}
    }
    documented = {(m, p) for p, ops in spec()["paths"].items() for m in ops}
    assert served == documented
    issue_list = {
        ("get", "/healthz"),
        ("post", "/runs"),
        ("get", "/runs"),
        ("get", "/runs/{id}"),
        ("post", "/runs/{id}/signals/{name}"),
        ("post", "/signals/{name}"),
        ("post", "/runs/{id}/cancel"),
        ("post", "/runs/{id}/redrive"),
        ("post", "/runs/{id}/pause"),
        ("post", "/runs/{id}/resume"),
        ("post", "/runs/{id}/wake"),
        ("get", "/metrics"),
        ("get", "/openapi.json"),
    }
    assert issue_list <= documented


def test_openapi_and_metrics_over_the_socket(api: Api) -> None:
    doc = api.call("GET", "/openapi.json").json()
    assert doc["openapi"].startswith("3.1") and "/signals/{name}" in doc["paths"]
    from prometheus_client.parser import text_string_to_metric_families

    text = api.call("GET", "/metrics").body.decode()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {
        "flowctl_runs",
        "flowctl_wake_lateness_seconds",
        "flowctl_step_duration_seconds",
        "flowctl_claims",
        "flowctl_reclaims",
        "flowctl_daemon_up",
        "flowctl_daemon_leases_held",
        "flowctl_notifications",
    } <= names


def serve_refusal(
    project: Path, *args: str, env: dict[str, str] | None = None, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in __import__("os").environ.items() if k != "FLOWCTL_TOKEN"}
    full["PYTHONPATH"] = str(ROOT)
    if token:
        full["FLOWCTL_TOKEN"] = token
    full.update(env or {})
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "flowctl",
            "--db",
            str(project / "f.db"),
            "serve",
            "--port",
            "0",
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=str(project),
        env=full,
        timeout=60,
    )


def test_serve_refuses_to_start_without_a_safe_token(tmp_path: Path) -> None:
    """One store only: these refusals come before the database is opened."""
    out = serve_refusal(tmp_path)
    assert out.returncode == 2 and "needs a bearer token" in out.stderr
    out = serve_refusal(tmp_path, "--no-auth", "--host", "0.0.0.0")
    assert out.returncode == 2 and "--no-auth binds only to loopback" in out.stderr
    out = serve_refusal(tmp_path, token="short")
    assert out.returncode == 2 and "at least 16 characters" in out.stderr
    toml = tmp_path / "flowctl.toml"
    toml.write_text(f'[serve]\ntoken = "{TOKEN}"\n')
    toml.chmod(0o644)
    out = serve_refusal(tmp_path)
    assert out.returncode == 2 and "chmod 600" in out.stderr
    for o in (out,):
        assert "Traceback" not in o.stderr and len(o.stderr.strip().splitlines()) == 1


def test_token_from_a_private_flowctl_toml_and_no_auth_on_loopback(db: str, tmp_path: Path) -> None:
    (tmp_path / "flows.py").write_text(FLOWS)
    toml = tmp_path / "flowctl.toml"
    toml.write_text(f'[serve]\ntoken = "{TOKEN}"\n')
    toml.chmod(0o600)
    proc, log = start_serve(tmp_path, db, token=None)
    try:
        api = Api(port_of(proc, log))
        assert api.call("GET", "/runs").status == 200
        assert api.call("GET", "/runs", token=None).status == 401
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    proc, log = start_serve(tmp_path, db, "--no-auth", token=None)
    try:
        open_api = Api(port_of(proc, log), token=None)
        assert "NO AUTH" in log.read_text()
        assert open_api.call("GET", "/runs", token=None).status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# One bad value per start option, as the CLI takes it and as the API takes it. The CLI
# run is refused before a database is opened, so it needs none.
SPELLED = [
    ({"deadline": "2001-01-01T00:00Z"}, ["--deadline", "2001-01-01T00:00Z"]),
    ({"deadline": "whenever"}, ["--deadline", "whenever"]),
    ({"at": "2001-01-01T00:00Z"}, ["--at", "2001-01-01T00:00Z"]),  # names `at` twice
    ({"at": "tomorrowish"}, ["--at", "tomorrowish"]),
    ({"timeout": "0s"}, ["--timeout", "0s"]),
    ({"max_attempts": 0}, ["--max-attempts", "0"]),
    ({"in": "5m", "at": "now"}, ["--in", "5m", "--at", "now"]),
]


@pytest.mark.parametrize(("body", "args"), SPELLED)
def test_one_ops_check_is_spelled_as_a_flag_in_the_cli_and_as_a_field_over_http(
    api: Api, project: Path, tmp_path: Path, body: dict[str, object], args: list[str]
) -> None:
    """The same bad value is refused by one check in ops (ops.start_options): the CLI
    says it with its flag (`--max-attempts`), the API with its field (`max_attempts`),
    each from the error's structured field, no text rewritten."""
    from flowctl import ops
    from flowctl.clock import SystemClock
    from flowctl.errors import UsageError

    values = {("delay" if k == "in" else k): v for k, v in body.items()}
    with pytest.raises(UsageError) as caught:
        ops.start_options(SystemClock(), **values)  # type: ignore[arg-type]
    error = caught.value
    reply = api.call(
        "POST", "/runs", {"target": "flows.py:followup", "input": {"user": "1"}} | body
    )
    assert reply.status == 400, reply.body
    assert error.field is not None and reply.json() == {"error": error.spelled(lambda f: f)}
    db = str(tmp_path / "none.db")
    argv = ["run", f"{project}/flows.py:followup", "-i", "user=1", *args]
    cli = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", db, *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    flag = error.spelled(lambda f: "--" + f.replace("_", "-"))
    assert (cli.returncode, cli.stderr) == (2, f"flowctl: {flag}\n")
    assert flag != error.spelled(lambda f: f)  # the two spellings differ: both came from the field
    assert not (tmp_path / "none.db").exists()


def test_a_missing_input_is_asked_for_as_each_front_end_gives_inputs(
    api: Api, project: Path, tmp_path: Path
) -> None:
    """A required workflow input not given names the field `input.user`: over HTTP as
    that, in the CLI as the option that gives it (`-i user=VALUE`); one error, no text
    rewritten."""
    reply = api.call("POST", "/runs", {"target": "flows.py:followup", "input": {}})
    assert reply.status == 400, reply.body
    said = reply.json()["error"]
    assert "needs input 'user' (give input.user)" in said and "-i" not in said
    db = str(tmp_path / "none.db")
    cli = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", db, "run", f"{project}/flows.py:followup"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert cli.returncode == 2
    assert "needs input 'user' (give -i user=VALUE)" in cli.stderr


def test_a_stored_lone_surrogate_is_sent_escaped_not_a_500() -> None:
    # Rows written before such input was refused still hold one: every response that meets
    # it must still encode (UTF-8 cannot), so the API escapes all that is not ASCII.
    from flowctl.serve.routes import JSONResponse

    assert JSONResponse({"name": "\ud800", "ok": "ünï"}).body == (
        b'{"name":"\\ud800","ok":"\\u00fcn\\u00ef"}'
    )


def test_a_traceparent_header_puts_the_run_in_the_callers_trace(api: Api) -> None:
    caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    body = {"target": "flows.py:followup", "input": {"user": "7"}}
    reply = api.call("POST", "/runs", body, headers={"traceparent": caller})
    assert reply.status == 201, reply.body
    shown = api.call("GET", f"/runs/{reply.json()['id']}").json()
    assert shown["trace"] == {
        "trace_id": "0af7651916cd43dd8448eb211c80319c",
        "span_id": shown["trace"]["span_id"],
        "parent_span_id": "b7ad6b7169203331",
    }
    bad = api.call("POST", "/runs", body, headers={"traceparent": "00-zz"})
    assert bad.status == 400 and "is not a W3C traceparent" in bad.json()["error"]


def test_priority_is_taken_and_checked(api: Api, served_db: str) -> None:
    run_id = start(api, "vip-1", priority=7)
    assert query(served_db, "SELECT priority FROM runs WHERE run_id = ?", (run_id,)) == [(7,)]
    before = rows(served_db)
    bad = api.call("POST", "/runs", {"target": "flows.py:followup", "priority": "high"})
    assert bad.status == 400 and "priority must be a whole number" in bad.json()["error"]
    assert rows(served_db) == before
