"""YAML workflows through the real engine and CLI: pinning, injection safety, command results."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from flowctl import ops
from flowctl.clock import SystemClock
from flowctl.daemon import Daemon, DaemonConfig
from flowctl.model import RunStatus
from flowctl.store import open_store
from flowctl.testing import WorkflowEnvironment
from tests.helpers import wait_until
from tests.inproc import Ran, run_main


def _cli(db: Path, *args: str, cwd: Path) -> Ran:
    """`flowctl --db DB ARGS...` run from `cwd`, in process (tests/test_cli_process.py has
    the real-process cases); the commands that YAML steps start are real processes."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        mp.delenv("FLOWCTL_DB", raising=False)
        return run_main(mp, "--db", str(db), *args)


INJECT = """\
name: inject
input: {user: str}
steps:
  - id: shell
    run: 'printf "%s" "$FLOWCTL_INPUT_USER"'
  - id: argv
    run: [printf, "%s", "${{ input.user }}"]
"""


def test_hostile_inputs_are_inert(db: str, tmp_path: Path) -> None:
    (tmp_path / "inject.yaml").write_text(INJECT)
    for hostile in ['"; touch pwned #', "$(touch pwned)", "`touch pwned`; touch pwned"]:
        out = _cli(db, "run", "inject.yaml", "-i", f"user={hostile}", "--json", cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)["result"]["steps"]
        assert result == {"shell": hostile, "argv": hostile}
        assert not (tmp_path / "pwned").exists()


def test_command_step_checkpoint_shape_and_failure_record(db: str, tmp_path: Path) -> None:
    (tmp_path / "cmd.yaml").write_text(
        "name: cmd\nsteps:\n"
        "  - id: ok\n    run: [sh, -c, 'echo {\\\"n\\\": 1}; echo warn >&2']\n"
        "  - id: bad\n    run: 'echo oops >&2; exit 3'\n"
    )
    out = _cli(db, "run", "cmd.yaml", "--max-attempts", "1", "--json", cwd=tmp_path)
    assert out.returncode == 1
    run = json.loads(out.stdout)
    assert run["status"] == "dead"
    assert run["error"]["type"] == "CommandFailed"
    assert run["error"]["exit_code"] == 3
    assert run["error"]["stderr_tail"].strip() == "oops"
    shown = json.loads(_cli(db, "show", run["id"], "--json", cwd=tmp_path).stdout)
    ok, bad = shown["checkpoints"]
    assert set(ok["value"]) == {"exit_code", "stdout", "stderr", "duration", "json"}
    assert ok["value"]["exit_code"] == 0
    assert ok["value"]["json"] == {"n": 1}
    assert ok["value"]["stderr"].strip() == "warn"
    assert bad["state"] == "error"
    assert bad["error"]["type"] == "CommandFailed"
    assert bad["error"]["exit_code"] == 3
    # The frames would be flowctl's own, not the user's: the stderr tail tells the story.
    assert "traceback" not in run["error"] and "traceback" not in bad["error"]
    text = _cli(db, "show", run["id"], cwd=tmp_path).stdout
    assert "Traceback" not in text
    lines = text.splitlines()
    at = lines.index("          stderr (last lines):")
    assert lines[at + 1].strip() == "oops"


BINARY = """\
name: binary
input: {text: str}
steps:
  - id: big
    run: [sh, -c, "yes abcdefghij | head -c 200000"]
  - id: nul
    run: [printf, 'a\\0b']
  - id: after
    run: [sh, -c, 'printf "%s|%s|%s" "${#FLOWCTL_STEP_BIG_OUTPUT}" "$FLOWCTL_STEP_NUL_OUTPUT" "$FLOWCTL_INPUT_TEXT"']
"""


