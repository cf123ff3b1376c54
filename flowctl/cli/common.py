"""What every `flowctl` command module shares: the group that turns a FlowctlError into
one `flowctl: ...` line and its exit code, the per-invocation State, and the renderers
(JSON, tables, local and relative times).

flowctl/cli/__init__.py builds the app and registers the command modules (start, listing,
show, actions, admin, daemon, schedule, ...); they import from here, never from each other
(the daemon's start-up call into schedule aside). This module imports lazy.py (the group
builds stand-ins), never a command module, so there is no import cycle.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperGroup

from flowctl.cli.lazy import resolve
from flowctl.errors import FlowctlError, UsageError
from flowctl.limits import clip_middle, one_line

if TYPE_CHECKING:  # the store (sqlite_utils, the backend) loads when a command opens it;
    # the config (tomllib) and durations when a command reads them: `flowctl --help` neither
    from flowctl.clock import Clock
    from flowctl.config import Config
    from flowctl.crypto.cipher import Keyring
    from flowctl.model import Run
    from flowctl.store import RunListing, Store


class _Group(TyperGroup):
    """flowctl's groups: help that names things (cli/helpfmt.py) in panels (cli/panels.py),
    and one error boundary."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from flowctl.cli.helpfmt import polish

        polish(self)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command, built now if it was a stand-in (flowctl/cli/lazy.py)."""
        return resolve(self.commands, cmd_name)

    def format_usage(self, ctx: Any, formatter: Any) -> None:
        from flowctl.cli.panels import write_usage

        write_usage(self, ctx, formatter)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """Options and commands in panels (cli/panels.py). The command list is read from
        each command's name and help alone: listing builds nothing (TyperGroup's would
        build every command to ask it)."""
        from flowctl.cli.panels import write_commands, write_params

        write_params(self, ctx, formatter)
        write_commands(self, ctx, formatter)

    def invoke(self, ctx: Any) -> Any:
        try:
            rv = super().invoke(ctx)
        except FlowctlError as e:
            typer.echo(f"flowctl: {said(e)}", err=True)
            raise typer.Exit(e.exit_code) from None
        root = ctx.parent is None  # `schedule ...` is a group inside this one: say it once
        note = ctx.obj.read_only_note() if root and isinstance(ctx.obj, State) else None
        if note:  # said after the output, so a failed write says only its own one line
            typer.echo(note, err=True)
        return rv


def flag(field: str) -> str:
    """A field as this CLI spells it: "max_attempts" -> "--max-attempts"; one value of the
    input, "input.user" -> "-i user=VALUE"."""
    if field.startswith("input."):
        return f"-i {field.removeprefix('input.')}=VALUE"
    return "--" + field.replace("_", "-")


def said(e: FlowctlError) -> str:
    """The one line an error is printed as: the field a UsageError is about spelled as
    this CLI's flag (errors.UsageError.spelled), cut to fit (limits.clip_middle)."""
    from flowctl.config import mask_password

    text = e.spelled(flag) if isinstance(e, UsageError) else str(e)
    return clip_middle(one_line(mask_password(text)))


class State:
    """Per invocation: the --db choice, config and store (both opened on first use), clock."""

    def __init__(self, db: str | None, clock: Clock) -> None:
        self._db = db
        self._config: Config | None = None
        self._store: Store | None = None
        self._run_list: RunListing | None = None
        self._keys: Keyring | None = None
        self._keys_read = False
        self.masked = False  # a value no key opens is shown as its key id (ls, status, why)
        self.clock = clock

    @property
    def config(self) -> Config:
        if self._config is None:
            from flowctl.config import load_config

            self._config = load_config()
        return self._config

    @property
    def keys(self) -> Keyring | None:
        """The key ring of FLOWCTL_KEY_FILE or flowctl.toml's key_file, None without one
        (the cipher is loaded only then)."""
        if not self._keys_read:
            from flowctl.config import resolve_key_file

            path = resolve_key_file(self.config)
            if path is not None:
                from flowctl.crypto.cipher import load_keyring

                self._keys = load_keyring(path)
            self._keys_read = True
        return self._keys

    def use_keys(self, keys: Keyring) -> None:
        """Open the store with `keys` (`keys rotate` on a database in clear)."""
        self._keys, self._keys_read = keys, True

    @property
    def db_chosen(self) -> bool:
        """True when --db or FLOWCTL_DB names the database (not flowctl.toml or a default)."""
        return self._db is not None or bool(os.environ.get("FLOWCTL_DB"))

    @property
    def db_path(self) -> Path | str:
        from flowctl.config import resolve_db

        return resolve_db(self._db, self.config)

    @property
    def shown_db(self) -> str:
        """The database as messages name it: the file, or the URL with its password as ***."""
        from flowctl.config import mask_password

        return mask_password(str(self.db_path))

    @property
    def store(self) -> Store:
        """The database of a command that reads (or changes what exists): it must exist, and
        nothing is created. One this process cannot write opens read-only, and says so;
        a write to it is then one line ("read-only database: ...")."""
        if self._store is None:
            from flowctl.store import open_store

            self._store = open_store(
                self.db_path,
                durability=str(self.config.get("durability")),
                create=False,
                allow_read_only=True,
                keys=self.keys,
                masked=self.masked,
            )
        return self._store

    @property
    def run_list(self) -> RunListing:
        """The database of a command that only lists runs (`flowctl ls`), opened as `store`
        opens it but with the run-list reads alone (flowctl.store.open_run_list), so the
        command starts without loading the rest of the store. The store itself once a
        command has opened it."""
        if self._store is not None:
            return self._store
        if self._run_list is None:
            from flowctl.store import open_run_list

            self._run_list = open_run_list(
                self.db_path, durability=str(self.config.get("durability")), keys=self.keys
            )
        return self._run_list

    def close(self) -> None:
        """Close the store when the command ends (click's call_on_close): a PostgreSQL
        store's pooled and LISTEN connections end cleanly instead of at garbage collection."""
        store, self._store = self._store, None
        run_list, self._run_list = self._run_list, None
        for handle in (store, run_list):
            if handle is not None:
                handle.close()

    def read_only_note(self) -> str | None:
        """What a successful command says when it could only read its database."""
        opened = [h for h in (self._store, self._run_list) if h is not None]
        if not any(h.read_only for h in opened):
            return None
        return f"flowctl: note: {self.shown_db} is read-only here: opened for reading only"

    def open_store(self, *, create: bool) -> Store:
        """The database of a command that creates work (`run`, `init`, `daemon`, `schedule
        add/sync`): with `create`, a missing file (and folder, 0700) is created; it must be
        writable. Returns the store that `store` returns from then on."""
        if self._store is None:
            from flowctl.store import open_store

            self._store = open_store(
                self.db_path,
                durability=str(self.config.get("durability")),
                create=create,
                keys=self.keys,
            )
        return self._store


