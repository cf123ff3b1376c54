"""The daemon as a systemd user service, and stopping the daemons that serve a database.

`unit_text` is pure: the unit for one database and its flowctl.toml. `install` and
`uninstall` write or remove it under ~/.config/systemd/user and drive `systemctl --user`
when it is on PATH; otherwise they say what to run. `stop_daemons` sends SIGTERM (the
daemon's drain) to each live daemon of this database on this host and waits for it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from flowctl.clock import Clock
from flowctl.errors import FlowctlError
from flowctl.ids import HOST, daemon_live, proc_start
from flowctl.model import iso
from flowctl.store import DaemonInfo, Store

STOP_MARGIN = 15.0  # TimeoutStopSec and `daemon stop` wait this much beyond the drain grace


def unit_name(db: Path) -> str:
    """One service per database: flowctl-<file stem>-<hash of its absolute path>.service."""
    resolved = str(db.resolve())
    stem = re.sub(r"[^A-Za-z0-9_-]", "-", db.stem)[:40] or "db"
    return f"flowctl-{stem}-{hashlib.sha256(resolved.encode()).hexdigest()[:8]}.service"


def unit_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


def flowctl_argv() -> list[str]:
    """How to start this same flowctl from anywhere: absolute paths only."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.suffix == ".pyz" and argv0.is_file():
        return [sys.executable, str(argv0.resolve())]
    if argv0 is not None and argv0.name == "flowctl" and argv0.is_file():
        return [str(argv0.resolve())]
    found = shutil.which("flowctl")
    if found:
        return [str(Path(found).resolve())]
    return [sys.executable, "-m", "flowctl"]


def _quote(arg: str) -> str:
    """An ExecStart word: '%' doubled (systemd's specifiers), quoted when it needs it."""
    arg = arg.replace("%", "%%")
    if re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def unit_text(argv: list[str], db: Path, workdir: Path, grace: float) -> str:
    """The unit: ExecStart with absolute paths and --db, Restart=on-failure, SIGTERM to the
    daemon only (KillMode=mixed: command steps run in their own process groups and are
    the daemon's to stop), and TimeoutStopSec above the drain grace, so systemd never
    cuts a drain short."""
    exec_start = " ".join(_quote(a) for a in [*argv, "--db", str(db.resolve()), "daemon"])
    return (
        "[Unit]\n"
        f"Description=flowctl daemon for {db.resolve()}\n"
        "\n"
        "[Service]\n"
        "Type=exec\n"
        f"WorkingDirectory={_quote(str(workdir.resolve()))}\n"
        f"ExecStart={exec_start}\n"
        "Restart=on-failure\n"
        "RestartSec=2\n"
        "KillSignal=SIGTERM\n"
        "KillMode=mixed\n"
        f"TimeoutStopSec={int(grace + STOP_MARGIN)}\n"
        "Environment=PYTHONUNBUFFERED=1\n"
        "\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )


@dataclass
class ServiceReport:
    """What install/uninstall did: the unit file, the systemctl calls made, what to do next."""

    unit: str
    path: Path
    ran: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _systemctl(report: ServiceReport, *args: str) -> None:
    argv = ["systemctl", "--user", *args]
    report.ran.append(argv)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise FlowctlError(f"`{' '.join(argv)}` could not run: {e}") from None
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        raise FlowctlError(
            f"`{' '.join(argv)}` failed (exit {done.returncode})" + (f": {why[-1]}" if why else "")
        )


def install(text: str, db: Path) -> ServiceReport:
    """Write the unit; with systemctl on PATH, reload, enable and start it."""
    name = unit_name(db)
    path = unit_dir() / name
    before = path.read_text() if path.is_file() else None
    _write_unit(path, text)
    report = ServiceReport(name, path)
    if shutil.which("systemctl") is None:
        report.notes.append(
            f"systemctl not found: where systemd runs, start it with"
            f" `systemctl --user enable --now {name}`; elsewhere run `flowctl daemon`"
            " under your own supervisor"
        )
        return report
    try:
        _systemctl(report, "daemon-reload")
    except FlowctlError as e:  # no user manager to talk to (no user bus): nothing installed
        if before is None:
            path.unlink(missing_ok=True)
        else:
            _write_unit(path, before)
        raise FlowctlError(
            f"{e}; the unit was not installed (no systemd user manager here?): run"
            " `flowctl daemon` under your own supervisor, or log in with a systemd user"
            f" session (or `loginctl enable-linger {_user()}`) and run --install again"
        ) from None
    _systemctl(report, "enable", "--now", name)
    report.notes.append(
        f"to keep it running while you are logged out: loginctl enable-linger {_user()}"
    )
    return report


def _write_unit(path: Path, text: str) -> None:
    """Write the unit file whole (a temporary file renamed over it)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as e:
        raise FlowctlError(f"cannot write the unit {path}: {e.strerror}") from None


def uninstall(db: Path) -> ServiceReport:
    """Stop and disable the unit (with systemctl on PATH) and remove its file."""
    name = unit_name(db)
    path = unit_dir() / name
    if not path.exists():
        raise FlowctlError(f"no service installed for {db} (looked for {path})")
    report = ServiceReport(name, path)
    have_systemctl = shutil.which("systemctl") is not None
    if have_systemctl:
        _systemctl(report, "disable", "--now", name)
    path.unlink()
    if have_systemctl:
        _systemctl(report, "daemon-reload")
    else:
        report.notes.append("systemctl not found: removed the unit file only")
    return report


def _user() -> str:
    return os.environ.get("USER") or os.environ.get("LOGNAME") or "$USER"


# ---------------------------------------------------------------------------
# daemon stop


@dataclass(frozen=True)
class StopResult:
    daemon: DaemonInfo
    stopped: bool  # the process is gone
    note: str
    live: bool = True  # False: it was not running; its registration was removed


def _same_process(d: DaemonInfo) -> bool:
    start = proc_start(d.pid)
    return start is not None and (d.proc_start is None or start == d.proc_start)


def stop_daemons(
    store: Store,
    clock: Clock,
    *,
    wait: float,
    send: Callable[[int, int], None] = os.kill,
) -> list[StopResult]:
    """SIGTERM every live daemon of this database on this host (each drains: no new
    claims, running handlers finish within its grace) and wait up to `wait` seconds for
    all of them to exit. A live daemon on another host is reported, not signalled. A
    registered daemon that is not running (its process gone, or, on another host, its
    heartbeat lapsed: ids.daemon_live) is forgotten, and reported as not live."""
    targets: list[DaemonInfo] = []
    results: list[StopResult] = []
    now = clock.now()
    for d in store.daemons():
        gone = not daemon_live(d.owner, d.seen_at, now, d.info.get("lease"))
        if gone or (d.host == HOST and not _same_process(d)):  # pid gone, or reused
            store.unregister_daemon(d.owner)  # remembered as last seen at its last beat
            note = f"not running (last seen {iso(d.seen_at)}): its registration is removed"
            results.append(StopResult(d, True, note, live=False))
            continue
        if d.host != HOST:
            results.append(StopResult(d, False, f"runs on {d.host}: stop it there"))
            continue
        try:
            send(d.pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        except PermissionError:
            results.append(StopResult(d, False, f"pid {d.pid}: not allowed to signal it"))
            continue
        targets.append(d)
    give_up = clock.monotonic() + wait
    idle = threading.Event()
    while any(_same_process(d) for d in targets) and clock.monotonic() < give_up:
        clock.wait(idle, 0.05)
    for d in targets:
        gone = not _same_process(d)
        results.append(
            StopResult(d, gone, "drained and exited" if gone else f"still running after {wait:g}s")
        )
    return results
