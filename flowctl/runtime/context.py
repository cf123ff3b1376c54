"""The replay context: what a workflow handler calls to do anything durable.

Every time a run resumes its handler starts again from the top, and each durable
call takes the next call index. The journal row at that index decides what
happens (DESIGN.md, "The execution model"). All durable calls pass through one
gate, `_next_call`, which allocates the index and checks kind and name.
"""

from __future__ import annotations

import contextvars
import functools
import json
import random as _random
import threading
import uuid as _uuid
from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from flowctl.clock import Clock
from flowctl.durations import Duration
from flowctl.errors import (
    DurableCallError,
    Interrupt,
    NonDeterminismError,
    SerializationError,
    SignalTimeoutError,
    UsageError,
    mark_non_retryable,
)
from flowctl.fanout import call_key, item_key
from flowctl.limits import lone_surrogate
from flowctl.model import CallKind, EntryState, JournalEntry, RunStatus
from flowctl.output import capturing
from flowctl.retry import RetryPolicy, StepOptions, options_of
from flowctl.runtime import limited, timed
from flowctl.runtime.branches import call_body, is_async
from flowctl.runtime.children import run_children
from flowctl.runtime.fanout import check_fanout, run_steps
from flowctl.runtime.live import LiveRun
from flowctl.runtime.recorded import error_dict, error_line, rebuild_error
from flowctl.runtime.suspend import Suspend, step_caller
from flowctl.store import Lease, dumps
from flowctl.tracing.ids import run_trace

if TYPE_CHECKING:
    from flowctl.store import Claim, Store
    from flowctl.tracing import Attempt

# Values a JSON round trip returns unchanged, so a step's result of one of these types is
# not round-tripped (a float is not among them: NaN and infinities are refused).
_SAME_AFTER_JSON = frozenset({str, int, bool, type(None)})

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)
_NO_SPAN = nullcontext()  # a step's span when traces are off (reentrant: shared)


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class LeaseLost(Interrupt):
    """Our fence moved on: another worker owns the run now. Abandon it quietly."""

    reason = "lease lost"


class ChildLauncher:
    """Starts child runs for `ctx.child`; provided by the engine so context stays store-level."""

    def start_child(self, parent: Context, target: str, input: dict[str, Any], key: str) -> str:
        raise NotImplementedError


# A context variable, not a thread-local: the batch runner (flowctl.daemon.batch) runs several
# handlers on one thread, each in its own greenlet, which has its own context variables.
_current: contextvars.ContextVar[Context | None] = contextvars.ContextVar(
    "flowctl_context", default=None
)


def current() -> Context | None:
    """The context of the handler running here (this thread, or this greenlet), if any."""
    return _current.get()


def _check_text(text: str, what: str) -> None:
    """SerializationError for a string holding a lone surrogate: no store takes it, and a
    write that failed on it would crash the worker, not the step."""
    bad = lone_surrogate(text)
    if bad is not None:
        raise mark_non_retryable(  # the same code gives the same text again
            SerializationError(
                f"{what} holds a lone UTF-16 surrogate ('{bad}'), which is not text: give"
                " valid Unicode"
            )
        )


