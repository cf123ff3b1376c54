"""The FlowctlError tree.

Every error a user can fix is a FlowctlError whose str() is one line that says
what was wrong and what is accepted. `exit_code` is what the CLI exits with:
2 for bad input (usage), 1 for everything else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

E = TypeVar("E", bound=BaseException)

Spell = Callable[[str], str]
"""How a front end spells a field: "deadline" -> "--deadline" (the CLI), "deadline" (HTTP)."""


class FlowctlError(Exception):
    """An error the user can act on. str(e) is one line and is shown as-is."""

    exit_code = 1


def _as_named(field: str) -> str:
    return field


class UsageError(FlowctlError):
    """Bad input: arguments, durations, JSON, YAML, configuration.

    `field` is the option it is about, named as ops, the Client and the HTTP API name it
    ("deadline", "max_attempts"), or None. A check shared by the front ends gives its
    message as words of a `Spell` (`lambda f: f"{f('timeout')} must be positive"`), so each
    front end says the field its own way from the one check (`spelled`: `--timeout` in
    the CLI) and nobody edits the text afterwards; str(e) names it as ops does.
    """

    exit_code = 2
    field: str | None = None  # also for a subclass whose __init__ skips this one's
    _words: Callable[[Spell], str] | None = None

    def __init__(self, message: str | Callable[[Spell], str], *, field: str | None = None) -> None:
        self.field = field
        self._words = None if isinstance(message, str) else message
        super().__init__(message if isinstance(message, str) else message(_as_named))

    def spelled(self, spell: Spell) -> str:
        """The message with each field it names spelled by `spell`."""
        return str(self) if self._words is None else self._words(spell)


class DurationError(UsageError, ValueError):
    """A duration that does not parse, or one beyond the ten-year limit (`too_long`)."""

    def __init__(self, text: object, *, too_long: bool = False, field: str | None = None) -> None:
        if too_long:
            message = (
                f"duration {text!r} is longer than the limit of 10 years (3650d):"
                " give at most 3650d"
            )
        else:
            message = (
                f"invalid duration {text!r}: use seconds (90), a unit (500ms, 30s, 5m, 2h, 7d), "
                "words (30 sec, 5 minutes, 2 hours, 7 days), or a compound (1h30m)"
            )
        super().__init__(message, field=field)
        self.text = text
        self.too_long = too_long


class InputError(UsageError):
    """A workflow input that is not valid JSON or does not match the declared inputs."""


class ConfigError(UsageError):
    """A malformed flowctl.toml."""


class TargetError(UsageError):
    """A workflow target that cannot be found or loaded."""


class UnknownWorkflowError(TargetError):
    """A bare name that is no workflow in the workflows folder (nor a file or module):
    its own type so a front end can word the hint for the forms it accepts."""


class ValidationError(UsageError):
    """A YAML workflow with mistakes; `problems` holds one line per mistake."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        first = self.problems[0] if self.problems else "invalid workflow"
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        super().__init__(first + more)


class RunNotFoundError(FlowctlError):
    def __init__(self, ref: str, detail: str = "") -> None:
        super().__init__(detail or f"no run matches {ref!r}: give a run id or a unique prefix")
        self.ref = ref


class RunRefMissingError(UsageError, RunNotFoundError):
    """No run reference at all (an empty id): bad input (exit 2), not a missing run."""

    def __init__(self) -> None:
        RunNotFoundError.__init__(
            self, "", "a run id is required: give a run id or a unique prefix (see `flowctl ls`)"
        )


class ScheduleNotFoundError(FlowctlError):
    def __init__(self, name: str) -> None:
        super().__init__(f"no schedule named {name!r}: see `flowctl schedule ls`")
        self.name = name


class InvalidStateError(FlowctlError):
    """An operator action that does not fit the run's status (e.g. redrive a completed run)."""


class NonRetryableError(FlowctlError):
    """Raise it (or a subclass) when no retry can fix the error: the run ends `dead` at once.

    Raised from a step, the step's retry policy does not retry it either.
    """


class NonDeterminismError(FlowctlError):
    """Replay met a different call than the journal recorded at an index."""


class DurableCallError(FlowctlError):
    """A durable call made where it is not allowed: outside a handler or inside a step."""


class SerializationError(UsageError):
    """A value that must be stored as JSON is not JSON-serialisable."""


