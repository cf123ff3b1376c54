"""Every input the fuzz campaign of issue 11 turned into a traceback is now one usage line,
exit 2, nothing written (issue 11, item 7); plus the bounds themselves (flowctl.limits)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from flowctl import cli
from flowctl.clock import FakeClock
from flowctl.errors import InputError, UsageError
from flowctl.limits import MAX_JSON_DEPTH, check_time, loads_json, one_line
from tests.dbs import is_url
from tests.dbs import rows as query
from tests.inproc import run_main

START = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)
FLOWS = (
    "from flowctl import workflow\n\n@workflow\ndef nap(ctx, a=None):\n"
    "    return ctx.wait_signal('go')\n"
)
HUGE = "9" * 5000
DEEP = "[" * 100 + "]" * 100
BIG = str(2**63)


@pytest.fixture
def env(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A project with one run waiting for a signal; returns (db, run id)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLOWCTL_DB", raising=False)
    clock = FakeClock(START)
    monkeypatch.setattr(cli, "SystemClock", lambda: clock)
    (tmp_path / "flows.py").write_text(FLOWS)
    (tmp_path / "ctl.yaml").write_bytes(b'name: c\nsteps:\n  - run: [echo, "\x1b[2J"]\n')
    (tmp_path / "latin1.yaml").write_bytes(b"name: caf\xe9\nsteps:\n  - run: [echo, hi]\n")
    assert run_main(monkeypatch, "--db", db, "run", "flows.py:nap").returncode == 0
    ((run_id,),) = query(db, "SELECT run_id FROM runs")
    return db, run_id


def counts(db: str) -> dict[str, int]:
    """Rows in every table flowctl has there."""
    if is_url(db):
        names = [
            r[0] for r in query(db, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        ]
    else:
        names = [r[0] for r in query(db, "SELECT name FROM sqlite_master WHERE type='table'")]
    return {n: query(db, f'SELECT COUNT(*) FROM "{n}"')[0][0] for n in names}


CASES = [
    # non-UTF-8 bytes (surrogate escapes, as Python decodes such argv)
    (["run", "flows.py:nap", "--key", "k\udce9y", "--detach"], "is not valid UTF-8"),
    (["ls", "--search", "\udcff"], "is not valid UTF-8"),
    (["ls", "--workflow", "n\udc80p"], "is not valid UTF-8"),
    (["cancel", "{run}", "--reason", "caf\udce9"], "is not valid UTF-8"),
    (["signal", "{run}", "g\udcf0"], "is not valid UTF-8"),
    (["show", "\udcff\udcfe"], "argument '\\xff\\xfe' is not valid UTF-8"),
    (["show", "\ud800"], "argument '\\ud800' is not valid UTF-8"),
    # integers over 4,300 digits, deep nesting, numbers JSON cannot carry
    (["run", "flows.py:nap", "-i", f"a:={HUGE}", "--detach"], "-i a:= is not usable JSON"),
    (["run", "flows.py:nap", "--input", f'{{"a": {HUGE}}}', "--detach"], "--input is not usable"),
    (["run", "flows.py:nap", "-i", f"a:={DEEP}", "--detach"], "nested 100 levels deep"),
    (["run", "flows.py:nap", "--input", '{"a": NaN}', "--detach"], "NaN is not a JSON number"),
    (["run", "flows.py:nap", "-i", "a:=1e999", "--detach"], "too large for a JSON number"),
    (["signal", "{run}", "go", "--data", DEEP], "--data is nested 100 levels deep"),
    (["signal", "{run}", "go", "--data", HUGE], "--data is not usable JSON"),
    # times near year 1 or 9999
    (["run", "flows.py:nap", "--at", "9999-12-31T23:59:59"], "is out of range"),
    (["run", "flows.py:nap", "--deadline", "0001-01-01T00:00:00+14:00"], "is out of range"),
    (["run", "flows.py:nap", "--deadline", "9999-12-31T23:59:59-14:00"], "is out of range"),
    (["run", "flows.py:nap", "--deadline", "0001-01-01", "--detach"], "is out of range"),
    (["redrive", "--all", "--since", "0001-01-01"], "is out of range"),
    # integers above 2^63
    (["run", "flows.py:nap", "--max-attempts", BIG, "--detach"], "--max-attempts"),
    (["ls", "--limit", BIG], "'--limit'"),
    (["agenda", "--limit", str(2**64)], "'--limit'"),
    (["fork", "{run}", "--from", BIG], "'--from'"),
    (["daemon", "--concurrency", BIG], "'--concurrency'"),
    (["schedule", "explain", "* * * * *", "--count", BIG], "'--count'"),
    # YAML with control characters or bytes that are not UTF-8
    (["run", "ctl.yaml", "--detach"], "ctl.yaml:3:18: yaml: character U+001B is not allowed"),
    (["run", "latin1.yaml", "--detach"], "latin1.yaml:1:10: yaml: byte 0xe9 is not UTF-8"),
    # a value with a newline is still one line when quoted back
    (["run", "line\none.py:fn"], "workflow file line\\none.py does not exist"),
]


@pytest.mark.parametrize(("args", "message"), CASES)
def test_known_tracebacks_are_one_usage_line(
    env: tuple[str, str], monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    db, run_id = env
    before = counts(db)
    argv = [a.replace("{run}", run_id) for a in args]
    out = run_main(monkeypatch, "--db", str(db), *argv)
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("flowctl: ")
    assert message in out.stderr
    assert counts(db) == before


def test_json_within_the_bounds_still_loads() -> None:
    nested: list[object] = []
    node = nested
    for _ in range(MAX_JSON_DEPTH - 1):
        node.append([])
        node = node[0]  # type: ignore[assignment]
    assert loads_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, "--data") == nested
    assert loads_json('{"a": "[[[[", "n": 1.5, "b": [1, 2]}', "--data") == {
        "a": "[[[[",  # brackets inside strings do not count as nesting
        "n": 1.5,
        "b": [1, 2],
    }
    assert loads_json("9" * 4000, "--data") == int("9" * 4000)
    with pytest.raises(InputError, match="nested 65 levels deep; at most 64"):
        loads_json("[" * 65 + "]" * 65, "--data")


def test_times_are_kept_within_the_year_range() -> None:
    assert check_time(datetime(2026, 1, 1, tzinfo=UTC), "--at").year == 2026
    for year in (1, 1969, 9001, 9999):
        with pytest.raises(UsageError, match="use a year between 1970 and 9000"):
            check_time(datetime(year, 6, 1, tzinfo=UTC), "--at")


def test_one_line_escapes_what_would_break_a_line() -> None:
    assert one_line("a\nb\tc\x1b[0m\u202e\udcff é 😀") == "a\\nb\\tc\\x1b[0m\\u202e\\udcff é 😀"


def test_a_json_object_that_gives_a_key_twice_is_refused_not_settled_by_the_last() -> None:
    # As `-i name=a -i name=b` is refused: one of the two values would be silently lost.
    from flowctl.cli.inputs import parse_inputs
    from flowctl.errors import InputError

    with pytest.raises(InputError) as exc:
        parse_inputs(None, '{"name": "a", "deep": {"x": 1, "x": 2}}')
    assert str(exc.value) == (
        "--input is not usable JSON: key 'x' appears twice in one object: give it once"
    )
    assert parse_inputs(None, '{"a": {"x": 1}, "b": {"x": 2}}') == {"a": {"x": 1}, "b": {"x": 2}}


def test_an_error_quoting_a_huge_value_is_cut_in_the_middle_and_keeps_its_hint(
    tmp_path: Path,
) -> None:
    from tests.inproc import run_main

    huge = "x" * 100_000
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        mp.delenv("FLOWCTL_DB", raising=False)
        hello = str(Path(__file__).resolve().parent.parent / "examples" / "hello.py")
        made = run_main(mp, "--db", str(tmp_path / "f.db"), "run", f"{hello}:hello", "--detach")
        assert made.returncode == 0, made.stderr
        out = run_main(mp, "--db", str(tmp_path / "f.db"), "show", huge)
    line = out.stderr.strip()
    assert out.returncode != 0 and "\n" not in line
    assert len(line) < 1100 and "characters cut)…" in line
    assert line.endswith("': give a run id or a unique prefix")