class Context:
    """Passed to every handler as its first argument: `def handler(ctx, **input)`."""

    def __init__(
        self,
        store: Store,
        claim: Claim,
        clock: Clock,
        *,
        journal: dict[int, JournalEntry] | None = None,
        versions: dict[str, int] | None = None,
        live: LiveRun | None = None,
        children: ChildLauncher | None = None,
        on_checkpoint: Callable[[JournalEntry], None] | None = None,
        trace: Attempt | None = None,
    ) -> None:
        run = claim.run
        self.run_id = run.run_id
        self.workflow = run.workflow
        self.input: dict[str, Any] = run.input if isinstance(run.input, dict) else {}
        self.attempt = run.attempt
        self.cwd = run.cwd
        self._store = store
        self._clock = clock
        self._journal = journal if journal is not None else store.journal(run.run_id)
        self._max_index = max(self._journal, default=-1)
        self._versions = versions if versions is not None else store.versions(run.run_id)
        self._index = 0
        self._in_step: str | None = None
        self._active = False
        self._thread: int | None = None  # the handler's thread (threading.get_ident)
        self._token: contextvars.Token[Context | None] | None = None
        # Set when a durable call ends the attempt (suspend, non-determinism, lost lease,
        # a durable call inside a step). User code may catch it (`except BaseException`,
        # or `except Exception` for the FlowctlError ones), so the engine reads it back and
        # every later durable call raises it again: the run never goes on past it.
        self.halted: BaseException | None = None
        self._live = live or LiveRun(claim.lease, clock, run.exec_spent, run.timeout)
        self._children = children
        self._on_checkpoint = on_checkpoint
        # Whether the run's row may still carry suspicion (reclaims, suspect) for progress
        # to clear: the claim says; the first checkpoint clears it.
        self._suspicion = bool(run.reclaims or run.suspect)
        # Never waits in memory (_rest): a keyed run's slot of its key is released when
        # it parks, and a suspect runs alone, its slot held.
        self._restless = run.flow_key is not None or run.suspect or run.solo
        self._deadline = run.deadline
        # The last step's checkpoint, not yet written: committed before any later durable
        # call (the gate) or with the run's ending (the engine), so it is durable before
        # anything after it runs, and a run that returns right after it commits once.
        self.pending: JournalEntry | None = None
        self._trace = trace  # the attempt's span, when traces are on
        self._traceparent = run.traceparent

    @property
    def _lease(self) -> Lease:
        """The lease this handler writes under: its claim's, or its resume's after a rest."""
        return self._live.lease

    def trace_link(self) -> str:
        """The W3C traceparent a child run started now joins: the current step's or
        attempt's span when traces are on, else this run's own span (which is derived,
        so the child is in this run's trace either way)."""
        if self._trace is not None:
            return self._trace.link()
        return run_trace(self.run_id, self._traceparent).traceparent()

    # -- the gate ------------------------------------------------------------

    def _guard(self, what: str, *, flush: bool = True) -> None:
        """Checks every durable call makes first; and the last step's checkpoint committed
        (`flush=False`: the call writes it itself, with its own first write)."""
        if not self._active:
            raise DurableCallError(
                f"ctx.{what}() called outside a running handler; durable calls work only while"
                " flowctl runs the workflow"
            )
        if self.halted is not None:
            raise self.halted
        if self._in_step is not None:
            raise self._halt(
                DurableCallError(
                    f"ctx.{what}() called inside step {self._in_step!r}: steps do not nest; make"
                    " durable calls from the workflow function, not from a step"
                )
            )
        if threading.get_ident() != self._thread:
            raise DurableCallError(f"ctx.{what}() called from another thread than the handler's")
        if flush and self.pending is not None:
            self.flush()  # the last step's checkpoint is durable before this call does anything
        self.check()
        if self._live.pause_requested:
            # An operator paused the run: park it here, before this call; nothing in flight
            # is interrupted, and the replay after resume reaches this call again.
            raise self._halt(
                Suspend(RunStatus.PAUSED, None, None, ("pause reached", {"index": self._index}))
            )

    def _halt(self, exc: E) -> E:
        """Remember what ends this attempt, so that catching it changes nothing."""
        if self.halted is None:
            self.halted = exc
        return exc

    def _lease_lost(self) -> LeaseLost:
        """A fenced write was refused: the run is another worker's now. The attempt halts,
        and the engine abandons the run without writing an outcome."""
        return self._halt(LeaseLost(self.run_id))

    def _next_call(self, kind: CallKind, name: str) -> tuple[int, JournalEntry | None]:
        if not name.isascii():
            _check_text(name, f"the name of a {kind} call")
        index, self._index = self._index, self._index + 1
        entry = self._journal.get(index)
        if entry is not None and (entry.kind, entry.name) != (kind, name):
            raise self._halt(
                NonDeterminismError(
                    f"run {self.run_id}: call #{index} was recorded as {entry.kind}"
                    f" {entry.name!r} but the workflow now makes {kind} {name!r}; let old runs"
                    " finish, or guard the change with ctx.version()"
                )
            )
        return index, entry

    def _record(self, entry: JournalEntry, event: tuple[str, dict[str, Any]] | None = None) -> None:
        if self.pending is not None:
            self.flush()
        ok = self._store.record_entry(
            self._lease, entry, self._clock.now(), event=event, suspicion=self._suspicion
        )
        if not ok:
            raise self._lease_lost()
        self._suspicion = False  # cleared by that write, under the lease
        self.recorded(entry)

    def recorded(self, entry: JournalEntry) -> None:
        """`entry` is committed (here, or by the engine with the run's ending)."""
        self._journal[entry.call_index] = entry
        self._max_index = max(self._max_index, entry.call_index)
        if self._on_checkpoint is not None:
            self._on_checkpoint(entry)

    def flush(self) -> None:
        """Commit the pending checkpoint, if any (raises LeaseLost, halting, if refused)."""
        entry, self.pending = self.pending, None
        if entry is not None:
            self._record(entry)

    def _entry(
        self, index: int, kind: CallKind, name: str, state: EntryState, value: Any, **kw: Any
    ) -> JournalEntry:
        return JournalEntry(
            self.run_id, index, kind, name, state, value, recorded_at=self._clock.now(), **kw
        )

    # -- interruption --------------------------------------------------------

    def interruption(self) -> Interrupt | None:
        """The pending cancellation, deadline or timeout, if any. Safe inside a step."""
        return self._live.interruption()

    @property
    def cancelled(self) -> bool:
        """True once an operator asked to cancel this run (learned at the next heartbeat)."""
        from flowctl.errors import Cancelled

        return isinstance(self._live.interruption(), Cancelled)

    @property
    def pause_requested(self) -> bool:
        """True once an operator asked to pause this run (learned at the next heartbeat); the
        run parks at its next durable call, so a long step may check it to stop early."""
        return self._live.pause_requested

    def check(self) -> None:
        """Raise the pending Cancelled / DeadlineExceededError / ExecutionTimeoutError, if any."""
        exc = self._live.interruption()
        if exc is not None:
            raise exc

    # -- durable calls -------------------------------------------------------

    def step(self, name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run `fn(*args, **kwargs)` once and journal its JSON result (or its error).

        Replay returns the recorded result or re-raises the recorded error without
        calling `fn`. Retry options come from `@flowctl.step(retry=...)` on `fn`.
        """
        self._guard("step")
        if not isinstance(name, str) or not name:
            raise _misuse("ctx.step() needs a non-empty step name as its first argument")
        index, entry = self._next_call(CallKind.STEP, name)
        tries = 0
        if entry is not None:
            if entry.state is EntryState.DONE:
                return entry.value  # type: ignore[no-any-return]
            if entry.state is EntryState.ERROR:
                raise rebuild_error(entry.value)
            if entry.state is EntryState.RETRYING:
                if entry.wake_at is not None and entry.wake_at > self._clock.now():
                    waiting = timed.retry_suspension(entry, journaled=True)  # replayed early
                    if not self._rest(waiting):  # a short wait: waited out here
                        raise self._halt(waiting)
                tries = entry.tries
        options = options_of(fn)
        while True:
            tried = self._try_step(index, name, fn, args, kwargs, options, tries)
            if not isinstance(tried, Suspend):
                return tried
            # Its retry: waited out here (a short backoff in the batch runner), else parked.
            if tried.entry is None or not self._rest(tried):
                raise self._halt(tried)
            self.recorded(tried.entry)
            tries = tried.entry.tries

    def _try_step(
        self,
        index: int,
        name: str,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: StepOptions,
        tries: int,
    ) -> T | Suspend:
        """One try of a step's body: its result (checkpointed at the next durable call),
        or the suspension that retries it; raises when it fails for good or halts."""
        policy = options.retry
        if options.limit is not None:  # taken before the body starts, or the run halts
            halt = limited.take(self._store, self._lease, options.limit, index, name, self._clock)
            if halt is not None:
                raise self._lease_lost() if halt is limited.LOST else self._halt(halt)
        started = self._clock.monotonic()
        self._in_step = name
        self._live.step = (f"#{index} {name!r}", self._clock.now())
        try:
            span = _NO_SPAN if self._trace is None else self._trace.step(name, index, tries + 1)
            with capturing(self._store, self.run_id, index, name, self._clock), span:
                result = _call(fn, args, kwargs)
            if isinstance(result, str) and not result.isascii():
                _check_text(result, f"the result of step {name!r}")
            if self.halted is None and type(result) not in _SAME_AFTER_JSON:
                # Return what replay will return: a tuple comes back as a list, int dict
                # keys as strings, on the first run too. A value that is not JSON fails here.
                result = json.loads(dumps(result, f"the result of step {name!r}"))
        except Interrupt:
            raise
        except Exception as exc:
            if self.halted is not None:
                # A durable call inside the step: a bug in the workflow, not a step failure.
                raise self.halted from None
            retry = self._step_failed(index, name, exc, policy, tries + 1, started)
            if retry is not None:
                return retry
            raise
        finally:
            self._in_step = None
            self._live.step = None
            if options.limit is not None:
                self._store.release_limit(self._lease, options.limit, index, self._clock.now())
        if self.halted is not None:
            raise self.halted  # the step swallowed the DurableCallError it caused
        duration = self._clock.monotonic() - started
        done = self._entry(
            index, CallKind.STEP, name, EntryState.DONE, result, tries=tries + 1, duration=duration
        )
        # Written at the next durable call or with the run's ending, whichever is first:
        # either way before anything after this step runs that could depend on it durably.
        self.pending = done
        return result  # type: ignore[no-any-return]

    def _step_failed(
        self, index: int, name: str, exc: Exception, policy: RetryPolicy, tries: int, started: float
    ) -> Suspend | None:
        """Try `tries` of a step raised `exc`: the suspension that retries it after its
        backoff, or None when it fails for good (its error recorded, to re-raise on replay)."""
        duration = self._clock.monotonic() - started
        # A result that is not JSON: the same code returns the same value again.
        final = policy.final(exc) or isinstance(exc, SerializationError)
        if final:
            mark_non_retryable(exc)
        error = error_dict(exc)
        if tries < policy.max_attempts and not final and policy.retryable(exc):
            wake_at = self._clock.now() + policy.delay(tries)
            retry = self._entry(
                index,
                CallKind.STEP,
                name,
                EntryState.RETRYING,
                error,
                wake_at=wake_at,
                tries=tries,
                duration=duration,
            )
            return timed.retry_suspension(retry)
        failed = self._entry(
            index, CallKind.STEP, name, EntryState.ERROR, error, tries=tries, duration=duration
        )
        self._record(
            failed, ("step failed", {"name": name, "index": index, "error": error_line(error)})
        )
        return None

    def _rest(self, suspend: Suspend) -> bool:
        """Wait out `suspend` in memory here if the batch runner allows it (runtime.timed),
        the last step's checkpoint written with its first write: True once the run is
        taken back; False, park it as usual."""
        if self._restless or self._trace is not None:
            return False
        store, lease, live, clock = self._store, self._lease, self._live, self._clock
        last = self.pending
        margin = timed.begin_rest(
            store, lease, live, clock, suspend, deadline=self._deadline, checkpoint=last
        )
        if margin is None:
            return False
        if last is not None:  # written with the rest
            self.pending = None
            self.recorded(last)
        parked = timed.end_rest(store, lease, live, clock, suspend, margin, attempt=self.attempt)
        if parked is not None:
            raise self._halt(parked)
        return True  # taken back: live.lease is the new lease

    def sleep(self, duration: Duration, *, name: str = "sleep") -> None:
        """Sleep durably: the deadline is recorded first; a restart never restarts it."""
        self._guard("sleep", flush=False)  # _sleep writes it with its first write
        delta = timed.duration_of(duration)
        self._sleep(name, lambda now: now + delta)

    def sleep_until(self, when: datetime | float | int, *, name: str = "sleep") -> None:
        """Sleep until a timezone-aware datetime or an epoch time in seconds."""
        self._guard("sleep_until", flush=False)
        target = timed.target_of(when)
        self._sleep(name, lambda now: target)

    def _sleep(self, name: str, deadline: Callable[[datetime], datetime]) -> None:
        index, entry = self._next_call(CallKind.SLEEP, name)
        now = self._clock.now()

        def done(wake_at: datetime, at: datetime) -> JournalEntry:
            return self._entry(
                index, CallKind.SLEEP, name, EntryState.DONE, None, wake_at=wake_at, resolved_at=at
            )

        if entry is None:
            wake_at = deadline(now)
            if wake_at <= now:
                # Fast path: still recorded, so a later code change cannot alter this run.
                self._record(done(wake_at, now))
                return
            pending = self._entry(
                index, CallKind.SLEEP, name, EntryState.PENDING, None, wake_at=wake_at
            )
            suspend = timed.sleep_suspension(pending, now)
            if not self._rest(suspend):  # a short sleep in the batch runner: waited out here
                raise self._halt(suspend)
            self.recorded(done(wake_at, self._clock.now()))  # as the resume wrote it
            return
        if entry.state is EntryState.DONE:
            return
        recorded = entry.wake_at  # the recorded deadline stands across restarts and deploys
        if recorded is None:
            raise RuntimeError(f"run {self.run_id}: sleep #{index} was journaled without wake_at")
        if recorded > now:  # replayed before its wake: a short rest of it is waited out here
            waiting = timed.resumed_sleep(index, recorded, entry)
            if not self._rest(waiting):
                raise self._halt(waiting)
            self.recorded(done(recorded, self._clock.now()))  # as the resume wrote it
            return
        self._record(done(recorded, now))

    def wait_signal(
        self, name: str, timeout: Duration | None = None, default: Any = MISSING
    ) -> Any:
        """Wait for signal `name` and return its payload.

        Signals sent before the wait are buffered and consumed in order. On timeout,
        return `default` when given, else raise SignalTimeoutError.
        """
        self._guard("wait_signal")
        if not isinstance(name, str) or not name:
            raise _misuse("ctx.wait_signal() needs a signal name")
        index, entry = self._next_call(CallKind.SIGNAL, name)
        if entry is not None and entry.state is EntryState.DONE:
            return self._signal_value(name, entry.value, default)
        ok, payload, found = self._store.consume_signal(self._lease, name, index, self._clock.now())
        if not ok:
            raise self._lease_lost()
        if found:
            self._journal[index] = self._entry(
                index,
                CallKind.SIGNAL,
                name,
                EntryState.DONE,
                {"payload": payload, "timed_out": False},
            )
            self._max_index = max(self._max_index, index)
            return payload
        now = self._clock.now()
        if entry is None:
            timeout_at = None if timeout is None else now + timed.duration_of(timeout)
        else:
            timeout_at = entry.wake_at  # the recorded timeout stands
        if timeout_at is not None and timeout_at <= now:
            value = {"payload": None, "timed_out": True}
            self._record(
                self._entry(
                    index,
                    CallKind.SIGNAL,
                    name,
                    EntryState.DONE,
                    value,
                    wake_at=timeout_at,
                    resolved_at=now,
                ),
                ("signal timed out", {"name": name, "index": index}),
            )
            return self._signal_value(name, value, default)
        if entry is None:
            entry = self._entry(
                index, CallKind.SIGNAL, name, EntryState.PENDING, None, wake_at=timeout_at
            )
        raise self._halt(timed.signal_suspension(entry, timeout_at))

    def _signal_value(self, name: str, value: Any, default: Any) -> Any:
        if value.get("timed_out"):
            if default is not MISSING:
                return default
            raise SignalTimeoutError(f"no signal {name!r} arrived before the timeout")
        return value.get("payload")

    def child(self, target: str, input: dict[str, Any] | None = None) -> Any:
        """Start a child workflow (once) and wait durably for its result."""
        self._guard("child")
        name = f"workflow {target}"
        index, entry = self._next_call(CallKind.STEP, name)
        if entry is not None and entry.state is EntryState.DONE:
            return entry.value
        if entry is not None and entry.state is EntryState.ERROR:
            raise rebuild_error(entry.value)
        if self._children is None:
            raise DurableCallError("ctx.child() is not available here")
        key = f"child:{self.run_id}:{index}"
        child_id = self._children.start_child(self, target, dict(input or {}), key)
        child = self._store.get_run(child_id)
        if child.status is RunStatus.COMPLETED:
            self._record(self._entry(index, CallKind.STEP, name, EntryState.DONE, child.result))
            return child.result
        if child.status.is_terminal:
            err = dict(
                child.error
                or {"type": "ChildFailed", "message": f"child run {child_id} {child.status}"}
            )
            err["child_run_id"] = child_id
            self._record(self._entry(index, CallKind.STEP, name, EntryState.ERROR, err))
            raise rebuild_error(err)
        pending = self._entry(
            index, CallKind.STEP, name, EntryState.PENDING, {"child_run_id": child_id}
        )
        raise self._halt(
            Suspend(
                RunStatus.WAITING,
                None,
                pending,
                ("waiting for child", {"child_run_id": child_id, "index": index}),
            )
        )

    def map(
        self,
        name: str,
        fn: Callable[..., Any],
        items: list[Any] | tuple[Any, ...],
        *,
        max_concurrency: int | None = None,
    ) -> list[Any]:
        """Run `fn(item)` for each item as its own step `f"{name}[{i}]"`, concurrently (at
        most `max_concurrency` at once), each result journaled as its body returns; the
        results in item order. Branches that fail for good raise ParallelError once all
        have ended; a new attempt runs only the branches without a result."""
        self._guard("map")
        if not isinstance(name, str) or not name:
            raise _misuse("ctx.map() needs a non-empty name as its first argument")
        if not isinstance(items, list | tuple):
            raise _misuse(
                f"ctx.map({name!r}) takes its items as a list or tuple, got"
                f" {type(items).__name__}: pass list(...) of them"
            )
        limit = check_fanout("ctx.map", name, len(items), max_concurrency)
        bodies = [(fn, (item,)) for item in items]
        return run_steps(self, "ctx.map", name, bodies, [item_key(i) for i in items], limit)

    def parallel(
        self,
        name: str,
        calls: list[Callable[[], Any]] | tuple[Callable[[], Any], ...],
        *,
        max_concurrency: int | None = None,
    ) -> list[Any]:
        """Run each zero-argument callable (`lambda: fetch(a)`, `functools.partial`) as its
        own step `f"{name}[{i}]"`, concurrently; the results in order (see `map`)."""
        self._guard("parallel")
        if not isinstance(name, str) or not name:
            raise _misuse("ctx.parallel() needs a non-empty name as its first argument")
        if not isinstance(calls, list | tuple) or not all(callable(c) for c in calls):
            raise _misuse(
                f"ctx.parallel({name!r}) takes a list of zero-argument callables, e.g."
                " [lambda: fetch(a), lambda: fetch(b)]"
            )
        limit = check_fanout("ctx.parallel", name, len(calls), max_concurrency)
        bodies: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [(c, ()) for c in calls]
        return run_steps(self, "ctx.parallel", name, bodies, [call_key(c) for c in calls], limit)

    def children(
        self,
        target: str,
        inputs: list[dict[str, Any]] | tuple[dict[str, Any], ...],
        *,
        max_concurrency: int | None = None,
    ) -> list[Any]:
        """Start one child run of `target` per input (each once) and wait durably for all:
        the run parks `waiting`, holding no worker, until they have ended; their results in
        input order. At most `max_concurrency` children are active at once. Children that
        ended dead or cancelled raise ParallelError once all have ended."""
        self._guard("children")
        if not isinstance(target, str) or not target:
            raise _misuse("ctx.children() needs a workflow target as its first argument")
        if not isinstance(inputs, list | tuple) or not all(isinstance(i, dict) for i in inputs):
            raise _misuse(
                f"ctx.children({target!r}) takes its inputs as a list of dicts, one per child"
            )
        if self._children is None:
            raise DurableCallError("ctx.children() is not available here")
        limit = check_fanout("ctx.children", target, len(inputs), max_concurrency)
        launcher = self._children

        def start(target: str, input: dict[str, Any], key: str) -> str:
            return launcher.start_child(self, target, dict(input), key)

        keys = [item_key(i) for i in inputs]
        return run_children(self, target, list(inputs), keys, limit, start)

    def now(self) -> datetime:
        """The current time, recorded: replay returns the same instant."""
        return self._recorded_value(
            CallKind.NOW,
            self._clock.now,
            encode=lambda value: value.isoformat(timespec="microseconds"),
            decode=datetime.fromisoformat,
        )

    def uuid(self) -> str:
        """A random UUID (string), recorded."""
        return self._recorded_value(CallKind.UUID, lambda: str(_uuid.uuid4()), decode=str)

    def random(self) -> float:
        """A random float in [0, 1), recorded."""
        return self._recorded_value(CallKind.RANDOM, _random.random, decode=float)

    def _recorded_value(
        self,
        kind: CallKind,
        fresh: Callable[[], T],
        *,
        decode: Callable[[Any], T],
        encode: Callable[[T], Any] = lambda value: value,
    ) -> T:
        """now/uuid/random: the value journaled at this call index, else a fresh one, journaled.

        The call's name is its kind. A fresh value is returned as made (not re-read from its
        JSON), so the first run and every replay of it see an equal value.
        """
        name = str(kind)
        self._guard(name)
        index, entry = self._next_call(kind, name)
        if entry is not None:
            return decode(entry.value)
        value = fresh()
        self._record(self._entry(index, kind, name, EntryState.DONE, encode(value)))
        return value

    def version(self, change_id: str, min_version: int, max_version: int) -> int:
        """Branch safely on a code change: old runs keep `min_version`, new ones get `max_version`.

        Keyed by change_id; does not take a call index.
        """
        self._guard("version")
        if min_version > max_version:
            raise _misuse(
                f"ctx.version({change_id!r}): min {min_version} is above max {max_version}"
            )
        recorded = self._versions.get(change_id)
        if recorded is not None:
            if not min_version <= recorded <= max_version:
                raise self._halt(
                    NonDeterminismError(
                        f"run {self.run_id}: version {change_id!r} was recorded as {recorded}, outside"
                        f" the supported range {min_version}..{max_version}"
                    )
                )
            return recorded
        at_frontier = self._index > self._max_index
        value = max_version if at_frontier else min_version
        if not self._store.record_version(self._lease, change_id, value, self._clock.now()):
            raise self._lease_lost()
        self._versions[change_id] = value
        return value

    def publish(self, key: str, value: Any) -> None:
        """Show a status value to operators (`flowctl show`, the TUI), e.g. progress.

        Not a journaled call: it takes no call index. While replaying recorded history the
        write is skipped, since the same code published the same value the first time.
        """
        self._guard("publish")
        if not isinstance(key, str) or not key:
            raise _misuse("ctx.publish() needs a non-empty string key")
        if not key.isascii():
            _check_text(key, "the ctx.publish() key")
        if self._index <= self._max_index:
            return
        if not self._store.publish(self._lease, key, value, self._clock.now()):
            raise self._lease_lost()

    # -- engine hooks ----------------------------------------------------------

    def _enter(self) -> None:
        self._active = True
        self._thread = threading.get_ident()
        self._token = _current.set(self)

    def _exit(self) -> None:
        self._active = False
        if self._token is not None:
            _current.reset(self._token)
            self._token = None

    def exec_spent(self) -> float:
        return self._live.spent()


def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call a step's body here, or through the batch runner's caller; an `async def` body is
    awaited on an event loop (on the runner's pool, where there is one)."""
    caller = step_caller.get()
    if is_async(fn):
        fn, args, kwargs = functools.partial(call_body, fn), (args, kwargs), {}
    return fn(*args, **kwargs) if caller is None else caller(fn, args, kwargs)


def _misuse(message: str) -> UsageError:
    """A durable call used wrongly: the same code does the same again, so no retry can fix it."""
    return mark_non_retryable(UsageError(message))


__all__ = [
    "MISSING",
    "Context",
    "LeaseLost",
    "LiveRun",
    "Suspend",
    "current",
    "error_dict",
    "rebuild_error",
    "timedelta",
]
