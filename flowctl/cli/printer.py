"""Driving a run here in the foreground (`run --wait`, `fork --wait`, a run that started
now) and printing it as it goes: each step as it is journaled, the output its steps
printed, each sleep, signal wait or retry it parks on, and what another worker (a daemon)
did to it meanwhile.

`RunPrinter` holds what has been printed, so nothing is said twice: journal entries by
(call index, state), output chunks by seq, timeline events by position. `drive` runs the
run as a one-run worker (flowctl.daemon.foreground) with the printer's methods as call-backs.
"""

from __future__ import annotations

import sys
from contextlib import nullcontext
from datetime import datetime
from typing import TYPE_CHECKING

import typer

from flowctl.cli.common import State, _daemon_config, _local, _relative
from flowctl.clock import Clock
from flowctl.durations import format_duration
from flowctl.limits import one_line, terminal_safe
from flowctl.model import EntryState, JournalEntry, Run, RunStatus
from flowctl.ops.explain import error_line
from flowctl.ops.maintenance import run_output
from flowctl.store import Store

if TYPE_CHECKING:  # annotations only: the engine and the store's records load with the run
    from flowctl.output import CommandListener, StepOutput
    from flowctl.runtime.engine import Outcome
    from flowctl.store import OutputChunk
    from flowctl.store.records import Claim


def drive(st: State, run: Run, *, wait: bool, quiet: bool, known: set[int] | None = None) -> Run:
    """Run it here as a worker until it ends (or, without `wait`, until it parks), printing
    it unless `quiet` (`known`: call indices journaled before, e.g. copied by a fork, not
    printed). Ctrl-C leaves the run to a daemon and exits 130."""
    from flowctl.daemon.foreground import drive_run  # the engine loads only for a run driven here
    from flowctl.output import command_output_to

    printer = RunPrinter(st.store, st.clock, run, wait=wait, quiet=quiet, known=known)
    echo = nullcontext() if quiet else command_output_to(_echo_commands(run.run_id))
    try:
        with echo:
            final: Run = drive_run(
                st.store,
                st.clock,
                run.run_id,
                _daemon_config(st, concurrency=1),
                wait=wait,
                on_checkpoint=printer.on_step,
                on_outcome=printer.on_outcome,
                on_claim=None if quiet else printer.on_claim,
                on_wait=None if quiet else printer.others_ran,
            )
        if not quiet:
            printer.others_ran()  # steps a daemon ran after the run left us
        return final
    except KeyboardInterrupt:
        typer.echo(
            f"\ninterrupted: run {run.run_id} is left to `flowctl daemon`, which resumes it",
            err=True,
        )
        raise typer.Exit(130) from None


