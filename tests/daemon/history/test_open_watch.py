"""The open watch counts opens and closes in the transcript folders, with real inotify."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from openbus.daemon.history.open_watch import OpenWatch
from tests.daemon.history.holding import holding


@pytest.fixture
def sessions(tmp_path: Path) -> Path:
    folder = tmp_path / "codex" / "sessions" / "2026" / "12" / "04"
    folder.mkdir(parents=True)
    return tmp_path / "codex" / "sessions"


@pytest.fixture
def watch(sessions: Path) -> Iterator[OpenWatch]:
    watch = OpenWatch([sessions])
    assert watch.working
    yield watch
    watch.close()


def _rollout(sessions: Path, day: str = "2026/12/04", name: str = "rollout-a.jsonl") -> Path:
    path = sessions / day / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}\n")
    return path


def test_every_folder_under_a_root_is_watched(sessions: Path, watch: OpenWatch) -> None:
    assert watch.folders() == 4  # sessions, 2026, 12, 04
    assert watch.covers(str(sessions / "2026" / "12" / "04" / "rollout-a.jsonl"))


def test_opening_and_closing_a_file_in_a_watched_folder_each_change_the_stamp(
    sessions: Path, watch: OpenWatch
) -> None:
    rollout = _rollout(sessions)
    before = watch.stamp()
    fd = os.open(rollout, os.O_RDONLY)
    opened = watch.stamp()
    assert opened != before
    assert watch.stamp() == opened  # nothing more happened
    os.close(fd)
    assert watch.stamp() != opened


def test_a_holder_killed_changes_the_stamp(sessions: Path, watch: OpenWatch) -> None:
    rollout = _rollout(sessions)
    with holding(rollout) as holder:
        held = watch.stamp()
        holder.kill()
        holder.wait()
        assert watch.stamp() != held  # its exit closed the rollout


def test_listing_or_stating_a_watched_folder_leaves_the_stamp(
    sessions: Path, watch: OpenWatch
) -> None:
    rollout = _rollout(sessions)
    before = watch.stamp()
    for folder in (sessions, rollout.parent):
        os.listdir(folder)
    os.stat(rollout)
    assert watch.stamp() == before


def test_a_folder_made_later_is_watched_and_counted(sessions: Path, watch: OpenWatch) -> None:
    before = watch.stamp()
    rollout = _rollout(sessions, day="2027/01/01")  # three new folders at once
    made = watch.stamp()
    assert made != before
    assert watch.folders() == 7
    assert watch.covers(str(rollout))
    with rollout.open():
        assert watch.stamp() != made


def test_a_root_that_appears_later_is_taken_up_when_armed(tmp_path: Path) -> None:
    sessions = tmp_path / "codex" / "sessions"
    watch = OpenWatch([sessions])
    try:
        assert watch.folders() == 0
        rollout = _rollout(sessions)
        assert not watch.covers(str(rollout))
        before = watch.stamp()
        watch.arm()
        assert watch.covers(str(rollout))
        assert watch.stamp() != before  # opened before it was watched, perhaps
    finally:
        watch.close()


def test_a_removed_folder_is_no_longer_covered(sessions: Path, watch: OpenWatch) -> None:
    rollout = _rollout(sessions)
    before = watch.stamp()
    shutil.rmtree(sessions / "2026")
    assert watch.stamp() != before
    assert not watch.covers(str(rollout))
    assert watch.folders() == 1


def test_a_moved_folder_is_covered_under_its_new_path_only(
    sessions: Path, watch: OpenWatch
) -> None:
    rollout = _rollout(sessions)
    (sessions / "2026").rename(sessions / "2025")
    watch.stamp()
    assert not watch.covers(str(rollout))
    assert watch.covers(str(sessions / "2025" / "12" / "04" / rollout.name))


def test_a_symlink_in_a_watched_folder_or_a_file_elsewhere_is_not_covered(
    tmp_path: Path, sessions: Path, watch: OpenWatch
) -> None:
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text("{}\n")
    link = sessions / "2026" / "12" / "04" / "rollout-link.jsonl"
    link.symlink_to(elsewhere)
    assert not watch.covers(str(link))
    assert not watch.covers(str(elsewhere))


def test_a_closed_watch_counts_nothing(sessions: Path) -> None:
    watch = OpenWatch([sessions])
    watch.close()
    assert watch.stamp() is None
    assert not watch.covers(str(_rollout(sessions)))


def test_a_folder_given_alone_is_watched_without_its_subfolders(tmp_path: Path) -> None:
    data = tmp_path / "opencode"
    (data / "snapshot" / "objects").mkdir(parents=True)
    watch = OpenWatch([], [data])
    try:
        assert watch.folders() == 1
        db = data / "opencode.db"
        db.write_text("")
        assert watch.covers(str(db))
        before = watch.stamp()
        (data / "storage" / "session").mkdir(parents=True)  # a new folder: counted, not watched
        made = watch.stamp()
        assert made != before
        assert watch.folders() == 1
        (data / "storage" / "session" / "s.json").write_text("{}")
        assert watch.stamp() == made  # what happens below it is not counted
    finally:
        watch.close()


MAX_QUEUED = Path("/proc/sys/fs/inotify/max_queued_events")


@contextlib.contextmanager
def _small_queue(sessions: Path, rollout: Path) -> Iterator[OpenWatch]:
    """A watch whose kernel queue holds 16 events (the limit is read when the watch starts;
    root sets it), filled past that by opens of ``rollout``: what happens next is lost."""
    limit = MAX_QUEUED.read_text()
    MAX_QUEUED.write_text("16\n")
    try:
        watch = OpenWatch([sessions])
    finally:
        MAX_QUEUED.write_text(limit)
    try:
        for _ in range(10):  # twenty events: the queue overflows
            os.close(os.open(rollout, os.O_RDONLY))
        yield watch
    finally:
        watch.close()


def _counts(watch: OpenWatch, path: Path) -> bool:
    before = watch.stamp()
    with open(path, encoding="utf-8"):
        return watch.stamp() != before


def test_after_lost_events_a_folder_removed_and_made_again_is_watched_anew(
    sessions: Path,
) -> None:
    rollout = _rollout(sessions)
    with _small_queue(sessions, rollout) as watch:
        shutil.rmtree(rollout.parent)
        again = _rollout(sessions)  # the same path, a new folder
        watch.stamp()  # reads what was queued, and the overflow
        assert watch.covers(str(again))
        assert _counts(watch, again)


def test_after_lost_events_a_moved_folder_is_covered_under_its_new_path_only(
    sessions: Path,
) -> None:
    rollout = _rollout(sessions)
    with _small_queue(sessions, rollout) as watch:
        moved = sessions / "2026" / "12" / "05"
        rollout.parent.rename(moved)
        made = _rollout(sessions, "2026/12/06")  # a folder made while events were lost
        watch.stamp()
        assert not watch.covers(str(rollout))
        assert watch.covers(str(moved / rollout.name)) and watch.covers(str(made))
        assert _counts(watch, moved / rollout.name) and _counts(watch, made)
        assert watch.folders() == 5  # sessions, 2026, 12, 05, 06
