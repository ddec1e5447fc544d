"""Expunge: the entry, its transcript(s), its subagents and its lines in the harness's files."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from openbus.daemon.history.liveness import proc_start
from openbus.kernel.errors import Conflict, NotFound, Unavailable
from tests.daemon.history.conftest import World, populate


def test_expunge_removes_the_entry_its_transcript_its_subagents_and_history_lines(
    world: World,
) -> None:
    populate(world)
    world.claude.history_line("c-login", "fix the flaky login test")
    world.claude.history_line("c-docs", "write the release notes")
    world.index.reconcile()
    transcript = Path(world.index.get("claude", "c-login").transcript or "")
    removed = world.index.expunge("claude", "c-login")
    assert str(transcript) in removed
    assert not transcript.exists()
    assert not transcript.with_suffix("").exists()  # the subagents' folder
    for sid in ("c-login", "agent1"):
        with pytest.raises(NotFound):
            world.index.get("claude", sid)
    assert world.index.search("flaky") == []
    history = (world.claude.root / "history.jsonl").read_text()
    assert "c-login" not in history and "c-docs" in history
    assert world.index.reconcile().indexed == 0  # nothing comes back


def _index_files_holding(world: World, text: bytes) -> list[str]:
    """The index's files (the database, its WAL) that hold ``text`` anywhere in their bytes."""
    folder = world.tmp / "state"
    return sorted(p.name for p in folder.glob("history.db*") if text in p.read_bytes())


def test_an_expunged_sessions_text_is_left_in_none_of_the_index_files(world: World) -> None:
    populate(world)
    world.claude.session(
        "c-leak", str(world.widget), ["my token is zqxjkvleakedtoken42, keep it safe"]
    )
    world.index.reconcile()
    assert _index_files_holding(world, b"zqxjkvleakedtoken42")  # the check sees it there

    world.index.expunge("claude", "c-leak")

    assert _index_files_holding(world, b"zqxjkvleakedtoken42") == []
    assert [h.entry.session_id for h in world.index.search("flaky login")] == ["c-login"]
    assert world.index.search("zqxjkvleakedtoken42") == []


def test_an_expunge_that_cannot_cut_the_wal_says_so_and_still_expunges(world: World) -> None:
    populate(world)
    world.claude.session("c-leak", str(world.widget), ["my token is zqxjkvleakedtoken42"])
    world.index.reconcile()
    transcript = Path(world.index.get("claude", "c-leak").transcript or "")
    reader = sqlite3.connect(world.tmp / "state" / "history.db", isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM sessions").fetchone()  # holds its snapshot

        with pytest.raises(Unavailable, match="write-ahead log"):
            world.index.expunge("claude", "c-leak")
    finally:
        reader.close()

    with pytest.raises(NotFound):
        world.index.get("claude", "c-leak")
    assert not transcript.exists()


def test_expunging_a_codex_session_drops_its_thread_name_too(world: World) -> None:
    populate(world)
    world.codex.history_line("x-billing", "migrate billing")
    world.index.reconcile()
    rollout = Path(world.index.get("codex", "x-billing").transcript or "")
    world.index.expunge("codex", "x-billing")
    assert not rollout.exists()
    assert "x-billing" not in (world.codex.root / "session_index.jsonl").read_text()
    assert "x-billing" not in (world.codex.root / "history.jsonl").read_text()


def test_a_running_session_is_not_expunged(world: World) -> None:
    world.claude.session("c-live", "/w", ["still going"])
    world.claude.status(os.getpid(), "c-live", "/w", proc_start(os.getpid()))
    world.index.reconcile()
    with pytest.raises(Conflict, match="running"):
        world.index.expunge("claude", "c-live")
    assert world.index.get("claude", "c-live")
