"""Run step bodies concurrently: an event loop on a thread of its own awaits `async def`
bodies side by side (no thread each) and runs plain ones on a small pool of threads.

The handler's thread stays the only one that journals: it takes each outcome as it
comes (`Branches.next`) and checkpoints it at once, so a branch's result is durable when
its body returns, not when the slowest one does.
"""

from __future__ import annotations

import contextlib
import inspect
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flowctl.retry import blocking

if TYPE_CHECKING:
    import asyncio

# asyncio is imported where a body is awaited, not here: it brings socket and ssl along,
# 35 modules and a tenth of the instructions a worker process or an isolated worker spends
# importing what it needs (each imports this module through the workflow context).

THREADS_MAX = 32  # threads for the plain (not async) bodies of one fan-out call


def is_async(fn: Callable[..., Any]) -> bool:
    """An `async def` function (or a partial of one)."""
    return inspect.iscoroutinefunction(getattr(fn, "func", fn))


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


def call_body(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call a step body; one that returns an awaitable (`async def`, or a lambda calling
    one) is awaited on an event loop of its own, on this thread."""
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value):
        import asyncio

        return asyncio.run(_awaited(value))
    return value


@dataclass
class Job:
    """One branch to run: its number, its body and how to capture its output."""

    key: int
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    capture: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext
    tries: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """How a branch ended: `ok` with its value, or not with the exception it raised;
    `ran` False for a branch never started (the call was stopped)."""

    job: Job
    ok: bool
    value: Any
    seconds: float
    ran: bool = True


class Branches:
    """Jobs run concurrently (at most `limit` at once); outcomes in the order they end."""

    def __init__(
        self, jobs: list[Job], limit: int, halt: Callable[[], object] | None = None
    ) -> None:
        self._jobs = jobs
        # Asked before each branch starts: a non-None answer (a cancel, a deadline, a spent
        # budget) starts no more.
        self._halt = halt
        self._limit = max(1, limit)
        self._out: queue.SimpleQueue[Outcome] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="flowctl-branches", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @blocking
    def next(self) -> Outcome:
        """The next outcome (blocks until a branch ends)."""
        return self._out.get()

    def stop(self) -> None:
        """Start no more branches (those running go on to their end, unheard)."""
        self._stop.set()

    def close(self) -> None:
        self._stop.set()

    def _main(self) -> None:
        import asyncio

        asyncio.run(self._all())

    async def _all(self) -> None:
        import asyncio

        gate = asyncio.Semaphore(self._limit)
        self._threads = asyncio.Semaphore(THREADS_MAX)
        await asyncio.gather(*(self._one(job, gate) for job in self._jobs))

    async def _one(self, job: Job, gate: asyncio.Semaphore) -> None:
        async with gate:
            if self._stop.is_set() or (self._halt is not None and self._halt() is not None):
                self._out.put(Outcome(job, False, None, 0.0, ran=False))
                return
            start = time.monotonic()
            try:
                value = await self._run(job)
            except BaseException as e:  # handed to the handler's thread, which decides
                self._out.put(Outcome(job, False, e, time.monotonic() - start))
            else:
                self._out.put(Outcome(job, True, value, time.monotonic() - start))

    async def _run(self, job: Job) -> Any:
        if is_async(job.fn):
            with job.capture():
                return await job.fn(*job.args)
        async with self._threads:
            value = await _on_a_thread(job)
        if inspect.isawaitable(value):  # a lambda that calls an async function
            with job.capture():
                return await value
        return value


async def _on_a_thread(job: Job) -> Any:
    """Run a plain body on a daemon thread of its own (not a pool's: a pool's threads are
    joined at exit, so a body stuck past a drain would keep the daemon from exiting)."""
    import asyncio

    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if done.cancelled():
            return
        if ok:
            done.set_result(value)
        else:
            done.set_exception(value)

    def body() -> None:
        try:
            with job.capture():
                value = job.fn(*job.args)
        except BaseException as e:  # handed back to the loop, which hands it on
            loop.call_soon_threadsafe(settle, False, e)
        else:
            loop.call_soon_threadsafe(settle, True, value)

    threading.Thread(target=body, name="flowctl-branch", daemon=True).start()
    return await done


__all__ = ["THREADS_MAX", "Branches", "Job", "Outcome", "call_body", "is_async"]
