"""Notifications when runs end: the outbox written with the ending, delivered by the
daemon's notifier to a local HTTP server and to a command, on a FakeClock."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from flowctl import ops
from flowctl.clock import FakeClock
from flowctl.config import load_config
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.daemon.notifier import PASS_ROWS, Notifier
from flowctl.daemon.spawn import child_settings, config_of
from flowctl.errors import ConfigError, ValidationError
from flowctl.model import RunStatus
from flowctl.notify import (
    ENDINGS,
    NotifyConfig,
    events_of,
    parse_notify,
    retry_delay,
    unwanted_endings,
    wanted,
)
from flowctl.ops.metrics import render
from flowctl.runtime.targets import load_target
from flowctl.store import Store
from tests.conftest import ROOT
from tests.helpers import query, wait_until
from tests.notify_helpers import webhook_server

FLOWS = """\
from flowctl import NonRetryableError, workflow

@workflow
def doomed(ctx):
    ctx.step("boom", lambda: (_ for _ in ()).throw(NonRetryableError("no way")))

@workflow
def fine(ctx, n: int = 1):
    return {"n": n}

@workflow
def napper(ctx):
    ctx.sleep("1h")

@workflow(notify={"on": ["completed"], "command": COMMAND})
def loud(ctx):
    return "done"

@workflow(notify=False)
def quiet(ctx):
    raise NonRetryableError("quietly")
