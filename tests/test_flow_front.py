"""Flow control as the front ends show it (issue 37, items 3, 6, 7): `run --priority`,
`why` naming the key and its holder or the limit and its next start, `ls` and `agenda`
showing held runs, and bad input refused in one line with nothing written. In process,
through `flowctl.cli.main`, on a fake clock; on both stores where a database is used."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from flowctl.daemon import Daemon, DaemonConfig
from flowctl.store import open_store
from tests.test_cli import START, Flowctl, flowctl  # noqa: F401  (the fixture)

PER_USER = """\
name: per-user
input: {user: str}
concurrency: {limit: 1, key: "${{ input.user }}"}
steps:
  - id: hello
    run: [echo, "hi"]
"""

PACED = """\
name: paced
input: {n: int}
steps:
  - id: call
    run: [echo, "call"]
    limit: api
"""

BAD = """\
name: bad
input: {user: str}
concurrency: {limit: 0}
debounce: {period: 2s, key: "${{ input.usr }}"}
steps:
  - id: hello
    run: [echo, hi]
    limit: "no spaces"
"""


KEYED_PY = """\
from flowctl import workflow

@workflow(concurrency={"limit": 1, "key": "${{ input.org.id }}"})
def per_org(ctx, org: dict):
    return ctx.step("one", lambda: 1)
"""


@pytest.fixture
def flows(tmp_path: Path) -> Path:
    for name, text in (("per_user", PER_USER), ("paced", PACED), ("bad", BAD)):
        (tmp_path / f"{name}.yaml").write_text(text)
    (tmp_path / "keyed.py").write_text(KEYED_PY)
    return tmp_path


def started(ran: object) -> str:
    return str(json.loads(ran.stdout)["id"])  # type: ignore[attr-defined]


def test_why_and_ls_name_the_key_and_the_run_holding_it(
    flowctl: Flowctl,  # noqa: F811
    flows: Path,
    db: str,
) -> None:
    yaml = str(flows / "per_user.yaml")
    first = started(flowctl(db, "run", yaml, "-i", "user=zed", "--detach", "--json"))
    second = started(flowctl(db, "run", yaml, "-i", "user=zed", "--detach", "--json"))
    with open_store(db) as store:
        claims, _ = store.claim_due("h/1/1/a", START, START + timedelta(seconds=60), 10)
    assert [c.run.run_id for c in claims] == [first]
    why = flowctl(db, "why", second)
    assert why.returncode == 0
    assert f"queued: concurrency 1 per user, key 'zed' held by run {first} since" in why.stdout
    facts = json.loads(flowctl(db, "why", second, "--json").stdout)
    assert facts["reason"] == "held_by_key"
    assert (facts["key"], facts["limit"], facts["per"]) == ("zed", 1, "user")
    assert [h["run_id"] for h in facts["holders"]] == [first]
    listed = flowctl(db, "ls").stdout
    held_line = next(line for line in listed.splitlines() if line.startswith(second))
    assert "queued (held)" in held_line and "concurrency 1 per user, key 'zed'" in held_line


def test_why_and_agenda_give_a_rate_limited_runs_next_start(
    flowctl: Flowctl,  # noqa: F811
    flows: Path,
    db: str,
) -> None:
    assert flowctl(db, "limits", "set", "api", "--rate", "1/1m").returncode == 0
    yaml = str(flows / "paced.yaml")
    ids = [
        started(flowctl(db, "run", yaml, "-i", f"n:={i}", "--detach", "--json")) for i in range(2)
    ]
    from flowctl.clock import FakeClock

    with open_store(db) as store:
        Daemon(store, FakeClock(START), DaemonConfig(concurrency=2)).tick()
        parked = [r for r in ids if store.get_run(r).flow_wait == "api"]
    assert len(parked) == 1
    why = flowctl(db, "why", parked[0])
    assert "waiting for limit 'api': 1/1m, next start at" in why.stdout
    facts = json.loads(flowctl(db, "why", parked[0], "--json").stdout)
    assert facts["reason"] == "waiting_for_limit" and facts["allows"] == "1/1m"
    assert facts["next_start_at"] == "2026-03-27T12:01:00.000000Z"
    agenda = json.loads(flowctl(db, "agenda", "--json").stdout)
    tokens = [i for i in agenda if i["kind"] == "token"]
    assert [(t["run_id"], t["at"]) for t in tokens] == [(parked[0], facts["next_start_at"])]
    listed = json.loads(flowctl(db, "limits", "ls", "--json").stdout)
    assert listed[0]["next_free"] == facts["next_start_at"]
    assert listed[0]["starts_in_window"] == 1


def test_priority_is_given_by_run_and_checked(
    flowctl: Flowctl,  # noqa: F811
    flows: Path,
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "p.db")
    yaml = str(flows / "paced.yaml")
    bad = flowctl(db, "run", yaml, "-i", "n:=1", "--priority", "many", "--detach")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert not Path(db).exists()  # nothing written, not even the database
    low = started(flowctl(db, "run", yaml, "-i", "n:=1", "--detach", "--json"))
    vip = started(flowctl(db, "run", yaml, "-i", "n:=2", "--priority", "7", "--detach", "--json"))
    with open_store(db) as store:
        assert store.get_run(vip).priority == 7 and store.get_run(low).priority == 0
        claims, _ = store.claim_due("h/1/1/a", START, START + timedelta(seconds=60), 1)
    assert [c.run.run_id for c in claims] == [vip]


def test_bad_flow_control_is_one_line_and_writes_nothing(
    flowctl: Flowctl,  # noqa: F811
    flows: Path,
    tmp_path: Path,
) -> None:
    db = tmp_path / "bad.db"
    assert flowctl(db, "limits", "set", "ok", "--concurrency", "1").returncode == 0
    checked = flowctl(None, "validate", str(flows / "bad.yaml"))
    assert checked.returncode != 0
    where = str(flows / "bad.yaml")
    assert f"{where}:3:14: concurrency.limit: must be a whole number" in checked.stderr
    assert f"{where}:4:11: debounce.key: names input 'usr', not declared" in checked.stderr
    assert f"{where}:8:12: steps[0].limit: limit name must be" in checked.stderr
    for args in (
        ["limits", "set", "api", "--concurrency", "0"],
        ["limits", "set", "api", "--rate", "2/0s"],
        ["limits", "set", "api", "--rate", "many"],
        ["limits", "rm", "nope"],
        ["run", str(flows / "per_user.yaml"), "--detach", "--input", '{"user": null}'],
        ["run", f"{flows / 'keyed.py'}:per_org", "--detach", "--input", '{"org": {}}'],
    ):
        ran = flowctl(db, *args)
        assert ran.returncode == 2, args
        assert len(ran.stderr.strip().splitlines()) == 1, ran.stderr
        if "per_org" in args[1]:
            assert "concurrency.key '${{ input.org.id }}' does not render" in ran.stderr
    with open_store(db) as store:
        assert store.limit_names() == ["ok"]
        assert store.count_by_status() == {} or sum(store.count_by_status().values()) == 0


def test_the_client_starts_with_a_priority(tmp_path: Path, flows: Path) -> None:
    from flowctl.client import Client

    with Client(db=tmp_path / "c.db") as client:
        low = client.start(str(flows / "paced.yaml"), {"n": 1})
        vip = client.start(str(flows / "paced.yaml"), {"n": 2}, priority=3)
        assert client.store.get_run(vip).priority == 3
        assert client.store.get_run(low).priority == 0
