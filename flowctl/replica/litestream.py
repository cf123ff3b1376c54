"""Litestream as a child process: a generated configuration, `replicate` in the
foreground until told to stop, `restore` to a new file.

flowctl's SQLite settings already suit Litestream: WAL mode, a busy timeout of 10 s (a
writer waits out Litestream's short checkpoint locks), and PASSIVE autocheckpoints only
(WAL_BOUND_PAGES), which never truncate a WAL Litestream still reads (it holds a read
lock for that); Litestream itself checkpoints as it goes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from types import FrameType
from urllib.parse import urlsplit

from flowctl.errors import FlowctlError
from flowctl.replica.binary import litestream_binary


class ReplicaError(FlowctlError):
    """Litestream refused or failed; its own first line says why."""


def config_text(db: str, url: str, sync_interval: float) -> str:
    """Litestream's YAML for one database and one replica (JSON strings are YAML): the
    WAL looked at (monitor-interval, 1 s by Litestream's default) and shipped
    (sync-interval) every `sync_interval`, so that is what a crash can lose."""
    every = f"{max(1, round(sync_interval * 1000))}ms"
    return (
        "dbs:\n"
        f"  - path: {json.dumps(db)}\n"
        f"    monitor-interval: {every}\n"
        "    replica:\n"
        f"      url: {json.dumps(url)}\n"
        f"      sync-interval: {every}\n"
    )


def child_env(url: str) -> dict[str, str]:
    """Litestream's environment: flowctl's own, where S3 credentials are read from
    (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or LITESTREAM_ACCESS_KEY_ID / ...), never
    a file. One change, for an s3 URL: Litestream 0.5's S3 client cannot load its AWS
    configuration while AWS_CA_BUNDLE is set ("unable to add custom RootCAs HTTPClient"),
    so the bundle reaches it as SSL_CERT_FILE (which Go reads on Linux) unless that is set."""
    env = dict(os.environ)
    if urlsplit(url).scheme == "s3" and "AWS_CA_BUNDLE" in env:
        bundle = env.pop("AWS_CA_BUNDLE")
        if bundle:
            env.setdefault("SSL_CERT_FILE", bundle)
    return env


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the child is sent SIGTERM when flowctl dies, even by SIGKILL."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def replicate(db: str, url: str, sync_interval: float) -> int:
    """Run `litestream replicate` for `db` to `url` until SIGTERM or SIGINT (passed on to
    it, so it syncs and stops); its exit code. Its configuration reaches it through a
    pipe (`-config /dev/fd/N`): nothing is written to disk, nothing is left behind when
    flowctl is killed."""
    read, write = os.pipe()
    try:
        os.write(write, config_text(db, url, sync_interval).encode())  # << a pipe's buffer
    finally:
        os.close(write)
    try:
        child = subprocess.Popen(
            [litestream_binary(), "replicate", "-config", f"/dev/fd/{read}", "-no-expand-env"],
            pass_fds=(read,),
            env=child_env(url),
            preexec_fn=_die_with_parent,
        )
    finally:
        os.close(read)

    def forward(signum: int, _frame: FrameType | None) -> None:
        child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def restore(url: str, path: str) -> float:
    """Write the database at `url`'s latest replicated transaction to `path` (which must
    not exist); the seconds it took."""
    started = time.monotonic()
    done = subprocess.run(
        [litestream_binary(), "restore", "-no-expand-env", "-o", path, url],
        capture_output=True,
        text=True,
        check=False,
        env=child_env(url),
    )
    if done.returncode != 0 or not os.path.exists(path):
        said = (done.stderr or done.stdout).strip().splitlines()
        why = said[-1] if said else f"exit code {done.returncode}"
        raise ReplicaError(f"restore from {url} failed: {why}")
    return time.monotonic() - started