"""


@pytest.fixture
def flows(tmp_path: Path) -> Path:
    out = tmp_path / "out.log"
    command = [
        sys.executable,
        "-c",
        "import os, sys; open(sys.argv[1], 'a').write(os.environ['FLOWCTL_RUN_ID'] + ' '"
        " + os.environ['FLOWCTL_STATUS'] + ' ' + os.environ['FLOWCTL_EVENT'] + ' '"
        " + sys.stdin.read() + '\\n')",
        str(out),
    ]
    path = tmp_path / "flows.py"
    path.write_text(FLOWS.replace("COMMAND", repr(command)))
    return path


def outbox(db: Path) -> list[tuple[str, str, str, int]]:
    return query(db, "SELECT run_id, status, state, tries FROM notifications ORDER BY seq")


def timeline(store: Store, run_id: str, *types: str) -> list[dict[str, object]]:
    return [e.data for e in store.timeline(run_id) if e.type in types]


class WithNotifier(Daemon):
    """A tick()-driven daemon and the notifier `flowctl daemon` runs beside it."""

    def __init__(self, store: Store, clock: FakeClock, notify: NotifyConfig | None) -> None:
        super().__init__(store, clock, DaemonConfig(concurrency=1))
        self.notifier = Notifier(store, clock, notify, self.owner)


def daemon_with(store: Store, clock: FakeClock, notify: NotifyConfig | None) -> WithNotifier:
    return WithNotifier(store, clock, notify)


def start(store: Store, flows: Path, fn: str, clock: FakeClock, **kw: object) -> str:
    return ops.start(store, f"{flows}:{fn}", {}, clock=clock, **kw).run.run_id  # type: ignore[arg-type]


def test_a_dead_run_is_posted_once_with_an_hmac_signature(
    store: Store, db_path: Path, flows: Path, fake_clock: FakeClock
) -> None:
    with webhook_server() as hook:
        config = NotifyConfig(on=frozenset({"dead"}), webhook=hook.url, secret="s3cret")
        daemon = daemon_with(store, fake_clock, config)
        run_id = start(store, flows, "doomed", fake_clock)
        daemon.tick()
        assert store.get_run(run_id).status is RunStatus.DEAD
        # Recorded with the ending, before anyone delivered it.
        assert outbox(db_path) == [(run_id, "dead", "pending", 0)]
        assert daemon.notifier.deliver_due() == 1
        assert daemon.notifier.deliver_due() == 0
    assert len(hook.received) == 1
    headers, body = hook.received[0]
    sent = json.loads(body)
    assert (sent["id"], sent["status"], sent["error"]["message"]) == (run_id, "dead", "no way")
    expected = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert headers["x-flowctl-signature"] == expected
    assert (headers["x-flowctl-event"], headers["x-flowctl-run"]) == ("dead", run_id)
    assert outbox(db_path) == [(run_id, "dead", "delivered", 1)]
    assert timeline(store, run_id, "notified") == [
        {"channel": "webhook", "event": "dead", "try": 1}
    ]


def test_a_command_gets_the_run_on_stdin_and_its_id_and_status_in_env(
    store: Store, tmp_path: Path, flows: Path, fake_clock: FakeClock
) -> None:
    config = NotifyConfig(
        on=frozenset({"completed"}),
        command=tuple(load_target(f"{flows}:loud").notify["command"]),  # type: ignore[index]
    )
    daemon = daemon_with(store, fake_clock, config)
    run_id = start(store, flows, "fine", fake_clock)
    daemon.tick()
    assert daemon.notifier.deliver_due() == 1
    line = (tmp_path / "out.log").read_text().splitlines()
    assert len(line) == 1
    rid, status, event, body = line[0].split(" ", 3)
    assert (rid, status, event) == (run_id, "completed", "completed")
    assert json.loads(body)["result"] == {"n": 1}


def test_failures_retry_with_backoff_up_to_the_bound_then_give_up(
    store: Store, db_path: Path, flows: Path, fake_clock: FakeClock
) -> None:
    with webhook_server() as hook:
        hook.status = 500
        config = NotifyConfig(on=frozenset({"dead"}), webhook=hook.url, tries=3)
        daemon = daemon_with(store, fake_clock, config)
        run_id = start(store, flows, "doomed", fake_clock)
        daemon.tick()
        notifier = daemon.notifier
        assert notifier.deliver_due() == 1
        assert notifier.deliver_due() == 0  # not due again before its backoff
        fake_clock.advance(retry_delay(1) - 0.01)
        assert notifier.deliver_due() == 0
        fake_clock.advance(0.01)
        assert notifier.deliver_due() == 1
        fake_clock.advance(retry_delay(2))
        assert notifier.deliver_due() == 1
        fake_clock.advance(3600)
        assert notifier.deliver_due() == 0  # gave up after 3 tries
    assert len(hook.received) == 3
    assert outbox(db_path) == [(run_id, "dead", "failed", 3)]
    failed = timeline(store, run_id, "notify failed")
    assert [f["try"] for f in failed] == [1, 2, 3]
    assert all("HTTP 500" in str(f["error"]) for f in failed)
    (gave_up,) = timeline(store, run_id, "notify gave up")
    assert gave_up["tries"] == 3
    assert 'flowctl_notifications{state="failed"} 1.0' in render(store).decode()


def test_a_channel_that_had_it_is_not_told_again(
    store: Store, tmp_path: Path, flows: Path, fake_clock: FakeClock
) -> None:
    with webhook_server() as hook:
        hook.status = 503
        command = tuple(load_target(f"{flows}:loud").notify["command"])  # type: ignore[index]
        config = NotifyConfig(on=frozenset({"dead"}), webhook=hook.url, command=command)
        daemon = daemon_with(store, fake_clock, config)
        run_id = start(store, flows, "doomed", fake_clock)
        daemon.tick()
        daemon.notifier.deliver_due()
        hook.status = 200
        fake_clock.advance(retry_delay(1))
        daemon.notifier.deliver_due()
    assert len(hook.received) == 2
    assert len((tmp_path / "out.log").read_text().splitlines()) == 1
    told = [(e["channel"], e["try"]) for e in timeline(store, run_id, "notified")]
    assert told == [("command", 1), ("webhook", 2)]


def test_unsubscribed_endings_are_dropped_and_timed_out_is_its_own_event(
    store: Store, db_path: Path, flows: Path, fake_clock: FakeClock
) -> None:
    with webhook_server() as hook:
        config = NotifyConfig(on=frozenset({"timed_out"}), webhook=hook.url)
        daemon = daemon_with(store, fake_clock, config)
        done = start(store, flows, "fine", fake_clock)
        late = start(store, flows, "napper", fake_clock, deadline=fake_clock.now() + _s(60))
        daemon.tick()
        fake_clock.advance(61)
        daemon.tick()
        assert store.get_run(late).status is RunStatus.DEAD
        assert store.get_run(done).status is RunStatus.COMPLETED
        assert daemon.notifier.deliver_due() == 1
    assert [h["x-flowctl-event"] for h, _ in hook.received] == ["timed_out"]
    assert [r[0] for r in outbox(db_path)] == [late]  # the completed run's row was dropped


def test_the_notifier_drains_an_outbox_that_grew_past_one_pass_without_waiting(
    store: Store, db_path: Path, flows: Path, fake_clock: FakeClock
) -> None:
    """More endings than one pass takes (PASS_ROWS): the serving loop passes again at once
    instead of waiting PASS_EVERY per batch, which capped the drain at 256 rows a second,
    below what a daemon ends. Fake time never moves here, so only passes that do not wait
    can empty it."""
    daemon = daemon_with(store, fake_clock, None)  # no [notify]: every row is dropped
    n = 3 * PASS_ROWS + 5
    for _ in range(n):
        start(store, flows, "fine", fake_clock)
    while daemon.tick():
        pass
    assert len(outbox(db_path)) == n
    stop = threading.Event()
    thread = daemon.notifier.start(stop)
    try:
        wait_until(lambda: outbox(db_path) == [], timeout=10)
        assert daemon.notifier.backlog is False  # the last pass found less than a batch
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_workflow_overrides_pin_with_the_run(
    store: Store, tmp_path: Path, flows: Path, fake_clock: FakeClock
) -> None:
    with webhook_server() as hook:
        config = NotifyConfig(on=frozenset({"dead", "completed"}), webhook=hook.url)
        daemon = daemon_with(store, fake_clock, config)
        loud = start(store, flows, "loud", fake_clock)  # adds a command, only on completed
        quiet = start(store, flows, "quiet", fake_clock)  # notify=False: nobody is told
        for _ in range(3):
            daemon.tick()
        assert store.get_run(quiet).status is RunStatus.DEAD
        assert daemon.notifier.deliver_due() == 1
    assert [h["x-flowctl-run"] for h, _ in hook.received] == [loud]
    assert (tmp_path / "out.log").read_text().startswith(f"{loud} completed")


def test_yaml_notify_is_checked_and_pinned(
    tmp_path: Path, store: Store, db_path: Path, fake_clock: FakeClock
) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        'name: good\nnotify:\n  "on": [dead, timed_out]\n  webhook: https://example.invalid/h\n'
        "steps:\n  - sleep: 1s\n"
    )
    run = ops.start(store, str(good), {}, clock=fake_clock).run
    (pinned,) = query(db_path, "SELECT notify FROM runs WHERE run_id = ?", (run.run_id,))
    assert json.loads(pinned[0]) == {
        "on": ["dead", "timed_out"],
        "webhook": "https://example.invalid/h",
    }
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nnotify:\n  webhook: x\n  secret: x\nsteps:\n  - sleep: 1s\n")
    with pytest.raises(
        ValidationError, match=r"bad.yaml:3:\d+.*unknown notify key 'secret'|bad.yaml"
    ):
        load_target(str(bad))


def test_notify_table_is_checked_when_flowctl_toml_loads(tmp_path: Path) -> None:
    toml = tmp_path / "flowctl.toml"
    for text, message in [
        ('[notify]\non = ["exploded"]\n', "unknown event 'exploded'"),
        ('[notify]\nwebhook = "ftp://x"\n', "http:// or https://"),
        ('[notify]\ncommand = "notify-send"\n', "argv list"),
        ("[notify]\ntries = 0\n", "from 1 to 100"),
        ('[notify]\ncolour = "red"\n', "unknown notify key 'colour'"),
    ]:
        toml.write_text(text)
        with pytest.raises(ConfigError, match=message) as info:
            load_config(toml)
        assert "\n" not in str(info.value)
    toml.write_text('[notify]\non = ["dead", "cancelled"]\nwebhook = "https://h.invalid"\n')
    config = load_config(toml).notify()
    assert config is not None and config.on == {"dead", "cancelled"}


def test_policy_is_pure() -> None:
    assert events_of("dead", "deadline") == {"dead", "timed_out"}
    assert events_of("dead", "raised") == {"dead"}
    config = parse_notify({"on": ["timed_out"], "command": ["true"]}, "t")
    assert config is not None
    assert wanted(config, "dead", "timeout") == ("command",)
    assert wanted(config, "dead", "raised") == ()
    assert [retry_delay(n) for n in (1, 2, 3, 10, 50)] == [1, 2, 4, 300, 300]
    assert unwanted_endings(None) == ("completed", "dead", "cancelled")
    assert unwanted_endings(NotifyConfig(on=frozenset({"dead"}))) == ENDINGS  # no channel
    assert unwanted_endings(config) == ("completed", "cancelled")  # timed_out is a dead run
    everything = NotifyConfig(on=frozenset(ENDINGS), webhook="https://example.invalid/h")
    assert unwanted_endings(everything) == ()


def _s(seconds: float) -> object:
    from datetime import timedelta

    return timedelta(seconds=seconds)


def test_a_daemon_writes_no_outbox_row_for_a_completion_its_notify_does_not_want(
    store: Store,
    tmp_path: Path,
    flows: Path,
    fake_clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As `flowctl daemon` runs (its DaemonConfig carries the endings no channel of its
    [notify] wants, notify.unwanted_endings): a completion writes no outbox row that its
    notifier would only drop. A run whose override wants it is still told, and a dead
    run's row is written as before."""
    command = (sys.executable, "-c", "import os; open(os.environ['OUT'], 'a').write('dead\\n')")
    config = NotifyConfig(on=frozenset({"dead"}), command=command)
    untold = unwanted_endings(config)
    assert untold == ("completed", "cancelled")
    daemon = Daemon(store, fake_clock, DaemonConfig(concurrency=8, untold=untold))
    fine = [start(store, flows, "fine", fake_clock) for _ in range(3)]
    loud = start(store, flows, "loud", fake_clock)  # its override adds a command on completed
    doomed = start(store, flows, "doomed", fake_clock)
    for _ in range(3):
        daemon.tick()
    assert [store.get_run(r).status for r in fine] == [RunStatus.COMPLETED] * 3
    rows = store.due_notifications(fake_clock.now())
    assert sorted(r.run_id for r in rows) == sorted([loud, doomed])
    notifier = Notifier(store, fake_clock, config, daemon.owner)
    monkeypatch.setenv("OUT", str(tmp_path / "dead.log"))  # the command inherits it
    assert notifier.deliver_due() == 2
    assert (tmp_path / "out.log").read_text().startswith(f"{loud} completed")
    assert (tmp_path / "dead.log").read_text() == "dead\n"


