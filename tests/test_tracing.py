"""Traces (issue 41): one trace per run across attempts, sleeps, retries, daemons and
children; a step's span current while its body runs; a caller's traceparent joined; and
nothing of OpenTelemetry loaded when the environment asks for no traces.

In process, the engine's tracer exports to memory (OpenTelemetry's own in-memory
exporter) while a daemon on the fake clock runs the workflows; the console exporter is
read back from real processes (`flowctl run --wait`, a daemon with worker processes).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import durable_flows as flows
import pytest
import traced_flows
from durable_flows import TESTS_DIR
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from flowctl import ops, tracing
from flowctl.clock import FakeClock
from flowctl.daemon import Daemon
from flowctl.errors import UsageError
from flowctl.model import RunStatus
from flowctl.store.sqlite import SqliteStore as Store
from flowctl.tracing.ids import normal_traceparent, run_trace
from flowctl.tracing.otel import OtelTracer
from tests.helpers import wait_until

HOUR = timedelta(hours=1)
CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
ROOT = Path(__file__).resolve().parent.parent
FLOWCTL = (sys.executable, "-m", "flowctl")
JOIN = ("--traceparent", CALLER)


@pytest.fixture
def spans(daemon: Daemon) -> Iterator[InMemorySpanExporter]:
    """The daemon's engine traces into memory."""
    exporter = InMemorySpanExporter()
    daemon.engine.tracer = OtelTracer.exporting(SimpleSpanProcessor(exporter))
    flows.reset()
    traced_flows.SEEN.clear()
    yield exporter
    exporter.shutdown()


def start(store: Store, clock: FakeClock, name: str, **kw: Any) -> str:
    started = ops.start(store, f"traced_flows:{name}", {}, clock=clock, cwd=TESTS_DIR, **kw)
    return started.run.run_id


def by_name(finished: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name == name]


def hexes(span: ReadableSpan) -> tuple[str, str, str | None]:
    """(trace id, span id, parent span id) as W3C writes them."""
    ctx = span.get_span_context()
    parent = None if span.parent is None else f"{span.parent.span_id:016x}"
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}", parent


def test_one_trace_across_a_sleep_with_a_span_per_attempt_and_step(
    store: Store, fake_clock: FakeClock, daemon: Daemon, spans: InMemorySpanExporter
) -> None:
    rid = start(store, fake_clock, "steps_and_sleep")
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.SLEEPING
    fake_clock.advance(HOUR)
    daemon.tick()
    assert store.get_run(rid).status is RunStatus.COMPLETED
    finished = spans.get_finished_spans()
    where = run_trace(rid, None)
    assert {hexes(s)[0] for s in finished} == {where.trace_id}  # one trace
    (run_span,) = by_name(finished, "steps_and_sleep")
    assert hexes(run_span) == (where.trace_id, where.span_id, None)  # the derived root
    attempts = by_name(finished, "steps_and_sleep attempt")
    assert [hexes(a)[2] for a in attempts] == [where.span_id, where.span_id]
    assert [a.attributes["flowctl.outcome"] for a in attempts] == ["sleeping", "completed"]
    (sleep,) = attempts[0].events
    assert sleep.name == "flowctl.sleep"
    assert sleep.attributes["flowctl.wake_at"] == (fake_clock.now()).isoformat()
    assert attempts[1].attributes["flowctl.woke_from"] == "sleeping"
    for step, attempt, index in (("first", attempts[0], 0), ("second", attempts[1], 2)):
        (span,) = by_name(finished, step)
        assert hexes(span)[2] == hexes(attempt)[1]
        assert span.attributes["flowctl.call_index"] == index
        assert span.attributes["flowctl.run_id"] == rid
        assert span.attributes["flowctl.workflow"] == "steps_and_sleep"
        # the step's span is the current one while its body runs
        assert (step, span.get_span_context().span_id) in traced_flows.SEEN


def test_a_failed_try_and_its_retry_are_spans_of_the_same_trace(
    store: Store, fake_clock: FakeClock, daemon: Daemon, spans: InMemorySpanExporter
) -> None:
    flows.KNOBS["fail:flaky"] = 1
    rid = flows.start(store, fake_clock, "retrying")
    daemon.tick()
    fake_clock.advance(timedelta(seconds=10))
    daemon.tick()
    finished = spans.get_finished_spans()
    tries = by_name(finished, "flaky")
    assert [t.attributes["flowctl.try"] for t in tries] == [1, 2]
    assert not tries[0].status.is_ok and tries[1].status.is_ok
    assert tries[0].events[0].name == "exception"
    assert "flaky failed on call 1" in str(tries[0].events[0].attributes["exception.message"])
    attempts = by_name(finished, "retrying attempt")
    assert attempts[0].attributes["flowctl.outcome"] == "queued"
    assert attempts[0].events[0].name == "flowctl.retry"
    assert {hexes(s)[0] for s in finished} == {run_trace(rid, None).trace_id}


