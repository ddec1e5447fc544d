"""The history index's WAL checkpoints, run by a thread of their own beside the writer."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from openbus.daemon.history.store import HistoryStore
from tests.daemon.history.test_store import _entry as entry
from tests.support.wait import wait_until


def _all_in_the_file(path: Path) -> bool:
    """Every committed page is in the database file (none only in the WAL)."""
    db = sqlite3.connect(path)
    try:
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        size = db.execute("PRAGMA page_size").fetchone()[0]
    finally:
        db.close()
    return path.stat().st_size >= pages * size


def test_a_commit_far_short_of_sqlites_own_threshold_is_copied_into_the_database_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "history.db"
    s = HistoryStore(path)
    try:
        s.upsert_many(entry(f"s-{i}", f"a note about rotating keys {i} " * 20) for i in range(40))
        wait_until(lambda: _all_in_the_file(path), what="the commit's pages in the database file")
        assert s.count() == 40
    finally:
        s.close()


def test_closing_the_store_stops_its_checkpoint_thread_and_leaves_no_wal(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    path = tmp_path / "history.db"
    s = HistoryStore(path)
    s.upsert(entry("one", "a note"))
    # (only the store's own: an earlier test's executor may start a thread meanwhile)
    started = [t for t in threading.enumerate() if t not in before and t.name.startswith("history")]
    assert [t.name for t in started] == ["history-checkpoint"]
    s.close()
    assert not started[0].is_alive()
    assert not path.with_name("history.db-wal").exists()
    reopened = HistoryStore(path)
    assert reopened.count() == 1
    reopened.close()


def test_commits_while_checkpoints_are_held_are_copied_into_the_file_once_at_the_end(
    tmp_path: Path,
) -> None:
    path = tmp_path / "history.db"
    s = HistoryStore(path)
    try:
        wait_until(lambda: _all_in_the_file(path), what="the new schema in the database file")
        with s.checkpoints_held():
            for batch in range(3):
                s.upsert_many(
                    entry(f"s-{batch}-{i}", f"a note about rotating keys {i} " * 20)
                    for i in range(40)
                )
            assert not _all_in_the_file(path)  # nothing checkpointed these commits yet
        wait_until(lambda: _all_in_the_file(path), what="the commits' pages in the database file")
        assert s.count() == 120
    finally:
        s.close()