def test_worker_processes_are_given_the_endings_nobody_wants(store: Store) -> None:
    """A daemon's worker processes write completions too: the endings its [notify] does not
    want reach them with the rest of its settings (as JSON, through the control pipe)."""
    for untold in [("completed",), ()]:
        settings = json.loads(json.dumps(child_settings(store, DaemonConfig(untold=untold))))
        assert config_of(settings["config"]).untold == untold


@pytest.mark.parametrize("table", ["", '[notify]\non = ["completed"]\ncommand = ["true"]\n'])
def test_the_cli_reads_notify_to_leave_out_the_completions_nobody_wants(
    tmp_path: Path, flows: Path, table: str
) -> None:
    """`flowctl run --wait` (no notifier of its own, so every row it writes stays) takes
    the endings nobody wants from flowctl.toml's [notify], as `flowctl daemon` does: with
    no table its completion writes no outbox row, with one that wants completions it
    writes one."""
    if table:
        (tmp_path / "flowctl.toml").write_text(table)
    db = tmp_path / "cli.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FLOWCTL_DB", None)
    done = subprocess.run(
        [sys.executable, "-m", "flowctl", "--db", str(db), "run", f"{flows}:fine", "--wait"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert [(r[1], r[2]) for r in outbox(db)] == ([("completed", "pending")] if table else [])
