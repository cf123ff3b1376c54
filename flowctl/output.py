"""What steps print, stored per run and step as it happens (`flowctl logs`).

While a step body runs, a context variable names its `StepOutput`. A command step's
pipes feed it bytes; a Python step's `print`, `sys.stdout`/`sys.stderr` writes and the
`logging` records emitted on its thread reach it through `RoutedStream` and
`LogCapture`, which look the variable up on each write. Each worker thread has its own
context, so concurrent runs never mix. What is printed is still written where it went
before (the terminal, the daemon's stderr): capture adds a copy, it takes nothing away.

Output is stored in bounded chunks (complete lines, at most MAX_ROW bytes): a step's first
write at once, later ones when CHUNK bytes wait, at a write FLUSH_EVERY seconds after the
last store, every FLUSH_EVERY seconds from a flusher thread, and when the step ends. Each stream keeps
at most `cap` bytes (1 MiB, as a command's result does); past it a note says how much
was cut. A failure to store output never fails the step: it is logged once and dropped.
"""

from __future__ import annotations

import codecs
import contextlib
import contextvars
import io
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

from flowctl.clock import Clock
from flowctl.errors import FlowctlError

if TYPE_CHECKING:
    from flowctl.store import Store

log = logging.getLogger(__name__)

DEFAULT_CAP = 1 << 20  # bytes stored per stream of one step run
CHUNK = 16 * 1024  # a buffer this big is flushed at once
MAX_ROW = 64 * 1024  # no stored chunk is bigger
FLUSH_EVERY = 0.25  # seconds: a write this long after the last flush is flushed at once
STREAMS = ("stdout", "stderr", "log")

_current: contextvars.ContextVar[StepOutput | None] = contextvars.ContextVar(
    "flowctl_step_output", default=None
)


def current() -> StepOutput | None:
    """The output collector of the step running in this thread's context, if any."""
    return _current.get()


