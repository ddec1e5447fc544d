"""The store's ranking (every term before some, the candidate window), its full-text shards
and segment merging."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import pytest

from openbus.daemon.history import store
from openbus.daemon.history.index import HistoryIndex
from openbus.daemon.history.model import SessionEntry
from openbus.daemon.history.query import (
    match_expressions,
    query_terms,
    repo_bucket,
    scope_key,
    scoped_expressions,
)
from openbus.daemon.history.sources import Sources
from openbus.daemon.history.store import HistoryStore, shard_table, shard_tables
from openbus.kernel.testing import FixedClock
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


def test_a_search_reads_in_one_transaction_and_leaves_none_open(world: World) -> None:
    world.claude.session("s1", "/w", ["rotate the signing keys"])
    world.index.reconcile()
    assert [h.entry.session_id for h in world.index.search("rotate keys")] == ["s1"]
    assert not world.index.store._db.in_transaction


def test_a_search_that_fails_midway_leaves_no_transaction_open(world: World) -> None:
    world.claude.session("s1", "/w", ["rotate the signing keys"])
    world.index.reconcile()
    with pytest.raises(sqlite3.OperationalError):
        world.index.store.ranked('"unterminated', None, 10)
    assert not world.index.store._db.in_transaction


def _segments(index: HistoryIndex) -> int:
    with index.store._lock:
        row = index.store._db.execute(
            f"SELECT count(DISTINCT segid) FROM {shard_table(0)}_idx"
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


def _entry(session_id: str, prompt: str) -> SessionEntry:
    return SessionEntry(
        harness="claude",
        session_id=session_id,
        repo=None,
        repo_root=None,
        origin=None,
        cwd="/w",
        branches=(),
        prs=(),
        title=None,
        prompts=(prompt,),
        started=None,
        last_active=None,
        resume_argv=None,
        subagent=False,
    )


def _search(s: HistoryStore, query: str, limit: int = 10) -> list[str]:
    anyterm, every = match_expressions(query_terms(query), None)
    return [e.session_id for e, _, _ in s.ranked(anyterm, every, limit)]


def _shard_rows(path: Path) -> dict[int, set[int]]:
    """The rowids each full-text shard holds, read through a connection of its own."""
    db = sqlite3.connect(path)
    try:
        return {
            k: {r[0] for r in db.execute(f"SELECT rowid FROM {shard_table(k)}")}
            for k in shard_tables(db)
        }
    finally:
        db.close()


def _rowid(path: Path, session_id: str) -> int:
    db = sqlite3.connect(path)
    try:
        query = "SELECT id FROM sessions WHERE session_id = ?"
        return int(db.execute(query, (session_id,)).fetchone()[0])
    finally:
        db.close()


def test_a_search_across_shards_ranks_full_matches_first_and_an_upsert_moves_to_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "MERGE_AFTER", 1)
    path = tmp_path / "history.db"
    s = HistoryStore(path, shard_rows=3)  # rowids 0-2, 3-5, 6-8, ...
    s.upsert(_entry("old-full", "okapi zebra rotate the keys"))  # rowid 1: shard 0
    s.upsert(_entry("old-other", "nothing to see"))
    s.upsert_many(_entry(f"partial-{i}", f"rotate rotate rotate logs {i}") for i in range(6))
    s.upsert(_entry("new-full", "rotate the zebra pen"))
    assert sorted(_shard_rows(path)) == [0, 1, 2, 3]
    assert set(_search(s, "zebra")) == {"new-full", "old-full"}
    ranked = _search(s, "rotate zebra", limit=4)
    assert set(ranked[:2]) == {"old-full", "new-full"}  # full matches before the partial ones
    assert all(r.startswith("partial-") for r in ranked[2:]) and len(ranked) == 4
    assert _search(s, "okapi") == ["old-full"]  # a rare term found in the oldest shard

    s.upsert_many([_entry("old-full", "zebra giraffe"), _entry("old-other", "still nothing")])
    shards = _shard_rows(path)
    assert 0 not in shards  # emptied by the upserts, and dropped
    newest = max(shards)
    assert s.count() == 9 and sum(len(rows) for rows in shards.values()) == 9
    assert _search(s, "okapi") == []  # the old text is gone
    assert _search(s, "giraffe") == ["old-full"]
    assert _rowid(path, "old-full") in shards[newest]
    s.close()

    reopened = HistoryStore(path, shard_rows=5)  # another shard size: rebuilt from the transcripts
    assert reopened.count() == 0 and _shard_rows(path) == {}
    reopened.close()


def test_an_older_match_ranks_only_when_the_newest_window_does_not_fill_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "WINDOW", 4)
    s = HistoryStore(tmp_path / "history.db", shard_rows=2)
    s.upsert(_entry("old", "zebra zebra zebra zebra"))  # rowid 1: the best score
    s.upsert_many(_entry(f"filler-{i}", f"nothing {i}") for i in range(4))
    s.upsert(_entry("new", "a long note that names a zebra once among many other words"))
    assert _search(s, "zebra", limit=1) == ["new"]  # found within the newest four sessions
    assert _search(s, "zebra", limit=2) == ["old", "new"]  # the page not full: walked on
    s.close()


def test_an_index_whose_repo_terms_are_kept_by_session_id_is_dropped_for_a_rebuild(
    tmp_path: Path,
) -> None:
    """Schema 5 kept a scope row under its session's id: its searches within a repo would
    mix the two orders, so the index is rebuilt from the transcripts."""
    path = tmp_path / "history.db"
    s = HistoryStore(path)
    s.upsert(_in("github.com/acme/widget", "old", "zebra"))
    s._db.execute("PRAGMA user_version = 5")
    s.close()
    s = HistoryStore(path)
    assert s.count() == 0
    s.upsert(_in("github.com/acme/widget", "new", "zebra"))
    assert _scoped(s, "zebra", "github.com/acme/widget") == ["new"]
    s.close()


class _Screen:
    """Finds something to mask in a text holding "hunter2"; notes what it was asked."""

    def __init__(self, fingerprint: int | None) -> None:
        self.fingerprint = fingerprint
        self.asked: list[list[str]] = []

    def clean(self, texts: Iterable[str]) -> bool:
        self.asked.append(list(texts))
        return not any("hunter2" in t for t in self.asked[-1])


def _screened_index(path: Path, screen: _Screen) -> HistoryIndex:
    return HistoryIndex(path, Sources(), clock=FixedClock(), screen=screen)


def _clean_under(index: HistoryIndex, prompts: bool = True) -> dict[str, int | None]:
    return {h.entry.session_id: h.entry.clean_under for h in index.search("zebra", prompts=prompts)}


def test_entries_are_written_unscreened_and_a_pass_keeps_what_their_shown_text_holds(
    tmp_path: Path,
) -> None:
    screen = _Screen(fingerprint=77)
    index = _screened_index(tmp_path / "history.db", screen)
    shown = replace(
        _in("github.com/acme/widget", "clean", "zebra hunter2 in a prompt, never shown"),
        title="zebra crossing",
        branches=("feat/zebra",),
        prs=("https://github.com/acme/widget/pull/7",),
    )
    index.upsert(shown)
    index.upsert(replace(_in("github.com/acme/widget", "key", "zebra"), title="zebra hunter2"))
    assert screen.asked == [] and index.unscreened() == 2  # writing screens nothing
    assert _clean_under(index) == {"clean": None, "key": None}
    assert index.screen_pass() == 2
    # the shown text alone is asked about (the repo, title, cwd, branches and PRs), not prompts
    assert screen.asked[0] == [
        "github.com/acme/widget",
        "zebra crossing",
        "/w",
        "feat/zebra",
        "https://github.com/acme/widget/pull/7",
    ]
    for prompts in (True, False):
        assert _clean_under(index, prompts) == {"clean": 77, "key": None}
    read = index.get("claude", "clean")
    assert read.clean_under == 77
    # an entry made from it with another shown text carries no answer over: it is masked
    assert replace(read, title="zebra hunter2").clean_under is None
    assert index.unscreened() == 0 and index.screen_pass() == 0 and len(screen.asked) == 2
    index.close()
    # other rules: every entry is screened again under them (until then, an entry says the
    # rules it was found clean under, which the agents' projection does not take for these)
    again = _Screen(fingerprint=78)
    index = _screened_index(tmp_path / "history.db", again)
    assert index.unscreened() == 2 and _clean_under(index) == {"clean": 77, "key": None}
    assert index.screen_pass() == 2 and _clean_under(index) == {"clean": 78, "key": None}
    index.close()


def test_what_is_left_to_screen_is_read_from_the_screening_index_not_the_sessions(
    tmp_path: Path,
) -> None:
    # /healthz counts it on every call, and a pass asks for it batch by batch: the sessions
    # table (prompts and all) is never scanned for it
    s = HistoryStore(tmp_path / "history.db")
    for i in range(50):
        s.upsert(_entry(f"s{i}", "zebra"))
    plan = s._db.execute(
        f"EXPLAIN QUERY PLAN SELECT count(*) FROM sessions WHERE {store._UNSCREENED}", (5, 5)
    ).fetchall()
    steps = [str(row[3]) for row in plan]
    assert any("COVERING INDEX sessions_screened" in step for step in steps), steps
    assert not any(step.startswith("SCAN sessions") for step in steps), steps
    assert s.count_unscreened(5) == 50
    s.close()


def test_a_screening_keeps_no_answer_for_text_the_entry_no_longer_holds(tmp_path: Path) -> None:
    s = HistoryStore(tmp_path / "history.db")
    s.upsert(replace(_entry("s", "zebra"), title="zebra one"))
    [(rowid, entry)] = s.unscreened(5, 10)
    # rewritten meanwhile, under the same rowid (it was the newest): another title
    s.upsert(replace(_entry("s", "zebra"), title="zebra hunter2"))
    assert s.get("claude", "s").title == "zebra hunter2"
    assert s.mark_screened(5, [(rowid, entry, True)]) == 0
    assert s.count_unscreened(5) == 1 and s.get("claude", "s").clean_under is None
    s.close()


def test_without_a_screen_or_with_one_whose_answers_are_not_kept_nothing_is_screened(
    tmp_path: Path,
) -> None:
    unkept = _Screen(fingerprint=None)
    for index in (
        _screened_index(tmp_path / "a.db", unkept),
        HistoryIndex(tmp_path / "b.db", Sources(), clock=FixedClock()),
    ):
        index.upsert(_entry("s", "zebra"))
        assert index.screen_pass() == 0 and index.unscreened() is None
        assert index.get("claude", "s").clean_under is None
        index.close()
    assert unkept.asked == []


def test_an_index_of_schema_6_keeps_its_entries_and_has_them_screened(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    s = HistoryStore(path)
    s.upsert(_entry("old", "zebra"))
    s._db.executescript(
        "DROP INDEX sessions_screened; ALTER TABLE sessions DROP COLUMN screened_under;"
        " ALTER TABLE sessions DROP COLUMN shown_clean; PRAGMA user_version = 6;"
    )
    s.close()
    index = _screened_index(path, _Screen(fingerprint=5))
    assert index.count() == 1 and index.unscreened() == 1
    assert index.screen_pass() == 1 and _clean_under(index) == {"old": 5}
    index.close()


def test_an_index_of_the_unsharded_schema_is_dropped_for_a_rebuild(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE sessions (id INTEGER PRIMARY KEY, harness TEXT, session_id TEXT);"
        "CREATE VIRTUAL TABLE sessions_fts USING fts5(title, prompts);"
        "INSERT INTO sessions VALUES (1, 'claude', 'old');"
        "INSERT INTO sessions_fts (rowid, title, prompts) VALUES (1, 'zebra', 'zebra');"
        "PRAGMA user_version = 2;"
    )
    db.close()
    s = HistoryStore(path)
    assert s.count() == 0
    s.upsert(_entry("new", "zebra again"))
    assert _search(s, "zebra") == ["new"]
    s.close()
    db = sqlite3.connect(path)
    names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.close()
    assert not any(n.startswith("sessions_fts") and not n.startswith(shard_table(0)) for n in names)


def _scoped(s: HistoryStore, query: str, repo: str, limit: int = 10) -> list[str]:
    key = scope_key(repo)
    assert key is not None
    anyterm, every = scoped_expressions(query_terms(query), key)
    return [e.session_id for e, _, _ in s.ranked(anyterm, every, limit, scoped=True)]


def _in(repo: str, session_id: str, prompt: str) -> SessionEntry:
    return replace(
        _entry(session_id, prompt), repo=repo, repo_root=f"/src/{repo.rsplit('/', 1)[1]}"
    )


def test_a_search_within_a_repo_identity_reads_its_own_terms_and_keeps_no_stale_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "MERGE_AFTER", 1)
    path = tmp_path / "history.db"
    s = HistoryStore(path, shard_rows=3)
    widget, gadget = "github.com/acme/widget", "github.com/acme/gadget"
    s.upsert_many(
        [
            _in(widget, "w-full", "rotate the zebra keys"),
            _in(widget, "w-some", "rotate rotate the logs"),
            _in(gadget, "g-full", "rotate the zebra pen"),
            _entry("no-repo", "rotate zebra"),
        ]
    )
    assert _scoped(s, "rotate zebra", widget) == ["w-full", "w-some"]  # full match first
    assert _scoped(s, "rotate zebra", "https://github.com/acme/gadget.git") == ["g-full"]
    assert _scoped(s, "zebra", "github.com/acme/nothing") == []
    assert scope_key("acme/widget") is None and scope_key("/src/widget") is None

    s.upsert(_in(widget, "w-full", "giraffe only now"))  # its old words leave the repo's terms
    assert _scoped(s, "zebra", widget) == []
    assert _scoped(s, "giraffe", widget) == ["w-full"]
    s.remove(s.get("claude", "w-some"))
    assert _scoped(s, "rotate", widget) == []
    s.upsert_many(_in(gadget, f"g-{i}", f"filler {i}") for i in range(6))  # empties shard 0
    assert 0 not in shard_tables(s._db, store.SCOPE_PREFIX)
    for k in shard_tables(s._db, store.SCOPE_PREFIX):
        table = store.scope_table(k)
        s._db.execute(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")
    assert _scoped(s, "rotate zebra", gadget) == ["g-full"]
    s.close()


def test_a_repos_own_terms_sit_together_under_its_bucket_and_come_back_as_the_entries_ids(
    tmp_path: Path,
) -> None:
    s = HistoryStore(tmp_path / "history.db")
    repos = [f"github.com/acme/r{i}" for i in range(4)]
    s.upsert_many(_in(repos[i % 4], f"s{i}", f"okapi number {i}") for i in range(40))
    table = store.scope_table(0)
    by_repo: dict[int, list[int]] = {}
    for (rowid,) in s._db.execute(f"SELECT rowid FROM {table} ORDER BY rowid"):
        by_repo.setdefault(rowid >> store.SCOPE_ID_BITS, []).append(rowid & store.SCOPE_ID_MASK)
    ids = {k: int(v) for k, v in s._db.execute("SELECT session_id, id FROM sessions")}
    assert by_repo == {
        repo_bucket(r): sorted(ids[f"s{i}"] for i in range(40) if i % 4 == n)
        for n, r in enumerate(repos)
    }  # each repo's rows one run, in id order
    newest_first = [f"s{i}" for i in range(38, -1, -4)]
    assert _scoped(s, "okapi", repos[2], limit=10) == newest_first[:10]
    partial = [x for x in newest_first if x != "s6"]
    assert _scoped(s, "number 6", repos[2]) == ["s6", *partial[:9]]  # full match first
    with pytest.raises(ValueError):
        store.scope_rowid(repos[0], store.SCOPE_ID_MASK + 1)
    s.close()


def test_a_list_column_reads_back_as_json_loads_reads_it_and_refuses_anything_else() -> None:
    for value in ([], ["main"], ["a", 'b\n"c"', "naïve ✓"], ["x" * 5000]):
        stored = json.dumps(value)
        assert store._texts(stored) == tuple(json.loads(stored))
    for bad in ('["a"] ["b"]', '{"a": 1}', '"a"', "[1, ", "[] x"):
        with pytest.raises(ValueError):
            store._texts(bad)


def test_the_text_is_kept_once_and_a_rewritten_entry_of_any_text_leaves_no_stale_term(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "MERGE_AFTER", 1)
    s = HistoryStore(tmp_path / "history.db")
    widget = "github.com/acme/widget"
    odd = replace(
        _in(widget, "odd", "Zoë's café\x00naïve ☃ tab\there\r\nokapi"),
        title="Ünïcode «title» \x00 yak",
        branches=("feature/émoji-🦊", "main"),
        prs=("https://github.com/acme/widget/pull/7",),
        prompts=("Zoë's café\x00naïve ☃ tab\there\r\nokapi", "second filigree prompt " * 200),
    )
    s.upsert(odd)
    for word in ("zoe", "cafe", "naive", "okapi", "yak", "emoji", "filigree"):
        assert _search(s, word) == ["odd"], word
        assert _scoped(s, word, widget) == ["odd"], word
    s.upsert(replace(odd, title=None, branches=(), prs=(), prompts=("plain words",)))
    for word in ("zoe", "cafe", "naive", "okapi", "yak", "emoji", "filigree", "pull"):
        assert _search(s, word) == [], word
        assert _scoped(s, word, widget) == [], word
    assert _search(s, "plain") == ["odd"]
    s.remove(s.get("claude", "odd"))
    assert _search(s, "plain") == [] and _scoped(s, "plain", widget) == []
    names = {r[0] for r in s._db.execute("SELECT name FROM sqlite_master")}
    assert not {n for n in names if n.endswith("_content")}  # no full-text table keeps text
    for table in (shard_table(0), store.scope_table(0)):
        assert s._db.execute(f"SELECT count(*) FROM {table}_docsize").fetchone() == (0,)
        s._db.execute(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")
    s.close()
