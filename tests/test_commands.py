"""run_command: argv vs shell, exit codes, output caps, timeouts, stop requests, process groups."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from flowctl.errors import Cancelled, CommandFailedError, CommandTimeoutError
from flowctl.yamlflow.commands import CommandResult, run_command

ENV = dict(os.environ)


def never() -> BaseException | None:
    return None


def run(cmd: list[str] | str, **kwargs: object) -> CommandResult:
    options: dict[str, object] = {"env": ENV, "cwd": None, "timeout": 10.0, "should_stop": never}
    options.update(kwargs)
    return run_command(cmd, **options)  # type: ignore[arg-type]


def live_members(pgid: int) -> list[int]:
    """Pids of non-zombie processes in the group (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != b"Z":
            found.append(int(entry))
    return found


def wait_for_file(path: Path, seconds: float = 5.0) -> str:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        threading.Event().wait(0.01)
    raise AssertionError(f"{path} never appeared")


needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def test_argv_is_not_run_by_a_shell(tmp_path: Path) -> None:
    result = run(["echo", "$HOME", "; touch pwned", "$(touch pwned)"], cwd=str(tmp_path))
    assert result.stdout == "$HOME ; touch pwned $(touch pwned)\n"
    assert result.exit_code == 0
    assert not (tmp_path / "pwned").exists()


def test_string_is_run_by_sh(tmp_path: Path) -> None:
    env = {**ENV, "GREETING": "hi there"}
    result = run('echo "$GREETING" | tr a-z A-Z; pwd', env=env, cwd=str(tmp_path))
    assert result.stdout.splitlines() == ["HI THERE", str(tmp_path.resolve())]
    assert result.argv == ["/bin/sh", "-c", 'echo "$GREETING" | tr a-z A-Z; pwd']


def test_to_json_parses_json_stdout() -> None:
    result = run(["echo", '{"replied": false, "n": 3}'])
    data = result.to_json()
    assert set(data) == {"exit_code", "stdout", "stderr", "duration", "json"}
    assert data["json"] == {"replied": False, "n": 3}
    assert data["exit_code"] == 0
    assert isinstance(data["duration"], float) and data["duration"] >= 0
    assert run(["echo", "not json"]).to_json()["json"] is None


def test_stdin_is_empty() -> None:
    assert run(["cat"]).stdout == ""


def test_non_zero_exit_raises_command_failed() -> None:
    with pytest.raises(CommandFailedError) as info:
        run("echo out; echo first >&2; echo 'last words' >&2; exit 3")
    err = info.value
    assert err.exit_code == 3
    assert err.error_type == "CommandFailed"
    assert err.error_fields() == {"exit_code": 3, "stderr_tail": "first\nlast words\n"}
    assert "last words" in str(err)
    assert err.result.stdout == "out\n"  # type: ignore[attr-defined]


def test_missing_program_is_exit_127() -> None:
    with pytest.raises(CommandFailedError) as info:
        run(["definitely-not-a-program-xyz"])
    assert info.value.exit_code == 127


def test_killed_by_signal_reports_128_plus_n() -> None:
    with pytest.raises(CommandFailedError) as info:
        run("kill -9 $$")
    assert info.value.exit_code == 137


def test_output_cap_keeps_the_tail_and_counts_everything() -> None:
    cmd = "head -c 3145728 /dev/zero | tr '\\0' a; printf END; head -c 10 /dev/zero >&2"
    result = run(cmd)
    assert result.stdout_bytes == 3 * 1024 * 1024 + 3
    assert len(result.stdout.encode()) == 1 << 20
    assert result.stdout.endswith("aaaEND")
    assert result.stdout_truncated
    assert result.stderr_bytes == 10 and not result.stderr_truncated


def test_small_cap() -> None:
    result = run(["printf", "0123456789"], cap=4)
    assert result.stdout == "6789"
    assert result.stdout_bytes == 10


# Well under the 30 s the scripts below would run if nothing stopped them, and far above
# what stopping them takes even on a loaded host (a bound of 1 s was close to flaky).
SOON = 10.0


@needs_proc
def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    script = f"echo $$ > {pidfile}; sleep 30 & sleep 30; wait"
    started = time.monotonic()
    with pytest.raises(CommandTimeoutError) as info:
        run(script, timeout=0.3)
    elapsed = time.monotonic() - started
    assert elapsed < SOON  # not the 30 s the script would take
    assert info.value.timeout == 0.3
    pgid = int(wait_for_file(pidfile))
    assert live_members(pgid) == []


@needs_proc
def test_should_stop_kills_and_raises_the_given_exception(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()

    def should_stop() -> BaseException | None:
        return Cancelled("cancelled by operator") if stop.is_set() else None

    started = time.monotonic()
    with pytest.raises(Cancelled, match="cancelled by operator"):
        run(f"echo $$ > {pidfile}; sleep 30", should_stop=should_stop, timeout=None)
    assert time.monotonic() - started < SOON  # not the 30 s sleep
    assert live_members(int(wait_for_file(pidfile))) == []


def test_already_stopped_does_not_start(tmp_path: Path) -> None:
    with pytest.raises(Cancelled):
        run(["touch", "started"], cwd=str(tmp_path), should_stop=lambda: Cancelled("stop"))
    assert not (tmp_path / "started").exists()


@needs_proc
def test_sigterm_ignored_gets_sigkill_after_grace(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    script = f"trap '' TERM; echo $$ > {pidfile}; sleep 30; sleep 30"
    started = time.monotonic()
    with pytest.raises(CommandTimeoutError):
        run(script, timeout=0.2, grace=0.2)
    elapsed = time.monotonic() - started
    assert 0.35 <= elapsed < SOON  # the grace waited out, not the 60 s of sleeps
    assert live_members(int(wait_for_file(pidfile))) == []


def test_runs_in_its_own_process_group() -> None:
    result = run([sys.executable, "-c", "import os; print(os.getpgid(0))"])
    child_pgid = int(result.stdout.strip())
    assert child_pgid != os.getpgid(0)


@needs_proc
def test_background_leftovers_are_killed_after_exit(tmp_path: Path) -> None:
    result = run("sleep 30 > /dev/null 2>&1 & echo $$", timeout=5)
    assert result.exit_code == 0
    assert live_members(int(result.stdout.strip())) == []


def test_missing_cwd_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="does not exist"):
        run(["true"], cwd=str(tmp_path / "nope"))


def test_invalid_utf8_is_replaced() -> None:
    result = run(["printf", "\\377ok"])
    assert result.stdout == "\ufffdok"