def test_a_dead_run_ends_its_span_as_an_error(
    store: Store, fake_clock: FakeClock, daemon: Daemon, spans: InMemorySpanExporter
) -> None:
    flows.KNOBS["fail:picky"] = True
    flows.KNOBS["exc:picky"] = KeyError  # non-retryable: the run dies at once
    flows.start(store, fake_clock, "picky_flow")
    daemon.tick()
    finished = spans.get_finished_spans()
    (run_span,) = by_name(finished, "picky_flow")
    (attempt,) = by_name(finished, "picky_flow attempt")
    assert run_span.attributes["flowctl.outcome"] == "dead" and not run_span.status.is_ok
    assert attempt.attributes["flowctl.error.type"] == "KeyError"
    assert attempt.attributes["flowctl.error.kind"]  # how it failed, as the run records it


def test_a_child_joins_its_parents_trace_under_the_span_that_started_it(
    store: Store, fake_clock: FakeClock, daemon: Daemon, spans: InMemorySpanExporter
) -> None:
    rid = start(store, fake_clock, "parent_of_one")
    for _ in range(4):
        daemon.tick()
        fake_clock.advance(HOUR)
    assert store.get_run(rid).status is RunStatus.COMPLETED
    (child,) = [r for r in ops.list_runs(store) if r.parent_run_id == rid]
    assert child.traceparent is not None
    finished = spans.get_finished_spans()
    parent_trace = run_trace(rid, None).trace_id
    assert {hexes(s)[0] for s in finished} == {parent_trace}
    (child_span,) = by_name(finished, "steps_and_sleep")
    first_attempt = by_name(finished, "parent_of_one attempt")[0]
    # under the parent's attempt that started it (the current span at the ctx.child call)
    assert hexes(child_span)[2] == hexes(first_attempt)[1]
    assert child_span.attributes["flowctl.run_id"] == child.run_id


def test_a_run_joins_a_callers_traceparent(
    store: Store, fake_clock: FakeClock, daemon: Daemon, spans: InMemorySpanExporter
) -> None:
    rid = start(store, fake_clock, "steps_and_sleep", traceparent=CALLER)
    assert store.get_run(rid).traceparent == CALLER
    daemon.tick()
    fake_clock.advance(HOUR)
    daemon.tick()
    finished = spans.get_finished_spans()
    assert {hexes(s)[0] for s in finished} == {"4bf92f3577b34da6a3ce929d0e0e4736"}
    (run_span,) = by_name(finished, "steps_and_sleep")
    assert hexes(run_span)[2] == "00f067aa0ba902b7"
    detail = ops.show_run(store, rid, clock=fake_clock).to_json()
    assert detail["trace"]["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.mark.parametrize(
    "bad",
    [
        "nope",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  # no flags
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero span id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # a forbidden version
    ],
)
def test_a_traceparent_that_is_not_w3c_is_refused_and_nothing_is_written(
    store: Store, fake_clock: FakeClock, bad: str
) -> None:
    with pytest.raises(UsageError, match="is not a W3C traceparent") as e:
        start(store, fake_clock, "steps_and_sleep", traceparent=bad)
    assert e.value.field == "traceparent"
    assert ops.list_runs(store) == []


def test_a_traceparent_is_stored_in_one_form() -> None:
    assert normal_traceparent(" " + CALLER + " ") == CALLER
    assert normal_traceparent(CALLER[:-2] + "03") == CALLER  # only the sampled bit is kept


def test_the_environment_decides_whether_traces_are_on() -> None:
    assert tracing.wanted({}) is None
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "none"}) is None
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "console"}) == "console"
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) == "otlp"
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}) is None


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return {**env, **extra}


