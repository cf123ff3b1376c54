"""`flowctl validate` points at file:line:column of a bad `schedule:` entry, field by field,
like every other mistake (issue 10, item 11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flowctl import cli
from flowctl.clock import FakeClock
from flowctl.errors import ValidationError
from flowctl.ops import schedules as schedule_ops
from flowctl.store import Store

STEPS = "steps:\n  - run: [echo, hi]\n"


def validate(path: Path) -> tuple[int, list[str]]:
    result = CliRunner().invoke(cli.app, ["validate", "--json", str(path)])
    return result.exit_code, json.loads(result.stdout)["problems"]


@pytest.mark.parametrize(
    ("entry", "place", "message"),
    [
        ("cron: '0 25 * * *'", "3:9: schedule.cron", "invalid cron expression '0 25 * * *'"),
        ("cron: 5", "3:9: schedule.cron", "invalid cron expression 5"),
        ("every: 1 fortnight", "3:10: schedule.every", "invalid duration '1 fortnight'"),
        ("every: 15m\n  tz: Mars/Base", "4:7: schedule.tz", "unknown time zone 'Mars/Base'"),
        ("every: 15m\n  overlap: [x]", "4:12: schedule.overlap", "invalid overlap policy"),
        ("every: 15m\n  max_missed: 0", "4:15: schedule.max_missed", "invalid max_missed 0"),
        ("every: 15m\n  jitter: -5s", "4:11: schedule.jitter", "invalid duration '-5s'"),
        ("every: 15m\n  cronn: x", "4:3: schedule.cronn", "unknown key 'cronn'"),
        ("every: 15m\n  name: 'a b'", "4:9: schedule.name", "invalid schedule name 'a b'"),
        ("every: 15m\n  input: {nope: 1}", "4:10: schedule.input", "unknown input 'nope'"),
        ("tz: UTC", "3:3: schedule", "needs exactly one of cron or every, got neither"),
        ("{cron: '* * * * *', every: 1h}", "3:3: schedule", "got both"),
    ],
)
def test_each_schedule_mistake_has_its_line_and_column(
    tmp_path: Path, entry: str, place: str, message: str
) -> None:
    path = tmp_path / "sched.yaml"
    path.write_text(f"name: sched\nschedule:\n  {entry}\n{STEPS}")
    code, problems = validate(path)
    assert code == 2
    assert len(problems) == 1
    assert problems[0].startswith(f"{path}:{place}: ")
    assert message in problems[0]


def test_a_list_of_schedules_names_the_entry_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "multi.yaml"
    path.write_text(
        "name: multi\nschedule:\n"
        "  - cron: '0 9 * * *'\n"
        "  - {cron: '0 9 * * MON-FRY', tz: UTC}\n"
        "  - every: 1h\n"
        "    tz: Nowhere\n" + STEPS
    )
    code, problems = validate(path)
    assert code == 2
    assert [p.split(": ")[:2] for p in problems] == [
        [f"{path}:4:12", "schedule[1].cron"],
        [f"{path}:6:9", "schedule[2].tz"],
    ]


def test_sync_reports_the_same_places_and_changes_nothing(
    tmp_path: Path, store: Store, fake_clock: FakeClock
) -> None:
    folder = tmp_path / "workflows"
    folder.mkdir()
    (folder / "bad.yaml").write_text(f"name: bad\nschedule:\n  every: 1h\n  gap: maybe\n{STEPS}")
    toml = tmp_path / "flowctl.toml"
    with pytest.raises(ValidationError) as err:
        schedule_ops.sync_schedules(
            store,
            clock=fake_clock,
            workflows_dir=folder,
            toml_schedules={"t": {"target": str(folder / "bad.yaml"), "cron": "0 9 * *"}},
            toml_path=toml,
        )
    problems = err.value.problems
    assert problems[0].startswith(f"{folder / 'bad.yaml'}:4:8: schedule.gap: invalid gap policy")
    # TOML values carry no positions: the table and field are named instead
    assert any(p.startswith(f"{toml}: schedules.t") for p in problems[1:])
    assert store.list_schedules() == []


def test_a_valid_schedule_block_still_validates(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(f"name: ok\nschedule:\n  - cron: '0 9 * * MON-FRI'\n    tz: UTC\n{STEPS}")
    assert validate(path) == (0, [])