class StepFailedError(FlowctlError):
    """A recorded step error whose original exception type cannot be rebuilt on replay."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}" if message else type_name)
        self.type_name = type_name
        self.message = message


class CommandFailedError(FlowctlError):
    """A command step exited non-zero."""

    error_type = "CommandFailed"
    # Its traceback is flowctl's own code running the command: the stderr tail is the story.
    keeps_traceback = False

    def __init__(self, exit_code: int, stderr_tail: str = "", argv: object = None) -> None:
        tail = stderr_tail.strip().splitlines()[-1:] if stderr_tail else []
        suffix = f": {tail[0]}" if tail else ""
        super().__init__(f"command exited with code {exit_code}{suffix}")
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail
        self.argv = argv

    def error_fields(self) -> dict[str, object]:
        """Extra fields stored with the recorded error (see `flowctl show --json`)."""
        return {"exit_code": self.exit_code, "stderr_tail": self.stderr_tail}


class ParallelError(FlowctlError):
    """Branches of a fan-out (`ctx.map`, `ctx.parallel`, `ctx.children`) failed for good;
    raised once every branch has ended. `failures` names each: its index, its step or child
    run, and its error (type and message)."""

    def __init__(self, call: str, failures: list[dict[str, Any]], total: int) -> None:
        named = "; ".join(
            f"[{f.get('index')}]"
            + (f" run {f['child_run_id']}" if f.get("child_run_id") else "")
            + f" {f.get('error', '')}"
            for f in failures[:20]
        )
        more = f"; and {len(failures) - 20} more" if len(failures) > 20 else ""
        super().__init__(f"{call}: {len(failures)} of {total} branches failed: {named}{more}")
        self.call = call
        self.failures = failures
        self.total = total

    def error_fields(self) -> dict[str, object]:
        """Extra fields stored with the recorded error (see `flowctl show --json`)."""
        return {"call": self.call, "failures": self.failures, "total": self.total}


class SignalTimeoutError(FlowctlError):
    """`ctx.wait_signal(name, timeout=...)` saw no signal before its timeout."""


class Interrupt(BaseException):
    """Stops a live handler from outside: cancellation, deadline or execution timeout.

    BaseException so that `except Exception:` in user code does not swallow it;
    use try/finally for clean-up.
    """

    reason = "interrupted"


class Cancelled(Interrupt):
    reason = "cancelled"


class DeadlineExceededError(Interrupt):
    reason = "deadline exceeded"


class ExecutionTimeoutError(Interrupt):
    reason = "execution timeout"


class CommandTimeoutError(FlowctlError):
    """A command step ran past its per-step `timeout` and was stopped."""

    error_type = "CommandTimeout"
    keeps_traceback = False

    def __init__(self, timeout: float, stderr_tail: str = "") -> None:
        super().__init__(
            f"command did not finish within its timeout of {timeout:g}s and was stopped"
        )
        self.timeout = timeout
        self.stderr_tail = stderr_tail

    def error_fields(self) -> dict[str, object]:
        return {"timeout": self.timeout, "stderr_tail": self.stderr_tail}


class ScheduleError(UsageError):
    """A bad schedule: cron expression, time zone, interval or policy."""


# ---------------------------------------------------------------------------
# Errors no retry can fix

_MARK = "__flowctl_non_retryable__"


def mark_non_retryable(exc: E) -> E:
    """Flag one raised exception as one no retry can fix (a bad duration given to ctx.sleep,
    a step result that is not JSON, an input that does not bind), keeping its own type."""
    setattr(exc, _MARK, True)
    return exc


def is_non_retryable(exc: BaseException) -> bool:
    """True for errors that end a run `dead` at once, spending no attempt or backoff:
    NonRetryableError, a durable call used wrongly, non-determinism, or a flagged error."""
    return isinstance(exc, NonRetryableError | DurableCallError | NonDeterminismError) or (
        getattr(exc, _MARK, False) is True
    )


class DatabaseError(FlowctlError):
    """A database file flowctl cannot use as it is: missing, foreign, newer, corrupt, full,
    read-only or gone. The message names the file and says what to do."""


class DatabaseUnavailable(DatabaseError):
    """The database server cannot be reached for now: restarting, failing over, or it
    reset every session after one of its processes died. An outage to wait out, never a
    reason for a daemon to exit. `unsure`: the connection went while a COMMIT was under
    way, so that write may or may not have been made (it is not run again blindly)."""

    def __init__(self, message: str, *, unsure: bool = False) -> None:
        super().__init__(message)
        self.unsure = unsure


class StoreUnavailableError(DatabaseError):
    """A database URL names a store this flowctl does not have (e.g. postgresql:// without
    the PostgreSQL store installed); the message says what to install or use instead."""


class DatabaseNotFoundError(DatabaseError):
    """A command that only reads was given a database that does not exist (none is created)."""

    def __init__(self, path: object) -> None:
        super().__init__(
            f"no flowctl database at {path}: create one with `flowctl init` or by starting a run"
            " (`flowctl run ...`), or give the right one with --db or FLOWCTL_DB"
        )
        self.path = path


class ReadOnlyDatabaseError(DatabaseError):
    """A write to a database this process can only read."""


class DatabaseCorruptError(DatabaseError):
    """SQLite found a malformed page (SQLITE_CORRUPT / SQLITE_NOTADB), on open or later."""


class DiskFullError(DatabaseError):
    """SQLITE_FULL: the disk (or the database's page limit) has no room for a write.

    Nothing committed is lost: the failed transaction was rolled back whole.
    """


class DatabaseGoneError(DatabaseError):
    """The daemon's database file was deleted or replaced under it."""


class UnknownLimitError(NonRetryableError):
    """A step names a limit no `flowctl limits set` defined: no retry can fix it."""