def test_without_otel_variables_nothing_of_opentelemetry_is_imported(tmp_path: Path) -> None:
    code = (
        "import sys; from flowctl.__main__ import main; sys.argv = ['flowctl', '--db',"
        f" {str(tmp_path / 'f.db')!r}, 'run', 'durable_flows:two_steps', '--detach'];"
        "\ntry: main()\nexcept SystemExit: pass\n"
        "import flowctl.runtime.engine, flowctl.daemon\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=TESTS_DIR
    )
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stderr


def console_spans(text: str) -> list[dict[str, Any]]:
    """The spans the console exporter printed (indented JSON objects) among other lines."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := text.find('{\n    "name"', at)) >= 0:
        span, end = decoder.raw_decode(text, at)
        found.append(span)
        at = end
    return found


def test_a_foreground_run_exports_its_spans_to_the_console(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    out = subprocess.run(
        [*FLOWCTL, "--db", str(db), "run", "durable_flows:two_steps", "--wait", *JOIN],
        capture_output=True,
        text=True,
        env=_env(OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="billing"),
        cwd=TESTS_DIR,
    )
    assert out.returncode == 0, out.stderr
    found = console_spans(out.stdout)
    assert sorted(s["name"] for s in found) == ["a", "b", "two_steps", "two_steps attempt"]
    assert {s["context"]["trace_id"] for s in found} == {"0x4bf92f3577b34da6a3ce929d0e0e4736"}
    assert {s["resource"]["attributes"]["service.name"] for s in found} == {"billing"}


def test_a_bad_traceparent_on_the_command_line_is_one_line_and_creates_nothing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "f.db"
    out = subprocess.run(
        [*FLOWCTL, "--db", str(db), "run", "durable_flows:two_steps", "--traceparent", "abc"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=TESTS_DIR,
    )
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "--traceparent" in out.stderr
    assert "Traceback" not in out.stderr and not db.exists()


@pytest.mark.crash
def test_a_daemons_worker_processes_export_and_a_drain_flushes(
    tmp_path: Path, spawn_daemon: Any
) -> None:
    db = tmp_path / "f.db"
    env = _env(OTEL_TRACES_EXPORTER="console", OTEL_BSP_SCHEDULE_DELAY="60000")
    ids = []
    for x in range(3):
        arg = ("-i", f"x:={x}")
        done = subprocess.run(
            [
                *FLOWCTL,
                "--db",
                str(db),
                "run",
                "durable_flows:two_steps",
                "--detach",
                "--json",
                *arg,
            ],
            capture_output=True,
            text=True,
            env=_env(),
            cwd=TESTS_DIR,
            check=True,
        )
        ids.append(json.loads(done.stdout)["id"])
    proc = spawn_daemon(db, "--workers", "2", env={**env, "PYTHONPATH": TESTS_DIR})
    wait_until(lambda: all(ops_status(db, rid) == "completed" for rid in ids), timeout=60)
    proc.send_signal(signal.SIGTERM)  # drain: spans held by the 60 s batch are flushed
    assert proc.wait(timeout=30) == 0
    found = console_spans((tmp_path / "daemon-0.log").read_text())
    runs = {s["attributes"]["flowctl.run_id"] for s in found if s["name"] == "two_steps"}
    assert runs == set(ids)
    for rid in ids:
        trace = "0x" + run_trace(rid, None).trace_id
        mine = [s for s in found if s["context"]["trace_id"] == trace]
        assert sorted(s["name"] for s in mine) == ["a", "b", "two_steps", "two_steps attempt"]


def ops_status(db: Path, rid: str) -> str:
    from tests.helpers import query

    return str(query(db, "SELECT status FROM runs WHERE run_id = ?", (rid,))[0][0])


def test_the_branches_of_a_fan_out_are_sibling_spans_current_in_their_bodies(
    store: Store, fake_clock: FakeClock, daemon: Daemon, spans: InMemorySpanExporter
) -> None:
    rid = start(store, fake_clock, "fan_out")
    daemon.tick()
    assert store.get_run(rid).result == [[0, 1, 2], [0, 1]]
    finished = spans.get_finished_spans()
    (attempt,) = by_name(finished, "fan_out attempt")
    names = ["items[0]", "items[1]", "items[2]", "waits[0]", "waits[1]"]
    branches = [span for name in names for span in by_name(finished, name)]
    assert len(branches) == 5  # one span per branch, plain (threads) and async alike
    assert {hexes(b)[2] for b in branches} == {hexes(attempt)[1]}  # siblings
    seen = dict(traced_flows.SEEN)
    assert [seen[b.name] for b in branches] == [b.get_span_context().span_id for b in branches]