def _state(ctx: typer.Context) -> State:
    obj = ctx.find_root().obj
    assert isinstance(obj, State)
    return obj


# ---------------------------------------------------------------------------
# rendering helpers


RUN_LIST_JSON_HELP = "Print a JSON list of run objects; `id` is the run id (`run_id`: an alias kept for old scripts)."


def _emit_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def _local(when: datetime | None, *, ms: bool = False) -> str:
    """A time as tables and messages show it: local, with the zone (2026-03-27 13:00:00 CET);
    --json prints ISO-8601 UTC instead (flowctl.model.iso)."""
    from flowctl.model import local_text

    return "-" if when is None else local_text(when, ms=ms)


def _relative(when: datetime | None, now: datetime) -> str:
    if when is None:
        return "-"
    from flowctl.durations import format_duration

    delta = when - now
    if delta.total_seconds() >= 0:
        return f"in {format_duration(delta)}"
    return f"{format_duration(-delta)} ago"


def _table(
    headers: list[str],
    rows: list[list[str]],
    *,
    keep: tuple[int, ...] = (0,),
    order: tuple[int, ...] | None = None,
) -> None:
    """Every table goes through flowctl/cli/table.py (fits the terminal, cuts with …,
    nothing cut when stdout is not a terminal); `keep`: columns never cut; `order`: the
    columns by importance, the last left out first in a narrow terminal."""
    from flowctl.cli.table import print_table

    # A cell may hold a run's own text (a step name, an error, a note): printed inert.
    safe = [[cell if cell.isprintable() else one_line(cell) for cell in row] for row in rows]
    print_table(headers, safe, keep=keep, order=order)


def _cut(
    shown: int, total: int | None, what: str, *, flag: str = "--limit/-n", scope: str = ""
) -> None:
    """The notice on stderr that a list was cut (flowctl/cli/table.py: cut_notice)."""
    from flowctl.cli.table import cut_notice

    cut_notice(shown, total, what, flag=flag, scope=scope)


def _shown_json(value: Any) -> str:
    """A value as JSON for a person: non-ASCII text as itself (ünï, not \\u00fc), and
    anything a terminal would act on or cannot print (a bidi control, a lone surrogate)
    written as its escape."""
    return one_line(json.dumps(value, ensure_ascii=False))


def _first_error_line(run: Run) -> str:
    if not run.error:
        return ""
    msg = str(run.error.get("message") or "").strip().splitlines()
    line = f"{run.error.get('type')}: {msg[0]}" if msg else str(run.error.get("type"))
    return one_line(line)  # an error quotes what a step printed: never a terminal escape


def _run_json(run: Run) -> dict[str, Any]:
    return run.to_json()


def _daemon_config(st: State, **overrides: Any) -> Any:
    from flowctl.config import daemon_workers
    from flowctl.daemon import DaemonConfig
    from flowctl.durations import parse_duration

    cfg = st.config
    values: dict[str, Any] = {
        "concurrency": int(cfg.get("concurrency")),
        "workers": daemon_workers(cfg, st.db_path),
        "lease": parse_duration(cfg.get("lease")).total_seconds(),
        "heartbeat": parse_duration(cfg.get("heartbeat")).total_seconds(),
        "grace": parse_duration(cfg.get("grace")).total_seconds(),
    }
    if "retention" in cfg.values:
        from flowctl.config import parse_retention

        values["retention"] = parse_retention(cfg.get("retention"))
    from flowctl.config import resolve_key_file

    key_file = resolve_key_file(cfg)
    if key_file is not None:
        values["key_file"] = str(key_file.resolve())
    from flowctl.notify import unwanted_endings

    values["untold"] = unwanted_endings(cfg.notify())
    values.update({k: v for k, v in overrides.items() if v is not None})
    return DaemonConfig(**values)
