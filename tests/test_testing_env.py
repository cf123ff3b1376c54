"""flowctl.testing.WorkflowEnvironment on the database it is given: a SQLite file in the
folder it is given (or a temporary one) by default, or `db=` (a path or a PostgreSQL URL)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowctl.model import RunStatus
from flowctl.store import open_store
from flowctl.testing import WorkflowEnvironment
from tests.dbs import counts

FLOWS = "def nap(ctx):\n    ctx.sleep('1h')\n    return 'woke'\n"


def test_a_directory_holds_its_database_file(tmp_path: Path) -> None:
    (tmp_path / "flows.py").write_text(FLOWS)
    with WorkflowEnvironment(tmp_path, cwd=tmp_path) as env:
        env.start("flows.py:nap")
        assert env.db == str(tmp_path / "flowctl-test.db")
        assert counts(env.db, ("runs",)) == (1,)
    assert (tmp_path / "flowctl-test.db").exists()  # the caller's folder is left as it is


def test_without_a_directory_a_temporary_one_is_used_and_removed(tmp_path: Path) -> None:
    (tmp_path / "flows.py").write_text(FLOWS)
    with WorkflowEnvironment(cwd=tmp_path) as env:
        env.start("flows.py:nap")
        assert Path(env.db).name == "flowctl-test.db" and not env.db.startswith(str(tmp_path))
        assert counts(env.db, ("runs",)) == (1,)
    assert not Path(env.db).parent.exists()


def test_the_database_given_is_the_one_written(db: str, tmp_path: Path) -> None:
    (tmp_path / "flows.py").write_text(FLOWS)
    with WorkflowEnvironment(db=db, cwd=tmp_path) as env, open_store(db) as other:
        run_id = env.start("flows.py:nap")
        assert env.db == db
        assert other.get_run(run_id).status is RunStatus.SLEEPING  # another connection sees it
        env.advance("1h")
        run = other.get_run(run_id)
        assert (run.status, run.result) == (RunStatus.COMPLETED, "woke")
    assert not (tmp_path / "flowctl-test.db").exists()  # no file of its own beside it


def test_a_directory_and_a_database_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="takes a directory or a db, not both"):
        WorkflowEnvironment(tmp_path, db=tmp_path / "x.db")
    assert list(tmp_path.iterdir()) == []


def test_db_path_still_names_the_sqlite_file(tmp_path: Path) -> None:
    """`db_path` was the attribute before `db`: existing user tests keep working."""
    with WorkflowEnvironment(tmp_path) as env:
        assert env.db_path == tmp_path / "flowctl-test.db" and env.db == str(env.db_path)
