"""Expunge: the entry, its transcript(s), its subagents and its lines in the harness's files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from openbus.daemon.history.liveness import proc_start
from openbus.kernel.errors import Conflict, NotFound
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
