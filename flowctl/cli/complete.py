"""Shell completion of what a user types most: workflow names, run ids and statuses.

Click asks a parameter's `shell_complete` when TAB is pressed (the `_FLOWCTL_COMPLETE`
protocol `--install-completion` sets up); `helpfmt.polish` attaches these to every
parameter that takes one of those things, found by its placeholder (RUN, TARGET, ...), so
a new command is covered without a change here. Each completer is cheap (the workflows
folder's names are read from the files, never by running them; run ids are one read of the
newest runs) and never fails: any error offers nothing, and the shell then completes file
names as it would without flowctl (typer's scripts use `complete -o default`).
"""

from __future__ import annotations

from typing import Any

from click.shell_completion import CompletionItem

RECENT_RUNS = 500  # run ids offered: the newest this many, matched by prefix
_PATHLIKE = ("/", ".", ":", "~")  # a target typed as a file or module: the shell completes it


def _config_and_db(ctx: Any) -> tuple[Any, Any]:
    """This folder's flowctl.toml and the database the command would use: the --db typed
    so far (Click parsed it, resiliently), else FLOWCTL_DB, flowctl.toml, the default."""
    from flowctl.config import load_config, resolve_db

    config = load_config()
    return config, resolve_db(ctx.find_root().params.get("db"), config)


def workflow_names(ctx: Any, param: Any, incomplete: str) -> list[CompletionItem]:
    """The workflows folder's names starting with `incomplete`. Nothing when it looks like
    a path or no name matches: the shell then completes file names (`complete -o default`)."""
    if incomplete.startswith(_PATHLIKE) or any(c in incomplete for c in "/:"):
        return []
    try:
        from flowctl.runtime.targets import discover

        names = sorted(discover(_config_and_db(ctx)[0].workflows_dir()))
    except Exception:  # completion never fails: it offers nothing instead
        names = []
    return [CompletionItem(n) for n in names if n.startswith(incomplete)]


def run_ids(ctx: Any, param: Any, incomplete: str) -> list[CompletionItem]:
    """Ids of the newest runs starting with `incomplete` (unfinished ones first)."""
    try:
        from flowctl.store import open_run_list

        config, db = _config_and_db(ctx)
        if not isinstance(db, str) and not db.exists():
            return []  # nothing to offer, and nothing created
        listing = open_run_list(db, durability=str(config.get("durability")))
        try:
            runs = listing.list_runs(limit=RECENT_RUNS)
        finally:
            listing.close()
    except Exception:  # a database that does not open, a server down, ...: nothing
        return []
    runs = sorted(runs, key=lambda r: r.status.is_terminal)  # stable: newest first in each
    return [
        CompletionItem(r.run_id, help=f"{r.workflow} {r.status}")
        for r in runs
        if r.run_id.startswith(incomplete)
    ]


def statuses(ctx: Any, param: Any, incomplete: str) -> list[CompletionItem]:
    """Status names; after a comma (`--status dead,ca`) the last one is completed."""
    from flowctl.model import RunStatus

    head, _, last = incomplete.rpartition(",")
    prefix = f"{head}," if head else ""
    return [CompletionItem(prefix + str(s)) for s in RunStatus if str(s).startswith(last)]
