"""Would the code on disk break a run in flight? Replay its journal and see (`flowctl check`).

The handler is run through the real replay gate (`Context._next_call`) with the run's
journal, so a check finds exactly the non-determinism a resumed run would meet. Nothing
is executed or written: a recorded step returns its recorded result, and the replay stops
at the journal's frontier (the first call with no finished row: the sleep, signal wait or
step the run is parked at), before anything could run, sleep, wait or record.

A changed sleep duration is not a break (the gate compares kind and name; the recorded
deadline stands), nor a change guarded by ctx.version (old runs get their recorded or
minimum version). YAML runs are pinned to the text they started with, so they pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from flowctl.clock import Clock
from flowctl.errors import FlowctlError, Interrupt, NonDeterminismError
from flowctl.model import CallKind, EntryState, JournalEntry, Run
from flowctl.runtime.context import Context, LiveRun, Suspend
from flowctl.runtime.fanout import ShapeChanged
from flowctl.runtime.targets import WorkflowDef
from flowctl.store import Claim, Lease

FIX_VERSION = (
    "guard the change with ctx.version() so runs started under the old code keep the old"
    " path, or let these runs finish before deploying"
)


@dataclass(frozen=True)
class Finding:
    """One run the code on disk would break, and where."""

    run_id: str
    workflow: str
    status: str
    problem: str  # "nondeterminism" | "ends-early" | "error" | "load" | "input"
    call_index: int | None
    recorded: str | None  # the recorded call at call_index, e.g. "step 'charge'"
    now: str | None  # what the code does there now
    message: str
    fix: str

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "workflow": self.workflow,
            "status": self.status,
            "problem": self.problem,
            "call_index": self.call_index,
            "recorded": self.recorded,
            "now": self.now,
            "message": self.message,
            "fix": self.fix,
        }


class _Frontier(BaseException):
    """The replay reached the first call the journal has not finished: it passes."""


class _NoWrites:
    """What a checking Context may reach of a store: nothing is ever written.

    Version markers met for the first time are answered (min/max by the usual rule) and
    kept in memory only; publish is a no-op. Every other store call would mean the replay
    went past the frontier, which the gate prevents.
    """

    def record_version(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def publish(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"replay check: store.{name} reached; nothing may be written")


class _CheckContext(Context):
    """A Context that replays only: the first call without a finished journal row stops it."""

    mismatch: tuple[int, JournalEntry, CallKind, str] | None = None

    def _next_call(self, kind: CallKind, name: str) -> tuple[int, JournalEntry | None]:
        entry = self._journal.get(self._index)
        if entry is not None and (entry.kind, entry.name) != (kind, name):
            self.mismatch = (self._index, entry, kind, name)
        index, entry = super()._next_call(kind, name)  # raises NonDeterminismError on a mismatch
        if entry is None or entry.state not in (EntryState.DONE, EntryState.ERROR):
            raise self._halt(_Frontier())
        return index, entry


def _call(kind: CallKind | str, name: str) -> str:
    return f"{kind} {name!r}"


def check_run(
    run: Run,
    journal: dict[int, JournalEntry],
    versions: dict[str, int],
    wf: WorkflowDef,
    clock: Clock,
    binds: Callable[[WorkflowDef, dict[str, Any]], str | None] | None = None,
) -> Finding | None:
    """Replay one run against `wf`; None when it replays, else what would break."""
    inputs = run.input if isinstance(run.input, dict) else {}
    problem = binds(wf, inputs) if binds is not None else _binds(wf, inputs)
    if problem is not None:
        return _finding(
            run, "input", problem, fix="keep the handler's parameters, or let these runs finish"
        )
    ctx, stop = _replay(run, journal, versions, wf, clock, inputs)
    return _verdict(run, journal, ctx, stop)


def _replay(
    run: Run,
    journal: dict[int, JournalEntry],
    versions: dict[str, int],
    wf: WorkflowDef,
    clock: Clock,
    inputs: dict[str, Any],
) -> tuple[_CheckContext, BaseException | None]:
    """Run the handler through the replay gate up to the journal's frontier: the context
    it ran under, and how it stopped (None: it returned)."""
    lease = Lease(run.run_id, run.fence, "flowctl-check")  # never used to write
    ctx = _CheckContext(
        _NoWrites(),
        Claim(run, lease),
        clock,
        journal=dict(journal),
        versions=dict(versions),
        live=LiveRun(lease, clock, 0.0, None),
    )
    ctx._enter()
    try:
        wf.handler(ctx, **inputs)
    except (Exception, Interrupt, Suspend, _Frontier) as e:
        return ctx, ctx.halted or e
    except BaseException as e:  # SystemExit and the like from workflow code: the run would fail
        return ctx, ctx.halted or e
    else:
        return ctx, ctx.halted
    finally:
        ctx._exit()


def _verdict(
    run: Run, journal: dict[int, JournalEntry], ctx: _CheckContext, stop: BaseException | None
) -> Finding | None:
    """What a replay that stopped so says of the run: None if it would go on."""
    if isinstance(stop, _Frontier):
        return None
    if isinstance(stop, ShapeChanged):  # a fan-out with other branches than recorded
        return _finding(
            run, "nondeterminism", str(stop), stop.index, recorded=stop.recorded, now=stop.now
        )
    if isinstance(stop, NonDeterminismError):
        if ctx.mismatch is None:  # a version outside the supported range
            return _finding(run, "nondeterminism", str(stop))
        index, entry, kind, name = ctx.mismatch
        return _finding(
            run,
            "nondeterminism",
            str(stop),
            index,
            recorded=_call(entry.kind, entry.name),
            now=_call(kind, name),
        )
    replayed = ctx._index
    if stop is None:
        if replayed > max(journal, default=-1):
            return None  # everything recorded replayed and the handler returned: it completes
        entry = journal.get(replayed) or journal[min(i for i in journal if i >= replayed)]
        return _finding(
            run,
            "ends-early",
            f"the workflow now returns after {replayed} call(s); call #{entry.call_index}"
            f" was recorded as {_call(entry.kind, entry.name)}",
            entry.call_index,
            recorded=_call(entry.kind, entry.name),
            now="returns",
        )
    at = journal.get(replayed)
    return _finding(
        run,
        "error",
        f"replay raises {type(stop).__name__}: {stop}",
        replayed,
        recorded=_call(at.kind, at.name) if at is not None else None,
        now=f"raises {type(stop).__name__}",
        fix="fix the code so that recorded runs replay, or let these runs finish first",
    )


def _finding(run: Run, problem: str, message: str, index: int | None = None, **kw: Any) -> Finding:
    return Finding(
        run.run_id,
        run.workflow,
        str(run.status),
        problem,
        index,
        kw.get("recorded"),
        kw.get("now"),
        message.splitlines()[0] if message else problem,
        kw.get("fix", FIX_VERSION),
    )


def _binds(wf: WorkflowDef, inputs: dict[str, Any]) -> str | None:
    """Why the stored input no longer fits the handler, or None."""
    try:
        wf.check_binds(inputs)
    except FlowctlError as e:
        return str(e)
    return None


def check_runs(
    runs: Iterator[Run] | list[Run],
    read: Callable[[str], tuple[dict[int, JournalEntry], dict[str, int]]],
    load: Callable[[Run], WorkflowDef],
    clock: Clock,
) -> tuple[int, list[Finding]]:
    """Check each run: (runs replayed, findings). YAML runs are pinned and pass unread;
    a workflow that no longer loads is a finding for each of its runs."""
    checked = 0
    findings: list[Finding] = []
    # A Python handler's fit depends on the input's keys only: checked once per key set.
    fits: dict[tuple[int, frozenset[str]], str | None] = {}

    def binds(wf: WorkflowDef, inputs: dict[str, Any]) -> str | None:
        key = (id(wf), frozenset(inputs))
        if key not in fits:
            fits[key] = _binds(wf, inputs)
        return fits[key]

    for run in runs:
        checked += 1
        if run.kind == "yaml":
            continue
        journal, versions = read(run.run_id)
        if not journal and not versions:
            continue  # nothing recorded yet: it starts on the new code
        try:
            wf = load(run)
        except FlowctlError as e:
            findings.append(
                Finding(
                    run.run_id,
                    run.workflow,
                    str(run.status),
                    "load",
                    None,
                    None,
                    None,
                    str(e).splitlines()[0],
                    "restore the workflow's file and function, or let these runs finish first",
                )
            )
            continue
        found = check_run(run, journal, versions, wf, clock, binds)
        if found is not None:
            findings.append(found)
    return checked, findings


__all__ = ["Finding", "check_run", "check_runs"]
