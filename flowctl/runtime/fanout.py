"""`ctx.map` and `ctx.parallel`: many steps of one call, their bodies run concurrently,
each checkpointed as it ends.

The call takes a header index (kind `fanout`, its shape) and one step index per branch,
named `name[k]` (flowctl.fanout). Replay returns the branches recorded; only those
without a result run, at most `max_concurrency` at once. A branch that fails follows its
body's `@step` retry policy on its own: its retry is journaled and, once every other
branch has ended, the run parks until the earliest retry is due (a durable timer, no
worker held). Branches that fail for good raise one ParallelError, after all have ended.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from flowctl.errors import (
    Interrupt,
    NonDeterminismError,
    ParallelError,
    SerializationError,
    UsageError,
    mark_non_retryable,
)
from flowctl.fanout import MAX_FANOUT, same_shape, shape, shape_text
from flowctl.model import CallKind, EntryState, JournalEntry, RunStatus
from flowctl.output import capturing
from flowctl.retry import RetryPolicy, options_of
from flowctl.runtime.branches import Branches, Job, Outcome
from flowctl.runtime.recorded import error_dict, error_line
from flowctl.runtime.suspend import Suspend, step_caller
from flowctl.store import dumps

if TYPE_CHECKING:
    from flowctl.clock import Clock
    from flowctl.runtime.live import LiveRun
    from flowctl.store import Store
    from flowctl.tracing import Attempt

E = TypeVar("E", bound=BaseException)


class Host(Protocol):
    """What a fan-out uses of the replay context (flowctl.runtime.context.Context)."""

    run_id: str
    cwd: str | None
    halted: BaseException | None
    _clock: Clock
    _store: Store
    _live: LiveRun
    _in_step: str | None
    _trace: Attempt | None

    def _next_call(self, kind: CallKind, name: str) -> tuple[int, JournalEntry | None]: ...
    def _record(
        self, entry: JournalEntry, event: tuple[str, dict[str, Any]] | None = None
    ) -> None: ...
    def _entry(
        self, index: int, kind: CallKind, name: str, state: EntryState, value: Any, **kw: Any
    ) -> JournalEntry: ...
    def _halt(self, exc: E) -> E: ...
    def interruption(self) -> Interrupt | None: ...
    def check(self) -> None: ...


Context = Host

Body = tuple[Callable[..., Any], tuple[Any, ...]]


def misuse(message: str) -> UsageError:
    return mark_non_retryable(UsageError(message))


def check_fanout(call: str, name: str, count: int, max_concurrency: int | None) -> int:
    """The concurrency limit of a fan-out of `count` branches, or an error no retry fixes."""
    if count > MAX_FANOUT:
        raise misuse(
            f"{call}({name!r}) has {count} branches; the largest fan-out is {MAX_FANOUT}:"
            " split the work into batches, or start child runs in groups"
        )
    if max_concurrency is None:
        return max(count, 1)
    if (
        isinstance(max_concurrency, bool)
        or not isinstance(max_concurrency, int)
        or max_concurrency < 1
    ):
        raise misuse(
            f"{call}({name!r}): max_concurrency must be a positive integer, got {max_concurrency!r}"
        )
    return max_concurrency


def header(ctx: Context, call: str, name: str, keys: Sequence[str]) -> int:
    """Take the fan-out's header index; journal its shape, or check it against the one
    recorded (another count or order of branches is non-determinism)."""
    index, entry = ctx._next_call(CallKind.FANOUT, name)
    now = shape(call, keys)
    if entry is None:
        ctx._record(ctx._entry(index, CallKind.FANOUT, name, EntryState.DONE, now))
    elif not same_shape(entry.value, now):
        raise ctx._halt(ShapeChanged(ctx.run_id, call, name, index, entry.value, now))
    return index


class ShapeChanged(NonDeterminismError):
    """A fan-out replayed with another number or order of branches than it recorded."""

    def __init__(
        self, run_id: str, call: str, name: str, index: int, recorded: Any, now: dict[str, Any]
    ) -> None:
        self.index = index
        self.recorded = f"{call} {name!r} with {shape_text(recorded)}"
        self.now = f"{call} {name!r} with {shape_text(now)}"
        super().__init__(
            f"run {run_id}: call #{index} was recorded as {self.recorded} but the workflow"
            f" now makes {self.now}; let old runs finish, or guard the change with"
            " ctx.version()"
        )


def run_steps(
    ctx: Context, call: str, name: str, bodies: list[Body], keys: list[str], limit: int
) -> list[Any]:
    """The fan-out of `bodies` as steps `name[k]`: their results in order (see module)."""
    _refuse_named_limits(ctx, call, name, bodies)
    head = header(ctx, call, name, keys)
    slots = [ctx._next_call(CallKind.STEP, f"{name}[{k}]") for k in range(len(bodies))]
    results: list[Any] = [None] * len(bodies)
    failed: dict[int, JournalEntry] = {}
    retrying: list[JournalEntry] = []
    jobs: list[Job] = []
    now = ctx._clock.now()
    for k, (index, entry) in enumerate(slots):
        if entry is not None and entry.state is EntryState.DONE:
            results[k] = entry.value
        elif entry is not None and entry.state is EntryState.ERROR:
            failed[k] = entry
        elif (
            entry is not None and entry.state is EntryState.RETRYING and _later(entry.wake_at, now)
        ):
            retrying.append(entry)
        else:
            tries = entry.tries if entry is not None else 0
            jobs.append(_job(ctx, k, index, f"{name}[{k}]", bodies[k], tries))
    if jobs:
        _run(ctx, head, name, jobs, limit, results, failed, retrying)
    if ctx.halted is not None:
        raise ctx.halted  # a durable call inside a branch, or a lost lease
    if retrying:
        raise ctx._halt(_park(ctx, name, retrying))
    if failed:
        raise ParallelError(f"{call}({name!r})", failures(failed, slots), len(bodies))
    return results


def _later(when: datetime | None, now: datetime) -> bool:
    return when is not None and when > now


def _job(ctx: Context, k: int, index: int, name: str, body: Body, tries: int) -> Job:
    fn, args = body
    store, run_id, clock, trace = ctx._store, ctx.run_id, ctx._clock, ctx._trace

    def capture() -> Any:
        captured = capturing(store, run_id, index, name, clock)
        if trace is None:
            return captured
        # The branch's span, current where its body runs (its thread, its task): the
        # branches of one call are sibling spans under the attempt.
        return _spanned(captured, trace.step(name, index, tries + 1))

    return Job(k, fn, args, capture, tries, {"index": index, "name": name})


@contextmanager
def _spanned(
    captured: AbstractContextManager[Any], span: AbstractContextManager[Any]
) -> Iterator[None]:
    with captured, span:
        yield


def _run(
    ctx: Context,
    head: int,
    name: str,
    jobs: list[Job],
    limit: int,
    results: list[Any],
    failed: dict[int, JournalEntry],
    retrying: list[JournalEntry],
) -> None:
    """Run the jobs; journal each outcome on this (the handler's) thread as it comes."""
    branches = Branches(jobs, limit, ctx.interruption)
    ctx._in_step = name
    ctx._live.step = (f"#{head} {name!r} ({len(jobs)} branches)", ctx._clock.now())
    caller = step_caller.get()
    interrupt: BaseException | None = None
    branches.start()
    try:
        for _ in jobs:
            out = branches.next() if caller is None else caller(branches.next, (), {})
            if not out.ran:
                continue
            if isinstance(out.value, Interrupt) and not out.ok:
                interrupt = interrupt or out.value
                branches.stop()
                continue
            entry = _journal(ctx, out)
            if entry.state is EntryState.DONE:
                results[out.job.key] = entry.value
            elif entry.state is EntryState.ERROR:
                failed[out.job.key] = entry
            else:
                retrying.append(entry)
            if ctx.interruption() is not None:
                branches.stop()  # cancelled, past its deadline or budget: start no more
    except BaseException:
        branches.stop()
        raise
    finally:
        branches.close()
        ctx._in_step = None
        ctx._live.step = None
    if interrupt is not None:
        raise interrupt
    ctx.check()


def _journal(ctx: Context, out: Outcome) -> JournalEntry:
    """Checkpoint one branch's outcome now: its result, its retry, or its error."""
    job = out.job
    index, name = job.extra["index"], job.extra["name"]
    tries = job.tries + 1
    if out.ok:
        try:
            value = json.loads(dumps(out.value, f"the result of step {name!r}"))
        except SerializationError as e:
            return _failed(ctx, index, name, e, _policy(job.fn), tries, out.seconds)
        entry = ctx._entry(
            index, CallKind.STEP, name, EntryState.DONE, value, tries=tries, duration=out.seconds
        )
        ctx._record(entry)
        return entry
    return _failed(ctx, index, name, out.value, _policy(job.fn), tries, out.seconds)


def _policy(fn: Callable[..., Any]) -> RetryPolicy:
    return options_of(getattr(fn, "func", fn)).retry


def _refuse_named_limits(ctx: Context, call: str, name: str, bodies: list[Body]) -> None:
    """A branch body that names a limit (@step(limit=...)) is refused, not run unlimited:
    named limits are taken by ctx.step steps only (issue 37)."""
    for fn, _ in bodies:
        limit = options_of(getattr(fn, "func", fn)).limit
        if limit is not None:
            raise ctx._halt(
                misuse(
                    f"{call}({name!r}): its body takes limit {limit!r}, which only ctx.step"
                    " steps take; call ctx.step for each item instead"
                )
            )


def _failed(
    ctx: Context,
    index: int,
    name: str,
    exc: BaseException,
    policy: RetryPolicy,
    tries: int,
    seconds: float,
) -> JournalEntry:
    """A branch's try failed: its retry after its backoff, or its error for good."""
    final = (
        not isinstance(exc, Exception) or policy.final(exc) or isinstance(exc, SerializationError)
    )
    if final:
        mark_non_retryable(exc)
    error = error_dict(exc)
    if (
        isinstance(exc, Exception)
        and tries < policy.max_attempts
        and not final
        and policy.retryable(exc)
    ):
        entry = ctx._entry(
            index,
            CallKind.STEP,
            name,
            EntryState.RETRYING,
            error,
            wake_at=ctx._clock.now() + policy.delay(tries),
            tries=tries,
            duration=seconds,
        )
        ctx._record(entry)
        return entry
    entry = ctx._entry(
        index, CallKind.STEP, name, EntryState.ERROR, error, tries=tries, duration=seconds
    )
    ctx._record(entry, ("step failed", {"name": name, "index": index, "error": error_line(error)}))
    return entry


def _park(ctx: Context, name: str, retrying: list[JournalEntry]) -> BaseException:
    """Every branch has ended but some wait for a retry: park until the earliest is due."""
    first = min(retrying, key=lambda e: e.wake_at or ctx._clock.now())
    wake_at = first.wake_at or ctx._clock.now()
    data = {
        "name": name,
        "branches": sorted(e.name for e in retrying)[:20],
        "count": len(retrying),
        "at": wake_at.isoformat(timespec="microseconds"),
        "error": error_line(first.value or {}),
    }
    return Suspend(RunStatus.QUEUED, wake_at, None, ("branch retries scheduled", data))


def failures(
    failed: dict[int, JournalEntry], slots: list[tuple[int, JournalEntry | None]]
) -> list[dict[str, Any]]:
    out = []
    for k in sorted(failed):
        entry = failed[k]
        error = entry.value if isinstance(entry.value, dict) else {}
        item: dict[str, Any] = {"index": k, "name": entry.name, "call_index": slots[k][0]}
        if error.get("child_run_id"):
            item["child_run_id"] = error["child_run_id"]
        item["error"] = error_line(error)
        out.append(item)
    return out


__all__ = ["Host", "ShapeChanged", "check_fanout", "failures", "header", "misuse", "run_steps"]