class StepOutput:
    """One step body's output on its way to the store. Thread-safe (a command's pump and
    a heartbeat may both flush)."""

    def __init__(
        self, store: Store, run_id: str, call_index: int, step: str, clock: Clock, cap: int
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.call_index = call_index
        self.step = step
        self.clock = clock
        self.cap = cap
        # Set at the first write, with the buffers and their lock: only then is the flusher
        # started and this output made one of those it looks at, and only then has close()
        # anything to do. A step that prints nothing (most) costs none of it.
        self.touched = False

    def _touch(self) -> None:
        with _active_lock:  # two pumps of one command may write first at once
            if self.touched:
                return
            self._lock = threading.Lock()
            self._buf: dict[str, str] = {}
            self._order: list[str] = []  # streams in the order their pending text arrived
            self._kept = dict.fromkeys(STREAMS, 0)
            self._cut = dict.fromkeys(STREAMS, 0)
            self._decoders: dict[str, Any] = {}
            self._last_flush = float("-inf")  # a step's first line is stored at once
            self._broken = False
            self.touched = True  # last: a thread that sees it set sees the buffers too
            _active.add(self)  # no wake-up: the flusher looks every FLUSH_EVERY seconds
        _start_flusher()

    def write(self, stream: str, text: str) -> None:
        if not text:
            return
        if not self.touched:
            self._touch()
        with self._lock:
            data = text.encode("utf-8", errors="replace")
            room = self.cap - self._kept[stream]
            if room <= 0:
                self._cut[stream] += len(data)
                return
            if len(data) > room:
                self._cut[stream] += len(data) - room
                text = data[:room].decode("utf-8", errors="ignore")
                data = data[:room]
            self._kept[stream] += len(data)
            if self._order and self._order[-1] != stream:
                self._flush_locked(whole=True)  # keep streams in the order they were written
            if not self._order:
                self._order.append(stream)
            self._buf[stream] = self._buf.get(stream, "") + text
            pending = len(self._buf[stream])
            if pending >= CHUNK or time.monotonic() - self._last_flush >= FLUSH_EVERY:
                self._flush_locked(whole=pending >= MAX_ROW)

    def write_bytes(self, stream: str, data: bytes) -> None:
        """A command's raw output: decoded as UTF-8 across chunk boundaries, and shown to
        this process's command listeners as it arrives."""
        if not self.touched:
            self._touch()
        decoder = self._decoders.get(stream)
        if decoder is None:
            decoder = self._decoders[stream] = codecs.getincrementaldecoder("utf-8")("replace")
        self._command_text(stream, decoder.decode(data))

    def _command_text(self, stream: str, text: str) -> None:
        for listener in tuple(_command_listeners):
            listener(self, stream, text)
        self.write(stream, text)

    def tick(self) -> None:
        """Flush what waits if FLUSH_EVERY has passed (a command's pump calls this)."""
        if not self.touched:
            return
        with self._lock:
            if self._order and time.monotonic() - self._last_flush >= FLUSH_EVERY:
                self._flush_locked(whole=True)

    def close(self) -> None:
        """The step ended: store the rest, and say what the cap cut."""
        if not self.touched:
            return
        for stream, decoder in self._decoders.items():
            self._command_text(stream, decoder.decode(b"", final=True))
        with self._lock:
            self._flush_locked(whole=True)
            notes = [
                (s, f"[flowctl] {s} cut at {self.cap} bytes: {n} more bytes were not stored\n")
                for s, n in self._cut.items()
                if n
            ]
            if notes:
                self._store([("note", text) for _, text in notes])

    def _flush_locked(self, *, whole: bool) -> None:
        rows: list[tuple[str, str]] = []
        for stream in self._order:
            text = self._buf.pop(stream, "")
            if not whole:
                cut = text.rfind("\n") + 1
                text, rest = text[:cut], text[cut:]
                if rest:
                    self._buf[stream] = rest
            for start in range(0, len(text), MAX_ROW):
                rows.append((stream, text[start : start + MAX_ROW]))
        self._order = [s for s in self._order if s in self._buf]
        self._last_flush = time.monotonic()
        if rows:
            self._store(rows)

    def _store(self, rows: list[tuple[str, str]]) -> None:
        if self._broken:
            return
        try:
            self.store.append_output(
                self.run_id, self.call_index, self.step, self.clock.now(), rows
            )
        except FlowctlError as e:
            self._broken = True
            log.warning("run %s: step output not stored: %s", self.run_id, e)


class _Capturing:
    """`with capturing(...)`: a class, not a generator-based context manager (one per
    step, and the generator's set-up cost more than the rest of it)."""

    __slots__ = ("_token", "sink")

    def __init__(self, sink: StepOutput) -> None:
        self.sink = sink

    def __enter__(self) -> StepOutput:
        self._token = _current.set(self.sink)
        return self.sink

    def __exit__(self, *exc: object) -> None:
        _current.reset(self._token)
        sink = self.sink
        if sink.touched:  # else nothing was written: nothing to store, nothing registered
            with _active_lock:
                _active.discard(sink)
            sink.close()


def capturing(
    store: Store, run_id: str, call_index: int, step: str, clock: Clock, cap: int = DEFAULT_CAP
) -> _Capturing:
    """Collect what the step body prints while the block runs (and route sys.stdout/stderr
    and logging through the collector while any step runs)."""
    route()
    return _Capturing(StepOutput(store, run_id, call_index, step, clock, cap))


CommandListener = Callable[[StepOutput, str, str], None]  # (step output, stream, text)
_command_listeners: list[CommandListener] = []


@contextlib.contextmanager
def command_output_to(listener: CommandListener) -> Iterator[None]:
    """While the block runs, `listener` also gets each piece of a command step's output
    run in this process, as it arrives (`flowctl run --wait` prints it). A Python step's
    prints need no listener: they reach the terminal already (RoutedStream)."""
    _command_listeners.append(listener)
    try:
        yield
    finally:
        _command_listeners.remove(listener)


def uncaptured(stream: TextIO) -> TextIO:
    """The stream under a RoutedStream: what is written there is not copied into a step's
    output (printing a command's output must not store it twice)."""
    return stream.inner if isinstance(stream, RoutedStream) else stream


_active: set[StepOutput] = set()  # the steps of this process printing now
_active_lock = threading.Lock()
_flusher: threading.Thread | None = None


def _start_flusher() -> None:
    """One thread per process (started with the first step) that stores what running
    steps printed and still hold every FLUSH_EVERY seconds, so a line printed before a
    long silence shows in `logs -f`. It is never woken: waking it as each step starts
    cost a thread switch per step (issue 14), and a step shorter than FLUSH_EVERY is
    flushed by its own close."""
    global _flusher
    with _active_lock:
        if _flusher is not None:
            return
        _flusher = threading.Thread(target=_flush_forever, name="flowctl-output", daemon=True)
    _flusher.start()


def _flush_forever() -> None:
    idle = threading.Event()
    while True:
        with _active_lock:
            sinks = list(_active)
        for sink in sinks:
            sink.tick()
        idle.wait(FLUSH_EVERY)


class RoutedStream(io.TextIOBase):
    """Stands in for sys.stdout/sys.stderr: writes go where they went before, and a copy
    goes to the step output of the writing thread's context, if any."""

    def __init__(self, inner: TextIO, stream: str) -> None:
        self.inner = inner
        self.stream = stream

    def write(self, text: str) -> int:
        sink = _current.get()
        if sink is not None:
            sink.write(self.stream, text)
        return self.inner.write(text)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.inner, "encoding", "utf-8")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class LogCapture(logging.Handler):
    """A root handler that copies the records a step's thread emits to its output
    (flowctl's own records are not the step's output)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        sink = _current.get()
        if sink is None or record.name == "flowctl" or record.name.startswith("flowctl."):
            return
        try:
            sink.write("log", self.format(record) + "\n")
        except Exception:
            self.handleError(record)


_route_lock = threading.Lock()
_log_capture = LogCapture()


def route() -> None:
    """Put RoutedStream in front of sys.stdout and sys.stderr (again, if something such
    as a test harness replaced them), and LogCapture on the root logger. Idempotent."""
    if (
        type(sys.stdout) is RoutedStream
        and type(sys.stderr) is RoutedStream
        and _log_capture in logging.root.handlers
    ):
        return  # routed already (every step after the first): no lock taken
    with _route_lock:
        if not isinstance(sys.stdout, RoutedStream) and sys.stdout is not None:
            sys.stdout = RoutedStream(sys.stdout, "stdout")
        if not isinstance(sys.stderr, RoutedStream) and sys.stderr is not None:
            sys.stderr = RoutedStream(sys.stderr, "stderr")
        root = logging.getLogger()
        if _log_capture not in root.handlers:
            root.addHandler(_log_capture)
