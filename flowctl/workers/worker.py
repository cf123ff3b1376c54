"""A worker process of `flowctl daemon --workers N`: runs handlers, owns no database.

    python -m flowctl.workers.worker FD CONCURRENCY LOG_LEVEL

FD is this end of a socket pair whose other end the owner (the daemon process) holds.
The owner sends `run` (a claim), `interrupt`, `pause`, `kill` (its commands) and `exit`;
the worker sends `call` (a store call its engine makes), `beat` (the step each handler
is inside) and `done` (the outcome). The engine runs here unchanged, against
RemoteStore: every store call it makes is answered by the owner, and only after the
owner's COMMIT that made it durable, so a checkpoint is on disk before the next step runs
(as it is in process). A worker writes nothing itself: killed at any moment, it leaves
only what the owner already committed, and the owner reclaims its runs.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import signal
import socket
import sys
import threading
from typing import TYPE_CHECKING, Any, cast

from flowctl.clock import SystemClock
from flowctl.context import LeaseLost, LiveRun
from flowctl.engine import Engine, Outcome
from flowctl.errors import (
    Cancelled,
    DatabaseError,
    DeadlineExceededError,
    ExecutionTimeoutError,
    Interrupt,
    SerializationError,
)
from flowctl.store.records import Claim
from flowctl.workers.wire import decode, dumps_line, encode, loads_line, rebuild_error

if TYPE_CHECKING:
    from flowctl.store import Store

log = logging.getLogger(__name__)

# The store calls the engine, its context, step output and child runs make: the only ones
# a worker may ask the owner for (the owner checks the same list).
CALLS = frozenset(
    {
        "record_entry",
        "consume_signal",
        "record_version",
        "publish",
        "suspend_run",
        "complete_run",
        "fail_attempt",
        "end_run",
        "journal",
        "versions",
        "run_source",
        "get_run",
        "get_run_by_key",
        "create_run",
        "append_output",
    }
)


def _what(method: str, args: tuple[Any, ...]) -> str:
    """What a value that is not JSON is, in the words of the SerializationError the store
    would raise for it in process."""
    if method == "record_entry" and args:
        return f"result of {getattr(args[1], 'name', '?')!r}"
    if method == "publish" and len(args) > 1:
        return f"published value {args[1]!r}"
    return {"complete_run": "the workflow's result", "create_run": "the input"}.get(method, "value")


def interrupt_of(name: str, message: str) -> Interrupt:
    """The interrupt the owner's heartbeat (or drain) raised, rebuilt here by name."""
    from flowctl.daemon import DaemonStopping

    kinds: dict[str, type[Interrupt]] = {
        "LeaseLost": LeaseLost,
        "DaemonStopping": DaemonStopping,
        "Cancelled": Cancelled,
        "DeadlineExceededError": DeadlineExceededError,
        "ExecutionTimeoutError": ExecutionTimeoutError,
    }
    return kinds.get(name, Cancelled)(message)


class Channel:
    """This process's end of the socket: one writer lock, replies matched by call id."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[int, list[Any]] = {}  # id -> [event, reply]
        self._lock = threading.Lock()
        self.closed = False

    def send(self, message: dict[str, Any]) -> None:
        data = dumps_line(message)
        with self._send_lock:
            self.sock.sendall(data)

    def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            message = {
                "op": "call",
                "m": method,
                "a": encode(list(args)),
                "k": encode(kwargs),
            }
            line = dumps_line(message)
        except (TypeError, ValueError) as e:
            raise SerializationError(
                f"{_what(method, args)} is not JSON-serialisable ({e}); return str,"
                " int, float, bool, None, lists and dicts of those"
            ) from None
        call_id = next(self._ids)
        line = line[:-2] + f',"id":{call_id}}}\n'.encode()
        slot: list[Any] = [threading.Event(), None]
        with self._lock:
            if self.closed:
                raise DatabaseError("the daemon process is gone: nothing more can be written")
            self._pending[call_id] = slot
        with self._send_lock:
            self.sock.sendall(line)
        slot[0].wait()
        reply = slot[1]
        if reply is None:
            raise DatabaseError("the daemon process is gone: nothing more can be written")
        if "err" in reply:
            raise rebuild_error(reply["err"])
        return decode(reply.get("ok"))

    def answer(self, reply: dict[str, Any]) -> None:
        with self._lock:
            slot = self._pending.pop(reply["id"], None)
        if slot is not None:
            slot[1] = reply
            slot[0].set()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            slots, self._pending = list(self._pending.values()), {}
        for slot in slots:
            slot[0].set()


class RemoteStore:
    """The part of the Store the engine uses, each call answered by the owner over the
    channel. Knows no SQL and keeps no state: the owner's store is the only truth."""

    def __init__(self, channel: Channel) -> None:
        self._channel = channel
        # The journal and versions the owner read when it sent the claim, which the
        # context reads first thing: two round trips fewer per run.
        self._journals: dict[str, Any] = {}
        self._versions: dict[str, Any] = {}
        self._lock = threading.Lock()

    def prefetched(self, run_id: str, journal: Any, versions: Any) -> None:
        with self._lock:
            self._journals[run_id], self._versions[run_id] = journal, versions

    def forget(self, run_id: str) -> None:
        with self._lock:
            self._journals.pop(run_id, None)
            self._versions.pop(run_id, None)

    def journal(self, run_id: str) -> Any:
        with self._lock:
            found = self._journals.pop(run_id, None)
        return found if found is not None else self._channel.call("journal", (run_id,), {})

    def versions(self, run_id: str) -> Any:
        with self._lock:
            found = self._versions.pop(run_id, None)
        return found if found is not None else self._channel.call("versions", (run_id,), {})

    def __getattr__(self, name: str) -> Any:
        if name not in CALLS:
            raise AttributeError(f"a worker process has no store method {name!r}")

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._channel.call(name, args, kwargs)

        return call