def test_an_earlier_steps_binary_or_huge_output_does_not_stop_later_commands(
    db: str, tmp_path: Path
) -> None:
    # A NUL cannot be in any environment string and Linux passes none over 128 KiB: an
    # automatic variable drops the NULs (as a shell's $(...) does) or is left out, where
    # it used to make every later command fail to start ("embedded null byte", E2BIG).
    # PostgreSQL stores no NUL at all (refused with its own message): there, only the
    # huge output is tried.
    nul = not db.startswith("postgresql")
    yaml = BINARY if nul else BINARY.replace("'a\\0b'", "'ab'")
    (tmp_path / "binary.yaml").write_text(yaml)
    text = '{"text": "x\\u0000y"}' if nul else '{"text": "xy"}'
    out = _cli(db, "run", "binary.yaml", "--input", text, "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-500:]
    steps = json.loads(out.stdout)["result"]["steps"]
    assert steps["after"] == "0|ab|xy"
    assert len(steps["big"]) == 200_000  # kept whole
    assert steps["nul"] == ("a\x00b" if nul else "ab")


def test_a_value_no_command_can_be_given_ends_the_run_at_once_not_after_retries(
    tmp_path: Path,
) -> None:
    # A NUL in an argument (here a step's output, passed explicitly) or a value over the
    # OS's limit fails the same way every time: one clear error, no retries.
    (tmp_path / "ex.yaml").write_text(
        "name: ex\nsteps:\n  - id: nul\n    run: [printf, 'a\\0b']\n"
        '  - id: use\n    run: [echo, "${{ steps.nul.output }}"]\n'
    )
    out = _cli(tmp_path / "f.db", "run", "ex.yaml", "--json", cwd=tmp_path)
    run = json.loads(out.stdout)
    assert run["status"] == "dead", run
    assert run["error"]["message"] == (
        "echo: an argument or environment value holds a NUL byte, which no command can be"
        " given: remove it from the value"
    )
    listed = json.loads(_cli(tmp_path / "f.db", "ls", "--json", cwd=tmp_path).stdout)
    assert listed[0]["attempt"] == 1  # not retried
    (tmp_path / "big.yaml").write_text(
        "name: big\nsteps:\n  - id: big\n    run: [sh, -c, 'yes x | head -c 200000']\n"
        '  - id: use\n    run: [sh, -c, "true"]\n    env: {X: "${{ steps.big.output }}"}\n'
    )
    out = _cli(tmp_path / "f.db", "run", "big.yaml", "--json", cwd=tmp_path)
    run = json.loads(out.stdout)
    assert run["status"] == "dead" and "E2BIG" in run["error"]["message"], run


def test_run_is_pinned_to_the_yaml_it_started_with(tmp_path: Path, db: str) -> None:
    path = tmp_path / "pinned.yaml"
    path.write_text(
        "name: pinned\nsteps:\n  - id: a\n    run: [echo, one]\n  - sleep: 1h\n  - id: b\n    run: [echo, two]\n"
    )
    with WorkflowEnvironment(db=db, cwd=tmp_path) as env:
        run_id = env.start("pinned.yaml")
        assert env.get(run_id).status == "sleeping"
        path.write_text(
            "name: pinned\nsteps:\n  - this is: broken\n"
        )  # edited while the run sleeps
        env.advance("1h")
        run = env.get(run_id)
        assert run.status == "completed"
        assert run.result == {"steps": {"a": "one", "b": "two"}}
        detail = ops.show_run(env.store, run_id, clock=env.clock)
        assert detail.source_changed is True
        assert any("changed since this run started" in n for n in detail.notes)


def test_validate_reports_file_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nsteps:\n  - id: a\n    runn: [echo]\n  - sleep: forever\n")
    out = _cli(tmp_path / "f.db", "validate", str(bad), cwd=tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert any(f"{bad}:4:" in line and "did you mean 'run'" in line for line in lines), lines
    assert any(f"{bad}:5:" in line and "forever" in line for line in lines), lines
    assert (
        not (tmp_path / "f.db").exists()
        or _cli(tmp_path / "f.db", "ls", "--json", cwd=tmp_path).stdout.strip() == "[]"
    )


def test_validate_says_a_child_workflow_file_that_does_not_exist(tmp_path: Path) -> None:
    # It used to say ok; the run then spent its attempts on a TargetError.
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "kid.yaml").write_text("name: kid\nsteps:\n  - run: [echo, hi]\n")
    parent = tmp_path / "sub" / "parent.yaml"
    parent.write_text(
        "name: parent\nsteps:\n  - id: ok\n    workflow: kid.yaml\n"
        "  - id: gone\n    workflow: nonexist.yaml\n  - id: named\n    workflow: kid\n"
        "  - id: typo\n    workflow: kidd\n  - id: nofn\n    workflow: kid.py:nofn\n"
    )
    (tmp_path / "sub" / "kid.py").write_text("def helper():\n    return 1\n")
    out = _cli(tmp_path / "f.db", "validate", str(parent), cwd=tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    # A name is a workflow of the same folder (as its run resolves it): `kid` is one.
    assert [line.split(": ")[0] for line in lines] == [
        f"{parent}:5",
        f"{parent}:9",
        f"{parent}:11",
    ], lines
    assert f"{parent.parent / 'nonexist.yaml'}" in lines[0] and "does not exist" in lines[0]
    assert "unknown workflow 'kidd'" in lines[1]
    assert "has no function 'nofn'" in lines[2]
    (tmp_path / "sub" / "nonexist.yaml").write_text("name: n\nsteps:\n  - run: [echo]\n")
    (tmp_path / "sub" / "kid.py").write_text(
        "from flowctl import workflow\n\n@workflow\ndef nofn(ctx):\n    return 1\n"
    )
    (tmp_path / "sub" / "parent.yaml").write_text(
        parent.read_text().replace("workflow: kidd", "workflow: kid")
    )
    again = _cli(tmp_path / "f.db", "validate", str(parent), cwd=tmp_path)
    assert again.returncode == 0, again.stderr


def test_shell_string_with_expression_is_refused_before_running(db: str, tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text(
        "name: x\ninput: {user: str}\nsteps:\n  - run: 'echo ${{ input.user }}'\n"
    )
    out = _cli(db, "run", "x.yaml", "-i", "user=1", cwd=tmp_path)
    assert out.returncode == 2
    assert "FLOWCTL_INPUT_USER" in out.stderr
    listed = _cli(db, "ls", "--json", cwd=tmp_path)  # nothing written: not even a database
    assert listed.stdout.strip() == "[]" or "no flowctl database" in listed.stderr


def test_cancel_really_stops_a_running_command(db: str, tmp_path: Path) -> None:
    (tmp_path / "long.yaml").write_text(
        "name: long\nsteps:\n  - id: wait\n    run: 'echo $$ > pid.txt; exec sleep 30'\n"
    )
    store = open_store(db)
    clock = SystemClock()
    run_id = ops.start(store, "long.yaml", {}, clock=clock, cwd=str(tmp_path)).run.run_id
    daemon = Daemon(store, clock, DaemonConfig(concurrency=1, lease=2, heartbeat=0.1, grace=1))
    thread = threading.Thread(target=daemon.run_forever, daemon=True)
    thread.start()
    pid_file = tmp_path / "pid.txt"
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip())
    pid = int(pid_file.read_text())
    ops.cancel(store, run_id, clock=clock, reason="test")
    wait_until(lambda: store.get_run(run_id).status is RunStatus.CANCELLED, timeout=10)
    assert (
        not Path(f"/proc/{pid}").exists()
        or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    )
    daemon.stop()
    thread.join(5)
    assert store.get_run(run_id).error["message"] == "test"
    store.close()


def test_validate_checks_the_schedule_block(tmp_path: Path) -> None:
    path = tmp_path / "sched.yaml"
    path.write_text(
        "name: sched\nschedule:\n  cron: '0 9 * * MON-FRY'\n  tz: Europe/Paris\n"
        "steps:\n  - run: [echo, hi]\n"
    )
    out = _cli(tmp_path / "f.db", "validate", str(path), cwd=tmp_path)
    assert out.returncode == 2
    assert f"{path}:3:9: schedule.cron: invalid cron expression '0 9 * * MON-FRY'" in out.stderr
    path.write_text(path.read_text().replace("MON-FRY", "MON-FRI"))
    assert _cli(tmp_path / "f.db", "validate", str(path), cwd=tmp_path).returncode == 0


def test_validate_json_lists_problems(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nsteps: []\n")
    out = _cli(tmp_path / "f.db", "validate", "--json", str(bad), cwd=tmp_path)
    assert out.returncode == 2
    data = json.loads(out.stdout)
    assert data["ok"] is False
    assert len(data["problems"]) == 1 and data["problems"][0].startswith(f"{bad}:2:")


def test_a_workflow_step_naming_a_workflow_of_its_folder_runs_it(tmp_path: Path) -> None:
    # `workflow: ping` named no file, and the run died with UnknownWorkflowError: a name
    # is the workflow of that name in the parent's folder, as `flowctl run NAME` finds it.
    from flowctl.clock import FakeClock
    from flowctl.store.sqlite import SqliteStore

    folder = tmp_path / "workflows"
    folder.mkdir()
    (folder / "kid.yaml").write_text("name: pong\nsteps:\n  - id: say\n    run: [echo, pong]\n")
    (folder / "par.yaml").write_text("name: par\nsteps:\n  - id: kid\n    workflow: pong\n")
    clock = FakeClock(datetime(2026, 3, 29, 1, 0, tzinfo=UTC))
    store = SqliteStore(tmp_path / "f.db")
    try:
        run_id = ops.start(store, str(folder / "par.yaml"), {}, clock=clock).run.run_id
        daemon = Daemon(store, clock, DaemonConfig(concurrency=1, lease=15, heartbeat=1))
        for _ in range(4):
            daemon.tick()
        run = store.get_run(run_id)
    finally:
        store.close()
    assert run.status is RunStatus.COMPLETED, run.error
    assert run.result == {"steps": {"kid": {"steps": {"say": "pong"}}}}
