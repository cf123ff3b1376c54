"""Execute one claimed run: replay its handler and map how it stopped to a store transition.

Returned: completed, suspended (sleeping / waiting / queued for a retry), failed
(retried or dead-lettered), cancelled, or abandoned because the lease was lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flowctl.clock import Clock
from flowctl.errors import (
    DatabaseUnavailable,
    FlowctlError,
    InputError,
    Interrupt,
    SerializationError,
)
from flowctl.model import JournalEntry, RunStatus
from flowctl.runtime.context import ChildLauncher, Context, LeaseLost, LiveRun, Suspend, error_dict
from flowctl.runtime.suspend import Parked
from flowctl.runtime.targets import Loader, WorkflowDef, load_child
from flowctl.store import Claim, Store
from flowctl.tracing import Attempt, Tracer, tracer
from flowctl.transitions import Ending, ErrorKind, ending, stop_kind

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    run_id: str
    status: RunStatus | None  # None: the lease was lost and nothing was written
    run_at: datetime | None = None
    result: Any = None
    error: dict[str, Any] | None = None


class Engine:
    """Runs handlers against the store. Knows nothing of daemons, CLIs or terminals."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        loader: Loader | None = None,
        *,
        foreground: bool = False,
    ) -> None:
        self.store = store
        self.clock = clock
        self.loader = loader or Loader()
        self.children = _Children(self)
        # In a foreground worker (`flowctl run --wait`) the operator's Ctrl-C stops this
        # process and leaves the run to a daemon. It is told apart from a KeyboardInterrupt
        # the workflow's own code raises by `operator_interrupted`, which the foreground
        # worker's SIGINT handler sets; a daemon handles its signals itself.
        self.foreground = foreground
        self.operator_interrupted = False
        self._unloadable: set[tuple[str, str]] = set()  # (target, error) logged already
        # Spans for attempts and steps when the OTEL_* environment asks (flowctl.tracing);
        # None, the usual case, costs one check per attempt and per step.
        self.tracer: Tracer | None = tracer()

    def execute(
        self,
        claim: Claim,
        live: LiveRun | None = None,
        on_checkpoint: Callable[[JournalEntry], None] | None = None,
    ) -> Outcome:
        """Replay the claimed run's handler and write how it ended (or nothing, if the
        lease was lost): completed, parked, failed or ended, as its Outcome says."""
        if self.tracer is None:
            return self._execute(claim, live, on_checkpoint, None)
        return self._traced(self.tracer, claim, live, on_checkpoint)

    def _traced(
        self,
        tracer: Tracer,
        claim: Claim,
        live: LiveRun | None,
        on_checkpoint: Callable[[JournalEntry], None] | None,
    ) -> Outcome:
        """execute, inside the attempt's span; the run's own span once the run ends."""
        attempt = tracer.attempt(claim.run, claim.woke_from)
        try:
            with attempt.active():
                outcome = self._execute(claim, live, on_checkpoint, attempt)
        except BaseException as e:
            attempt.ended(None, error={"type": type(e).__name__, "message": str(e)})
            raise
        attempt.ended(outcome.status, run_at=outcome.run_at, error=outcome.error)
        if outcome.status is not None and outcome.status.is_terminal:
            tracer.run_ended(claim.run, outcome.status, self.clock.now())
        return outcome

    def _execute(
        self,
        claim: Claim,
        live: LiveRun | None,
        on_checkpoint: Callable[[JournalEntry], None] | None,
        attempt: Attempt | None,
    ) -> Outcome:
        run = claim.run
        live = live or LiveRun(claim.lease, self.clock, run.exec_spent, run.timeout)
        wf = self._workflow(claim, live)
        if isinstance(wf, Outcome):
            return wf
        ctx = Context(
            self.store,
            claim,
            self.clock,
            journal=None if claim.journal is None else dict(claim.journal),
            versions=None if claim.versions is None else dict(claim.versions),
            live=live,
            children=self.children,
            on_checkpoint=on_checkpoint,
            trace=attempt,
        )
        stop, result = self._run_handler(wf, ctx, live, run.input)
        if isinstance(stop, DatabaseUnavailable):
            # The database went away under a durable call: no failure of the run's. Nothing
            # is written; its lease lapses and it is reclaimed, replaying what was journaled.
            _flushed(ctx)  # what the step returned is kept, if the database is back already
            raise stop
        if stop is not None:
            # Even when stopping (a drain): what the step returned is kept, not run again.
            if not _flushed(ctx):
                return Outcome(run.run_id, None)
            return self._stopped(claim, live, stop)
        return self._complete(claim, live, ctx, result)

    def _workflow(self, claim: Claim, live: LiveRun) -> WorkflowDef | Outcome:
        """The run's workflow, its input checked against the handler as it is now; else
        the ending that writes (a load failure waits for a fix, an input that no longer
        binds ends the run)."""
        run = claim.run
        source, _ = self.store.run_source(run.run_id) if run.kind == "yaml" else (None, None)
        try:
            wf = self.loader.for_run(run.target, run.kind, run.cwd, source, run.source_hash)
        except FlowctlError as e:
            self._said_unloadable(run.target, e)
            raised = {"type": type(e).__name__, "message": str(e)}
            return self._ended(claim, live, ending(ErrorKind.LOAD, run, raised=raised))
        try:
            wf.check_binds(run.input if isinstance(run.input, dict) else {})
        except InputError as e:
            raised = error_dict(e)
            return self._ended(claim, live, ending(ErrorKind.NON_RETRYABLE, run, raised=raised))
        return wf

    def _run_handler(
        self, wf: WorkflowDef, ctx: Context, live: LiveRun, input: Any
    ) -> tuple[BaseException | None, Any]:
        """Call the handler under `ctx`: (how it stopped, None), or (None, what it returned)."""
        inputs = input if isinstance(input, dict) else {}
        ctx._enter()
        try:
            result = wf.handler(ctx, **inputs)
        except (Exception, Interrupt, Suspend, Parked) as e:
            # What a durable call halted on wins over what user code made of it (caught it
            # and raised something else, say).
            return ctx.halted or e, None
        except BaseException as e:
            if self.operator_interrupted and isinstance(e, KeyboardInterrupt):
                raise
            # SystemExit, KeyboardInterrupt, GeneratorExit from a step or the handler: this
            # attempt fails like any error (retried or dead-lettered), its type recorded. It
            # never escapes to leave the run `running` with nothing in its timeline.
            return ctx.halted or e, None
        else:
            # A handler that swallowed a suspension or non-determinism error, or that was
            # told by the heartbeat to stop, still ends that way.
            return ctx.halted or live.delivered(), result
        finally:
            ctx._exit()

    def _complete(self, claim: Claim, live: LiveRun, ctx: Context, result: Any) -> Outcome:
        """The handler returned: its last step's checkpoint and the completion are one
        transaction (no step ran between them); the claim says whether there is a parent
        or schedule to tell."""
        run = claim.run
        last = ctx.pending
        try:
            ok = self.store.complete_run(
                live.lease,
                result,
                self.clock.now(),
                live.spent(),
                entry=last,
                links=(run.parent_run_id, run.schedule),
            )
        except DatabaseUnavailable:
            raise  # not the run's failure: nothing is written (see execute)
        except (SerializationError, FlowctlError) as e:
            if not _flushed(ctx):
                return Outcome(run.run_id, None)
            # A result that is not JSON fails the same way again: no retry can fix it.
            kind = (
                ErrorKind.NON_RETRYABLE if isinstance(e, SerializationError) else ErrorKind.RAISED
            )
            raised = error_dict(e, with_traceback=False)
            return self._ended(claim, live, ending(kind, run, raised=raised))
        if ok and last is not None:
            ctx.pending = None
            ctx.recorded(last)
        return Outcome(run.run_id, RunStatus.COMPLETED if ok else None, result=result)

    def _stopped(self, claim: Claim, live: LiveRun, stop: BaseException) -> Outcome:
        """Map how a handler stopped to its store transition."""
        run = claim.run
        if isinstance(stop, Parked):  # parked by the handler's own call (Context._rest)
            return Outcome(run.run_id, stop.status, run_at=stop.run_at)
        if isinstance(stop, Suspend):
            applied = self.store.suspend_run(
                live.lease,
                stop.status,
                stop.run_at,
                self.clock.now(),
                live.spent(),
                None if stop.journaled else stop.entry,  # a replay's: left as it stands
                stop.event,
            )
            if applied is None:
                return Outcome(run.run_id, None)
            # The store's run_at (clamped to the deadline), not the one the handler asked for.
            return Outcome(run.run_id, applied.status, run_at=applied.run_at)
        if isinstance(stop, LeaseLost):
            log.info("run %s: lease lost (fence %s); abandoning", run.run_id, live.lease.fence)
            return Outcome(run.run_id, None)
        kind = stop_kind(stop)
        if kind is ErrorKind.CANCELLED:
            run = self.store.get_run(run.run_id)  # with the reason the operator gave
        return self._ended(claim, live, ending(kind, run, raised=error_dict(stop)))

    def _said_unloadable(self, target: str, error: FlowctlError) -> None:
        """Log a workflow that does not load, once per target and error (every run of it
        that wakes meets the same error): its runs wait for it without spending attempts
        (transitions.next_attempt)."""
        key = (target, str(error))
        if key in self._unloadable:
            return
        if len(self._unloadable) < 1024:
            self._unloadable.add(key)
        log.warning(
            "workflow %s does not load (%s): its runs are tried again, 1 s doubling to 10 min,"
            " without spending attempts; fix it, or cancel them",
            target,
            error,
        )

    def _ended(self, claim: Claim, live: LiveRun, end: Ending) -> Outcome:
        """Write the ending transitions.ending decided: the run's end, or a failed attempt."""
        if end.status is None:
            return self._fail(claim, live, end.error)
        return self._end(claim, live, end.status, end.error)

    def _fail(self, claim: Claim, live: LiveRun, error: dict[str, Any]) -> Outcome:
        applied = self.store.fail_attempt(
            live.lease, error, self.clock.now(), live.spent(), retry_at=None
        )
        if applied is None:
            return Outcome(claim.run.run_id, None, error=error)
        return Outcome(claim.run.run_id, applied.status, run_at=applied.run_at, error=error)

    def _end(
        self, claim: Claim, live: LiveRun, status: RunStatus, error: dict[str, Any]
    ) -> Outcome:
        ok = self.store.end_run(live.lease, status, error, self.clock.now(), live.spent())
        return Outcome(claim.run.run_id, status if ok else None, error=error)


def _flushed(ctx: Context) -> bool:
    """Commit the last step's checkpoint before the run's ending is written (the ending
    may be a retry: the step must not run again). False: the lease is lost."""
    try:
        ctx.flush()
    except LeaseLost:
        return False
    return True


class _Children(ChildLauncher):
    """Starts child runs idempotently (the key is parent + call index)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def start_child(self, parent: Context, target: str, input: dict[str, Any], key: str) -> str:
        existing = self.engine.store.get_run_by_key(key)
        if existing is not None:
            return existing.run_id
        wf = load_child(target, parent.cwd)  # a name as `flowctl run NAME` finds it
        new = wf.new_run(
            wf.check_input(input),
            key=key,
            parent_run_id=parent.run_id,
            traceparent=parent.trace_link(),  # the child joins its parent's trace
        )
        run, _ = self.engine.store.create_run(new, self.engine.clock.now())
        return run.run_id
