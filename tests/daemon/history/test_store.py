"""The store's ranking (every term before some, the candidate window) and segment merging."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from openbus.daemon.history import store
from openbus.daemon.history.index import HistoryIndex
from tests.daemon.history.conftest import World


def test_sessions_holding_every_term_rank_before_those_holding_only_some(world: World) -> None:
    world.claude.session("partial", "/w", ["flaky flaky flaky flaky flaky"], ai_title="flaky")
    world.claude.session("full", "/w", ["a long note that mentions login once and flaky once"])
    world.index.reconcile()
    hits = world.index.search("flaky login")
    assert [h.entry.session_id for h in hits] == ["full", "partial"]
    assert hits[1].matched_terms == ("flaky",)


def test_a_full_match_older_than_the_candidate_window_still_ranks_first(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "CANDIDATES", 3)
    world.claude.session("old-full", "/w", ["rotate the signing keys and the login tokens"])
    world.index.reconcile()
    for i in range(5):  # newer sessions holding one of the two terms
        world.claude.session(f"new-{i}", "/w", [f"rotate rotate the logs {i}"])
    world.index.reconcile()
    hits = world.index.search("rotate login", limit=2)
    assert hits[0].entry.session_id == "old-full"
    assert hits[1].entry.session_id.startswith("new-")


def _segments(index: HistoryIndex) -> int:
    with index.store._lock:
        row = index.store._db.execute(
            "SELECT count(DISTINCT segid) FROM sessions_fts_idx"
        ).fetchone()
    return int(row[0])


def test_the_full_text_index_is_merged_into_one_segment_after_many_writes(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "MERGE_AFTER", 5)
    for i in range(3):  # one reconcile writes its transcripts in one transaction: one segment
        world.claude.session(f"s-{i}", "/w", [f"first batch {i}"])
    world.index.reconcile()
    assert _segments(world.index) == 1
    world.claude.session("s-3", "/w", ["second batch"])
    world.index.reconcile()
    assert _segments(world.index) == 2  # below the threshold: left to FTS5's own merging
    world.claude.session("s-4", "/w", ["third batch"])
    world.index.reconcile()
    assert _segments(world.index) == 1
    assert {h.entry.session_id for h in world.index.search("batch")} == {f"s-{i}" for i in range(5)}


def test_a_transcript_whose_write_fails_is_the_only_one_of_its_batch_lost(world: World) -> None:
    world.claude.session("kept", "/w", ["a note about rotating keys"])
    world.index.reconcile()
    (kept,) = world.index.recent()
    good = replace(kept, session_id="also-kept", transcript="/t/also-kept.jsonl")
    bad = replace(kept, session_id="broken", harness=None)  # type: ignore[arg-type]
    files = [(Path(f"/t/{e.session_id}.jsonl"), "claude", (1, 1, 1), e) for e in (good, bad, kept)]
    errors = world.index.store.record_files(files)
    assert errors[0] is None and errors[2] is None and "NOT NULL" in (errors[1] or "")
    found = {h.entry.session_id for h in world.index.search("rotating")}
    assert found == {"kept", "also-kept"}
    assert "/t/broken.jsonl" not in world.index.store.files()