class Worker:
    """Runs the claims the owner sends, `concurrency` at a time, each on its own thread."""

    def __init__(self, sock: socket.socket, concurrency: int) -> None:
        self.channel = Channel(sock)
        self.clock = SystemClock()
        self.remote = RemoteStore(self.channel)
        self.engine = Engine(cast("Store", self.remote), self.clock)
        self._jobs: queue.SimpleQueue[Claim | None] = queue.SimpleQueue()
        self._live: dict[str, LiveRun] = {}
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._work, name=f"flowctl-worker-{i}", daemon=True)
            for i in range(concurrency)
        ]

    def serve(self) -> None:
        for t in self._threads:
            t.start()
        threading.Thread(target=self._beats, name="flowctl-beat", daemon=True).start()
        reader = self.channel.sock.makefile("rb")
        for line in reader:
            message = loads_line(line)
            op = message["op"]
            if op == "reply":
                self.channel.answer(message)
            elif op == "run":
                claim = decode(message["claim"])
                if "journal" in message:
                    self.remote.prefetched(
                        claim.run.run_id, decode(message["journal"]), decode(message["versions"])
                    )
                self._jobs.put(claim)
            elif op in ("interrupt", "pause"):
                with self._lock:
                    live = self._live.get(message["run_id"])
                if live is not None and op == "pause":
                    live.request_pause()
                elif live is not None:
                    live.interrupt(interrupt_of(message["type"], message["message"]))
            elif op == "kill":
                _kill_commands()
            elif op == "exit":
                break
        # The owner said exit, or is gone (EOF): nothing can be written any more.
        self.channel.close()
        _kill_commands()
        os._exit(0)

    def _work(self) -> None:
        while True:
            claim = self._jobs.get()
            if claim is None:
                return
            run = claim.run
            live = LiveRun(claim.lease, self.clock, run.exec_spent, run.timeout)
            with self._lock:
                self._live[run.run_id] = live
            try:
                outcome = self.engine.execute(claim, live)
            except DatabaseError as e:
                log.warning("run %s: %s", run.run_id, e)
                outcome = Outcome(run.run_id, None, error=_error(e))
            except BaseException as e:  # a bug in the engine must not kill the thread silently
                log.exception("run %s: engine error", run.run_id)
                outcome = Outcome(run.run_id, None, error=_error(e))
            finally:
                self.remote.forget(run.run_id)
                with self._lock:
                    self._live.pop(run.run_id, None)
            try:
                self.channel.send({"op": "done", "run_id": run.run_id, "outcome": encode(outcome)})
            except (OSError, TypeError, ValueError):
                if not self.channel.closed:
                    log.exception("run %s: could not report its outcome", run.run_id)

    def _beats(self) -> None:
        """The step each handler is inside and when it began (ISO), once a second, for the
        owner's heartbeat (`why`, the TUI)."""
        tick = threading.Event()
        while not self.channel.closed:
            tick.wait(1.0)
            with self._lock:
                steps = {
                    rid: None if live.step is None else [live.step[0], live.step[1].isoformat()]
                    for rid, live in self._live.items()
                }
            if steps:
                try:
                    self.channel.send({"op": "beat", "steps": steps})
                except OSError:
                    return


def _error(e: BaseException) -> dict[str, Any]:
    return {"type": type(e).__name__, "message": str(e)}


def _kill_commands() -> None:
    commands = sys.modules.get("flowctl.yamlflow.commands")
    n = commands.kill_running_commands() if commands is not None else 0
    if n:
        log.warning("killed %d command(s) still running", n)


def main(argv: list[str]) -> None:
    fd, concurrency, level = int(argv[0]), int(argv[1]), argv[2]
    # The owner decides when this process stops: a Ctrl-C or SIGTERM sent to the whole
    # process group drains through the owner, which tells its workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=f"%(asctime)s %(levelname)s worker {os.getpid()}: %(message)s",
        stream=sys.stderr,
    )
    Worker(socket.socket(fileno=fd), concurrency).serve()


if __name__ == "__main__":
    main(sys.argv[1:])
