"""Operator actions for a long-lived install: backup, prune, vacuum and check before a deploy."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from flowctl.clock import Clock
from flowctl.daemon.retention import prune as prune_batches
from flowctl.daemon.retention import prune_statuses
from flowctl.durations import parse_duration
from flowctl.errors import FlowctlError, TargetError, UsageError
from flowctl.model import JournalEntry, Run, RunStatus
from flowctl.runtime.replay_check import Finding
from flowctl.store import OutputChunk, PrunedRun, Store

UNFINISHED = (
    RunStatus.QUEUED,
    RunStatus.RUNNING,
    RunStatus.SLEEPING,
    RunStatus.WAITING,
    RunStatus.PAUSED,
)


def backup(store: Store, dest: str, *, force: bool = False) -> Path:
    """A consistent, checked copy of the database at `dest` (see Store.backup_to)."""
    if not dest.strip():
        raise UsageError("backup needs a file path, e.g. flowctl backup ~/flowctl-copy.db")
    path = Path(dest).expanduser()
    try:
        if path.is_dir():
            raise UsageError(f"{dest} is a folder: give the backup a file name inside it")
        if not path.parent.is_dir():
            raise UsageError(f"the folder of {dest} does not exist")
    except OSError as e:  # a name too long for the filesystem, a folder we may not read
        raise UsageError(f"cannot write the backup at {dest}: {e.strerror}") from None
    store.backup_to(path, overwrite=force)
    return path


@dataclass(frozen=True)
class PruneReport:
    statuses: tuple[RunStatus, ...]
    cutoff_age: timedelta
    dry_run: bool
    runs: list[PrunedRun]


def prune(
    store: Store,
    older_than: str,
    statuses: list[str] | None,
    *,
    clock: Clock,
    dry_run: bool = False,
) -> PruneReport:
    """Delete (or list, with dry_run) finished runs that ended more than `older_than` ago;
    0 (`--older-than 0s`) means every finished run of `statuses`."""
    age = parse_duration(older_than)
    if age < timedelta(0):
        raise UsageError(
            lambda f: (
                f"{f('older_than')} must not be negative, got {older_than!r}: give a duration"
                " like 30d, or 0s for every finished run"
            ),
            field="older_than",
        )
    wanted = prune_statuses(statuses)
    gone = prune_batches(store, wanted, clock.now() - age, dry_run=dry_run)
    return PruneReport(wanted, age, dry_run, gone)


def vacuum(store: Store) -> tuple[int, int]:
    """Give the space of deleted rows back to the filesystem: (bytes before, after)."""
    return store.vacuum()


@dataclass(frozen=True)
class CheckReport:
    checked: int
    findings: list[Finding]


def check(
    store: Store,
    targets: list[str] | None,
    *,
    clock: Clock,
    workflows_dir: str | Path | None = None,
) -> CheckReport:
    """Replay every unfinished run (of `targets`: workflow names or targets) against the
    code on disk, imported afresh; nothing is run or written. A target that names no run
    and no workflow is refused (a typo must not pass a pre-deploy gate)."""
    from flowctl.runtime.replay_check import check_runs
    from flowctl.runtime.targets import WorkflowDef, fresh_imports, load_target

    runs = store.list_runs(statuses=list(UNFINISHED), limit=2**62, order="run_at")
    if targets:
        wanted = set(targets)
        runs = [r for r in runs if r.workflow in wanted or r.target in wanted]
        for name in targets:
            if not name.strip():
                raise UsageError("check: a target is empty: give a workflow name")
            if any(name in (r.workflow, r.target) for r in runs):
                continue
            if store.list_runs(workflow=name, limit=1):
                continue  # a known workflow with no unfinished run: nothing to check
            try:
                load_target(name, workflows_dir=workflows_dir)
            except UsageError as e:
                raise UsageError(f"check: {e}") from None  # the error names the target
    loaded: dict[tuple[str, str | None], WorkflowDef | Exception] = {}

    def load(run: Run) -> WorkflowDef:
        key = (run.target, run.cwd)
        if key not in loaded:
            try:
                loaded[key] = load_target(run.target, cwd=run.cwd)
            except FlowctlError as e:
                loaded[key] = e
            except Exception as e:  # a decorator or import-time code that raised
                loaded[key] = TargetError(f"loading {run.target} failed: {type(e).__name__}: {e}")
        got = loaded[key]
        if isinstance(got, Exception):
            raise got
        return got

    def read(run_id: str) -> tuple[dict[int, JournalEntry], dict[str, int]]:
        return store.journal(run_id), store.versions(run_id)

    with fresh_imports(_module_targets(runs)):
        checked, findings = check_runs(runs, read, load, clock)
    return CheckReport(checked, findings)


def _module_targets(runs: list[Run]) -> set[str]:
    """The modules of `module:fn` targets (file targets are flowctl_user.* modules)."""
    out = set()
    for r in runs:
        left = r.target.rpartition(":")[0]
        if r.kind != "yaml" and left and not left.endswith(".py") and "/" not in left:
            out.add(left)
    return out


def run_output(
    store: Store, run_id: str, *, step: str | None = None, after: int = 0
) -> list[OutputChunk]:
    """Every chunk a run's steps printed after `after` (a seq), in order, read page by page."""
    out: list[OutputChunk] = []
    while True:
        page = store.output(run_id, after=after, step=step, limit=1000)
        out.extend(page)
        if len(page) < 1000:
            return out
        after = page[-1].seq


def check_children(path: Path) -> list[str]:
    """`validate`: each `workflow:` step must name a workflow a run could start: a file
    (relative to this file's folder, as the run resolves it) that exists and holds it, or
    a name of a workflow in the same folder, at the step's file:line. Checked here and not when a
    run loads its pinned YAML: a child removed later must not break a run whose child
    already ran. Loading a Python child imports it, as running the parent would."""
    from flowctl import yamlflow
    from flowctl.runtime.targets import child_target, load_target

    wf = yamlflow.load_yaml(yamlflow.read_yaml_text(path), str(path))
    folder = path.resolve().parent
    problems: list[str] = []
    for step in wf.steps:
        if step.kind != "workflow" or not isinstance(step.value, str):
            continue
        try:
            load_target(child_target(step.value, str(folder)), cwd=str(folder))
        except FlowctlError as e:
            problems.append(f"{path}:{step.line}: steps[{step.index}].workflow: {e}")
    return problems
