"""The history index over synthetic Claude Code and Codex homes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from openbus.daemon.core.clock import FixedClock
from openbus.daemon.core.errors import BadRequest, Conflict, NotFound
from openbus.daemon.history import index as index_module
from openbus.daemon.history.index import HistoryIndex, fts_query, query_terms
from openbus.daemon.history.liveness import proc_start
from openbus.daemon.history.sources import Sources
from tests.daemon.history.homes import ClaudeHome, CodexHome


@dataclass
class World:
    tmp: Path
    claude: ClaudeHome
    codex: CodexHome
    index: HistoryIndex
    widget: Path  # a git checkout with origin github.com/acme/widget
    gadget: Path  # a git checkout with origin github.com/acme/gadget


def _checkout(path: Path, origin: str) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(["git", "-C", str(path), "remote", "add", "origin", origin], check=True)
    return path


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    claude = ClaudeHome(tmp_path / "claude")
    codex = CodexHome(tmp_path / "codex")
    widget = _checkout(tmp_path / "src" / "widget", "git@github.com:acme/widget.git")
    gadget = _checkout(tmp_path / "src" / "gadget", "https://github.com/acme/gadget.git")
    index = HistoryIndex(
        tmp_path / "state" / "history.db",
        Sources((claude.root,), (codex.root,)),
        clock=FixedClock(),
    )
    yield World(tmp_path, claude, codex, index, widget, gadget)
    index.close()


def _populate(w: World) -> None:
    w.claude.session(
        "c-login",
        str(w.widget),
        ["fix the flaky login test in the auth module"],
        branches=("fix/login-flake",),
        replies=["opened https://github.com/acme/widget/pull/4955"],
        ai_title="Fix flaky login test",
    )
    w.claude.subagent("c-login", "agent1", str(w.widget), "Find every caller of authenticate()")
    w.claude.session("c-docs", str(w.gadget), ["write the release notes for version two"])
    w.codex.rollout("x-billing", str(w.gadget), ["migrate the billing tables to postgres"])
    w.codex.rollout(
        "x-exec", str(w.widget), ["run the linter and report"], source="exec", day="2026/11/29"
    )
    w.codex.name("x-billing", "Billing migration")


def test_reconcile_indexes_every_session_with_repo_branches_prs_and_resume(world: World) -> None:
    _populate(world)
    stats = world.index.reconcile()
    assert (stats.scanned, stats.indexed, stats.errors) == (5, 5, [])
    login = world.index.get("claude", "c-login")
    assert login.repo == "github.com/acme/widget"
    assert login.repo_root == str(world.widget)
    assert login.branches == ("fix/login-flake",)
    assert login.prs == ("https://github.com/acme/widget/pull/4955",)
    assert login.title == "Fix flaky login test"
    assert login.resume_argv == ("claude", "--resume", "c-login")
    sub = world.index.get("claude", "agent1")
    assert sub.subagent and sub.parent_session_id == "c-login" and sub.resume_argv is None
    assert sub.prompts == ("Find every caller of authenticate()",)
    billing = world.index.get("codex", "x-billing")
    assert billing.title == "Billing migration"
    assert billing.repo == "github.com/acme/gadget"
    assert billing.resume_argv == ("codex", "resume", "x-billing")
    assert world.index.get("codex", "x-exec").prompts == ("run the linter and report",)


def test_a_second_reconcile_parses_only_the_files_that_changed(world: World) -> None:
    _populate(world)
    world.index.reconcile()
    parsed: list[Path] = []
    original = world.index._parse

    def spy(t, names):  # type: ignore[no-untyped-def]
        parsed.append(t.path)
        return original(t, names)

    world.index._parse = spy  # type: ignore[method-assign]
    assert world.index.reconcile().changed == 0
    assert parsed == []

    changed = world.claude.session(
        "c-docs", str(world.gadget), ["write the release notes for version two", "add a changelog"]
    )
    progress: list[tuple[int, int]] = []
    stats = world.index.reconcile(progress=lambda done, total: progress.append((done, total)))
    assert (stats.scanned, stats.changed, stats.indexed) == (5, 1, 1)
    assert parsed == [changed]
    assert progress == [(0, 1), (1, 1)]
    assert world.index.get("claude", "c-docs").prompts[-1] == "add a changelog"


def test_a_replaced_file_with_the_same_size_and_mtime_is_still_seen_by_its_inode(
    world: World,
) -> None:
    path = world.claude.session("c-x", "/w", ["alpha"])
    world.index.reconcile()
    st = path.stat()
    replacement = path.with_suffix(".new")
    replacement.write_bytes(path.read_bytes().replace(b"alpha", b"omega"))
    os.utime(replacement, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(replacement, path)
    assert world.index.reconcile().changed == 1
    assert world.index.get("claude", "c-x").prompts == ("omega",)


def test_a_vanished_transcript_keeps_its_entry_but_loses_its_resume_argv(world: World) -> None:
    path = world.claude.session("c-gone", "/w", ["something to remember"])
    world.index.reconcile()
    path.unlink()
    assert world.index.reconcile().gone == 1
    entry = world.index.get("claude", "c-gone")
    assert entry.transcript is None and entry.resume_argv is None
    assert entry.prompts == ("something to remember",)


def test_a_renamed_codex_thread_is_retitled_without_its_rollout_changing(world: World) -> None:
    _populate(world)
    world.index.reconcile()
    world.codex.name("x-billing", "Postgres billing cutover")
    world.index.reconcile()
    assert world.index.get("codex", "x-billing").title == "Postgres billing cutover"
    assert world.index.search("cutover")[0].entry.session_id == "x-billing"


def test_search_ranks_title_matches_first_and_names_the_matched_terms(world: World) -> None:
    _populate(world)
    world.claude.session(
        "c-other", "/w", ["tidy the readme", "the login page copy mentions a flaky network"]
    )
    world.index.reconcile()
    hits = world.index.search("flaky login")
    assert [h.entry.session_id for h in hits][:2] == ["c-login", "c-other"]
    assert hits[0].matched_terms == ("flaky", "login")
    assert world.index.search("4955")[0].entry.session_id == "c-login"  # the PR number
    assert world.index.search("login-flake")[0].entry.session_id == "c-login"  # the branch


def test_the_repo_filter_applies_before_ranking_not_after_the_limit(world: World) -> None:
    for i in range(5):
        world.claude.session(
            f"w-{i}", str(world.widget), [f"deploy deploy the deploy pipeline run {i}"]
        )
    world.claude.session(
        "g-1",
        str(world.gadget),
        ["a long prompt about many other things where deploy appears only once " * 3],
    )
    world.index.reconcile()
    top3 = [h.entry.session_id for h in world.index.search("deploy", limit=3)]
    assert "g-1" not in top3  # post-filtering this top 3 would find nothing in gadget
    for repo in (
        "github.com/acme/gadget",
        "https://github.com/acme/gadget.git",
        str(world.gadget),
        "acme/gadget",
    ):
        hits = world.index.search("deploy", repo=repo, limit=3)
        assert [h.entry.session_id for h in hits] == ["g-1"], repo


@pytest.mark.parametrize(
    "query",
    [
        '"unbalanced',
        "NEAR(login flaky)",
        "title:login",
        "login*",
        "a AND OR NOT b",
        "-login",
        "^x {y}",
    ],
)
def test_user_text_is_never_fts_syntax(world: World, query: str) -> None:
    _populate(world)
    world.index.reconcile()
    world.index.search(query)  # no sqlite error, whatever the text


def test_query_terms_are_words_quoted_with_stopwords_dropped() -> None:
    assert query_terms("What is the Login flow? login") == ["login", "flow"]
    assert query_terms("the") == ["the"]
    assert fts_query(["login", "flow"]) == '"login" OR "flow"'


def test_a_query_with_no_words_is_a_bad_request(world: World) -> None:
    with pytest.raises(BadRequest):
        world.index.search("?!* ")


def test_get_of_an_unknown_session_or_a_pending_harness_says_so(world: World) -> None:
    with pytest.raises(NotFound):
        world.index.get("claude", "nope")
    with pytest.raises(BadRequest, match="pending"):
        world.index.get("omp", "x")


def test_expunge_removes_the_entry_its_transcript_its_subagents_and_history_lines(
    world: World,
) -> None:
    _populate(world)
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
    _populate(world)
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


def test_a_stop_hook_push_indexes_that_transcript_at_once(world: World) -> None:
    path = world.claude.session("c-hook", "/w", ["pushed by the hook"])
    entries = world.index.push_hook(
        {"session_id": "c-hook", "transcript_path": str(path), "hook_event_name": "Stop"}
    )
    assert [e.session_id for e in entries] == ["c-hook"]
    assert world.index.search("pushed")[0].entry.session_id == "c-hook"
    assert world.index.reconcile().changed == 0  # the push recorded the file too


def test_a_subagent_stop_hook_push_indexes_the_subagent_and_its_parent(world: World) -> None:
    parent = world.claude.session("c-par", "/w", ["parent work"])
    child = world.claude.subagent("c-par", "ag7", "/w", "child task")
    entries = world.index.push_hook(
        {
            "session_id": "c-par",
            "transcript_path": str(parent),
            "agent_id": "ag7",
            "agent_transcript_path": str(child),
            "hook_event_name": "SubagentStop",
        }
    )
    assert {e.session_id for e in entries} == {"c-par", "ag7"}


def test_a_hook_push_by_session_id_alone_finds_the_transcript(world: World) -> None:
    world.claude.session("c-byid", "/w", ["found by id"])
    entries = world.index.push_hook({"session_id": "c-byid", "hook_event_name": "SessionEnd"})
    assert [e.session_id for e in entries] == ["c-byid"]


def test_a_hook_push_without_a_transcript_or_session_is_refused(world: World) -> None:
    with pytest.raises(BadRequest):
        world.index.push_hook({"hook_event_name": "Stop"})


def test_an_entry_keeps_its_repo_after_its_cwd_is_gone(world: World) -> None:
    cwd = world.tmp / "src" / "gone"
    cwd.mkdir()
    subprocess.run(["git", "init", "-q", str(cwd)], check=True)
    subprocess.run(
        ["git", "-C", str(cwd), "remote", "add", "origin", "https://h.example/t/gone"], check=True
    )
    path = world.claude.session("c-cwd", str(cwd), ["one"])
    world.index.reconcile()
    subprocess.run(["rm", "-rf", str(cwd)], check=True)
    world.claude.session("c-cwd", str(cwd), ["one", "two"])
    assert path.exists()
    world.index.reconcile()
    assert world.index.get("claude", "c-cwd").repo == "h.example/t/gone"


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
    monkeypatch.setattr(index_module, "CANDIDATES", 3)
    world.claude.session("old-full", "/w", ["rotate the signing keys and the login tokens"])
    world.index.reconcile()
    for i in range(5):  # newer sessions holding one of the two terms
        world.claude.session(f"new-{i}", "/w", [f"rotate rotate the logs {i}"])
    world.index.reconcile()
    hits = world.index.search("rotate login", limit=2)
    assert hits[0].entry.session_id == "old-full"
    assert hits[1].entry.session_id.startswith("new-")


def _segments(index: HistoryIndex) -> int:
    with index._lock:
        row = index._db.execute("SELECT count(DISTINCT segid) FROM sessions_fts_idx").fetchone()
    return int(row[0])


def test_the_full_text_index_is_merged_into_one_segment_after_many_writes(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_module, "MERGE_AFTER", 4)
    for i in range(3):  # one transaction, so one segment, per transcript
        world.claude.session(f"s-{i}", "/w", [f"first batch {i}"])
    world.index.reconcile()
    assert _segments(world.index) == 3  # below the threshold: left to FTS5's own merging
    world.claude.session("s-3", "/w", ["second batch"])
    world.index.reconcile()
    assert _segments(world.index) == 1
    assert {h.entry.session_id for h in world.index.search("batch")} == {f"s-{i}" for i in range(4)}