class RunPrinter:
    """What one driven run has printed, and the call-backs that print the rest.

    Journal entries are keyed by (call index, state), so a step that failed here and was
    retried elsewhere is printed again when it ends (a step's retries by their try, so
    each failed try is said); output chunks by seq, so output printed live (this process
    ran the step) is not replayed. The timeline is read from where it stood when the
    printer began: what another worker did (its failed attempt's checkpoint is deleted
    when the retry is queued, so only the timeline still says a step failed, and when it
    runs again).
    """

    def __init__(
        self,
        store: Store,
        clock: Clock,
        run: Run,
        *,
        wait: bool,
        quiet: bool,
        known: set[int] | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.run_id = run.run_id
        self.wait = wait
        self.quiet = quiet
        self.printed: set[tuple[int, str]] = set()
        self.copied = set(known or ())  # journaled before this run began here
        self.shown_chunks: set[int] = set()
        self.ours: set[int] = set()  # the fences of this process's claims
        self.seen = 0 if quiet else store.timeline_page(run.run_id, limit=0)[1]
        self.theirs = False  # the events being read follow a claim by another worker
        self.attempt = run.attempt  # the newest attempt a `retry scheduled` event named
        self.held: str | None = None  # what flow control holds it by, as last said

    # -- the call-backs of flowctl.daemon.foreground.drive_run --------------------------------

    def on_claim(self, claim: Claim) -> None:
        self.ours.add(claim.lease.fence)  # first: its `claimed` event is already written
        self.others_ran()

    def on_step(self, entry: JournalEntry) -> None:
        """A step this process ran was journaled: what came before it first."""
        if not self.quiet:
            self.catch_up(entry.call_index, with_output=True)
        self.printed.add(_key(entry))
        self.say_step(entry)

    def on_outcome(self, outcome: Outcome) -> None:
        """The attempt here ended: say why the terminal goes quiet when --wait waits
        through a sleep or a retry (the sleep or wait just journaled, then a retry)."""
        if self.quiet:
            return
        self.catch_up(None, with_output=False)
        # Everything the attempt printed was printed live: a later catch-up (a daemon runs
        # the next attempt) prints only the output recorded after this.
        newest = max(self.shown_chunks, default=0)
        later = run_output(self.store, self.run_id, after=newest)
        self.shown_chunks.update(c.seq for c in later)
        if self.wait and outcome.run_at is not None and outcome.status is RunStatus.QUEUED:
            self._say_retry(outcome.run_at)

    def others_ran(self) -> None:
        """Before this process runs a step, and while it waits: what a daemon ran."""
        self.catch_up(None, with_output=True)
        self.say_others()
        self.say_held()

    def say_held(self) -> None:
        """While it waits: flow control holding it (a busy key, a named limit), said once."""
        from flowctl.flow.explain import held_note  # read only while a run waits here

        note = held_note(self.store.get_run(self.run_id))
        if note is not None and note != self.held:
            typer.echo(f"  … {note}; it starts as soon as that allows")
        self.held = note

    # -- the journal ----------------------------------------------------------------------

    def catch_up(self, before: int | None, *, with_output: bool) -> None:
        """Print, in call order, the journal entries before `before` (None: all) not yet
        printed: each step after the output it recorded (`with_output`: a daemon ran it;
        this process printed its own live), and each sleep or wait it parked on."""
        missed = sorted(
            (
                e
                for e in self.store.journal(self.run_id).values()
                if _key(e) not in self.printed
                and e.call_index not in self.copied
                and (before is None or e.call_index < before)
            ),
            key=lambda e: e.call_index,
        )
        chunks = run_output(self.store, self.run_id) if missed else []
        if not with_output:
            self.shown_chunks.update(c.seq for c in chunks)
        for entry in missed:
            self.printed.add(_key(entry))
            self.say_chunks(entry.call_index, chunks)
            self.say_entry(entry)

    def say_entry(self, entry: JournalEntry) -> None:
        """A journal entry another worker wrote, or one this run parked on."""
        pending = entry.state is EntryState.PENDING
        # A sleep is said whether it is seen pending or, when a daemon ran it and woke
        # first, already over: the lines are the same whoever runs the run.
        if entry.kind == "sleep" and self.wait and entry.wake_at is not None:
            typer.echo(f"  … sleeping until {self._when(entry.wake_at)}")
        elif entry.kind == "signal" and pending and self.wait:
            timeout = "" if entry.wake_at is None else f", timeout {_local(entry.wake_at)}"
            typer.echo(f"  … waiting for signal {one_line(entry.name)!r}{timeout}")
        elif entry.kind == "step" and pending and isinstance(entry.value, dict):
            child = entry.value.get("child_run_id")
            if child and self.wait:  # driven here next (flowctl.daemon.foreground)
                typer.echo(f"  … waiting for child run {child}")
        elif entry.kind == "step" and not pending:
            self.say_step(entry)

    def say_step(self, entry: JournalEntry) -> None:
        """A step's end: ✓ with its time, or ✗ with its error's first line."""
        if self.quiet or entry.kind != "step":
            return
        took = f" ({format_duration(entry.duration)})" if entry.duration is not None else ""
        if entry.state is EntryState.DONE:
            typer.echo(f"  ✓ {one_line(entry.name)}{took}")
            return
        error = entry.value if isinstance(entry.value, dict) else None
        why = f": {terminal_safe(one_line(error_line(error)))}" if error else ""
        typer.echo(f"  ✗ {one_line(entry.name)}{took}{why}")

    def say_chunks(self, index: int, chunks: list[OutputChunk]) -> None:
        """The output the step at `index` recorded that is not printed yet."""
        for c in chunks:
            if c.call_index == index and c.seq not in self.shown_chunks:
                self.shown_chunks.add(c.seq)
                if c.stream in ("stdout", "stderr"):
                    text = "\n".join(terminal_safe(line) for line in c.text.split("\n"))
                    typer.echo(text, nl=False, err=c.stream == "stderr")

    # -- the timeline ---------------------------------------------------------------------

    def say_others(self) -> None:
        """The timeline events written since the last look: another worker's failed steps
        and the retries it queued."""
        total = self.store.timeline_page(self.run_id, limit=0)[1]
        if total <= self.seen:  # nothing new (or `prune` trimmed it: count from here)
            self.seen = total
            return
        events, self.seen = self.store.timeline_page(self.run_id, limit=total - self.seen)
        for event in events:
            data = event.data
            if event.type == "claimed":
                self.theirs = data.get("fence") not in self.ours
            elif event.type == "retry scheduled" and _int(data.get("attempt")) > self.attempt:
                # A new attempt: the last one's failures left the journal, and the next
                # one's are new at the same indices (a load retry is the same attempt).
                self.attempt = _int(data.get("attempt"))
                done = str(EntryState.DONE)
                self.printed.difference_update([k for k in self.printed if k[1] != done])
            if not self.theirs:
                continue
            if event.type == "step failed" and isinstance(data.get("index"), int):
                self._say_failed(data["index"], data)
            elif event.type in ("retry scheduled", "step retry scheduled") and self.wait:
                try:
                    at = datetime.fromisoformat(str(data.get("at")))
                except ValueError:
                    continue
                self._say_retry(at)

    def _say_failed(self, index: int, data: dict[str, object]) -> None:
        """A step another worker ran failed: its output, then ✗ with the error."""
        if (index, str(EntryState.ERROR)) in self.printed:
            return
        self.printed.add((index, str(EntryState.ERROR)))
        self.say_chunks(index, run_output(self.store, self.run_id))
        error = terminal_safe(one_line(str(data.get("error", ""))))
        typer.echo(f"  ✗ {one_line(str(data.get('name', '?')))}: {error}")

    def _say_retry(self, at: datetime) -> None:
        typer.echo(f"  ↻ retrying at {self._when(at)}")

    def _when(self, at: datetime) -> str:
        return f"{_local(at)} ({_relative(at, self.clock.now())})"


def _key(entry: JournalEntry) -> tuple[int, str]:
    """What a journal entry is printed as: a step's retries by their try, a sleep once
    (pending or over; kept across attempts as a finished step is), else its state."""
    if entry.kind == "sleep":
        return entry.call_index, str(EntryState.DONE)
    if entry.state is EntryState.RETRYING:
        return entry.call_index, f"{entry.state}:{entry.tries}"
    return entry.call_index, str(entry.state)


def _int(value: object) -> int:
    """A timeline event's number, 0 when it holds something else."""
    return value if isinstance(value, int) else 0


def _echo_commands(run_id: str) -> CommandListener:
    """Print a command step's output of this run as it comes (stdout to stdout, stderr to
    stderr), not copied into the step's stored output a second time. A closed pipe only
    stops the echo: it never fails the step."""
    from flowctl.output import uncaptured

    broken: list[bool] = []

    def echo(sink: StepOutput, stream: str, text: str) -> None:
        if sink.run_id != run_id or broken or not text:
            return
        target = uncaptured(sys.stderr if stream == "stderr" else sys.stdout)
        try:
            target.write(text)
            target.flush()
        except (OSError, ValueError):
            broken.append(True)

    return echo
