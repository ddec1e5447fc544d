"""The history actions on the real gate: agents get the allowlist, humans the full entry."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon.compose import Daemon
from openbus.daemon.core import actors
from openbus.daemon.history.model import Liveness, LiveState, SessionEntry
from openbus.daemon.history.project import AGENT_FIELDS, project_for_agent
from openbus.kernel.errors import Forbidden, NotConnected, NotFound
from openbus.kernel.scopes import Scope
from tests.daemon.history.homes import ClaudeHome, CodexHome, history_daemon


class HistoryOnly:
    def scopes_for(self, actor: actors.Actor) -> frozenset[Scope]:
        return frozenset({Scope.HISTORY})


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    claude = ClaudeHome(tmp_path / "claude")
    codex = CodexHome(tmp_path / "codex")
    claude.session(
        "c-1",
        "/w/app",
        ["fix the flaky login test"],
        branches=("fix/login",),
        replies=["https://github.com/acme/app/pull/7"],
    )
    codex.rollout("x-1", "/w/app", ["migrate billing"])
    history = {"claude_config_dirs": [str(claude.root)], "codex_homes": [str(codex.root)]}
    with history_daemon(tmp_path, history) as built:
        yield built


def _audit(daemon: Daemon) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(daemon.config.db_path)
    try:
        return db.execute(
            "SELECT actor, action, outcome, target FROM audit ORDER BY seq"
        ).fetchall()
    finally:
        db.close()


def test_the_projection_holds_exactly_the_allowlist() -> None:
    entry = SessionEntry(
        harness="claude",
        session_id="c-1",
        repo="github.com/acme/app",
        repo_root="/w/app",
        origin="git@github.com:acme/app.git",
        cwd="/w/app",
        branches=("main",),
        prs=("https://github.com/acme/app/pull/7",),
        title="t",
        prompts=("secret plans",),
        started=1.0,
        last_active=2.0,
        resume_argv=("claude", "--resume", "c-1"),
        subagent=False,
        transcript="/home/u/.claude/projects/x/c-1.jsonl",
    )
    out = project_for_agent(entry, ["login"], Liveness(LiveState.RUNNING, "%4", 1234))
    assert tuple(out) == AGENT_FIELDS
    assert out["liveness"] == {"state": "running", "pane": "%4"}
    text = repr(out)
    for leak in ("secret plans", "--resume", ".jsonl", "1234", "started"):
        assert leak not in text


def test_an_agent_search_returns_only_the_allowlisted_fields_and_is_audited(
    daemon: Daemon,
) -> None:
    daemon.foundation.gate.scopes = HistoryOnly()
    agent = actors.agent_session("claude", "me-123", "p1")
    result = asyncio.run(daemon.foundation.gate.run(agent, "history.search", {"q": "flaky login"}))
    assert result["data_only"] is True and "source" in result
    [hit] = result["results"]
    assert tuple(hit) == AGENT_FIELDS
    assert hit["session_id"] == "c-1" and hit["matched_terms"] == ["flaky", "login"]
    assert hit["prs"] == ["https://github.com/acme/app/pull/7"]
    assert ("agent:claude:me-123", "history.search", "ok", None) in _audit(daemon)


def test_an_agent_get_returns_only_the_allowlisted_fields(daemon: Daemon) -> None:
    daemon.foundation.gate.scopes = HistoryOnly()
    agent = actors.agent_session("codex", "me-9", "p2")
    result = asyncio.run(
        daemon.foundation.gate.run(agent, "history.get", {"harness": "codex", "session_id": "x-1"})
    )
    assert tuple(result["session"]) == AGENT_FIELDS
    assert ("agent:codex:me-9", "history.get", "ok", "codex:x-1") in _audit(daemon)


def test_a_human_gets_the_full_entry_with_prompts_and_resume_argv(daemon: Daemon) -> None:
    human = actors.human("root")
    result = asyncio.run(
        daemon.foundation.gate.run(human, "history.get", {"harness": "claude", "session_id": "c-1"})
    )
    session = result["session"]
    assert session["prompts"] == ["fix the flaky login test"]
    assert session["resume_argv"] == ["claude", "--resume", "c-1"]
    assert session["liveness"]["state"] == "not_running"


def test_a_humans_search_shows_the_prompts_of_a_hit_that_matched_every_term(
    daemon: Daemon,
) -> None:
    human = actors.human("root")
    result = asyncio.run(daemon.foundation.gate.run(human, "history.search", {"q": "flaky login"}))
    (found,) = [r for r in result["results"] if r["session_id"] == "c-1"]
    assert found["prompts"] == ["fix the flaky login test"]
    assert found["matched_terms"] == ["flaky", "login"]


def test_an_agent_without_the_history_scope_is_not_connected(daemon: Daemon) -> None:
    agent = actors.agent_session("claude", "me-1", "p3")
    with pytest.raises(NotConnected):
        asyncio.run(daemon.foundation.gate.run(agent, "history.search", {"q": "login"}))
    assert ("agent:claude:me-1", "history.search", "refused", None) in _audit(daemon)


def test_expunge_is_never_offered_to_an_agent(daemon: Daemon) -> None:
    daemon.foundation.gate.scopes = HistoryOnly()
    agent = actors.agent_session("claude", "me-1", "p3")
    params = {"harness": "claude", "session_id": "c-1"}
    with pytest.raises(Forbidden):
        asyncio.run(daemon.foundation.gate.run(agent, "history.expunge", params))
    assert daemon.history.index.get("claude", "c-1")


def test_a_get_restricted_to_another_repo_does_not_find_the_session(daemon: Daemon) -> None:
    human = actors.human("root")
    params = {"harness": "claude", "session_id": "c-1", "repo": "/somewhere/else"}
    with pytest.raises(NotFound):
        asyncio.run(daemon.foundation.gate.run(human, "history.get", params))


def test_a_search_while_an_expunge_holds_the_index_waits_off_the_event_loop(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = daemon.history.index
    held, release, reached = threading.Event(), threading.Event(), threading.Event()
    searched_on: list[int] = []
    search = index.search

    def watched(*args: Any, **kwargs: Any) -> Any:  # the real search, its thread noted
        searched_on.append(threading.get_ident())
        reached.set()
        return search(*args, **kwargs)

    monkeypatch.setattr(index, "search", watched)

    def merging() -> None:  # what an expunge's merge of its shard does: holds the index
        with index.store._lock:
            held.set()
            release.wait(timeout=10)

    async def scenario() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        with index.expunging():
            holder = threading.Thread(target=merging)
            holder.start()
            assert held.wait(timeout=10)
            answer = asyncio.ensure_future(
                daemon.foundation.gate.run(actors.human("root"), "history.search", {"q": "flaky"})
            )
            # the loop is free to wait for the search to reach the index (on the loop itself,
            # it would stay blocked there until the holder gave up)
            assert await loop.run_in_executor(None, reached.wait, 10)
            assert searched_on != [threading.get_ident()]
            assert not answer.done()
            release.set()
            result = await asyncio.wait_for(answer, timeout=10)
            holder.join()
        return result

    result = asyncio.run(scenario())
    assert [hit["session_id"] for hit in result["results"]] == ["c-1"]
