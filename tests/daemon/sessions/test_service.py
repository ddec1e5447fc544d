"""Session tools on the real daemon (composed in-process) over a real tmux server, with fake
agent TUIs (drawn like Claude Code) as parent and child: a start is a card, approving it opens
the child in its folder or a fresh worktree, tagged with its parent, and the brief arrives as
the parent's message; the family is all the tools reach; refusals open no pane."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon import compose
from openbus.daemon.config import parse_config
from openbus.daemon.core.audit import AuditDraft
from openbus.kernel.clock import SystemClock, SystemRandom
from openbus.kernel.errors import Forbidden, NotConnected
from openbus.kernel.scopes import Preset
from tests.daemon.messaging.conftest import Agent, World
from tests.daemon.sessions.conftest import child_argv, git, make_repo
from tests.support.tmux import TmuxServer, tmux_server
from tests.support.wait import async_wait_until

pytestmark = pytest.mark.timeout(120)


class Sessions(World):
    async def parent(self, name: str, preset: Preset = Preset.COLLABORATE) -> Agent:
        argv, control = self.fake_argv(name)
        pane = self.server.new_window(argv, cwd=self.root / "project")
        entry = await self.until(lambda: self._idle_entry(pane), f"{name} idle")
        grants = self.services.grants
        principal, _token, mint = grants.mint(
            harness="claude", owner=self.user, preset=preset, launcher="tui"
        )
        attach = grants.attach_pane(
            principal, pane, entry.process.pid, str(entry.process.start), entry.incarnation
        )
        self.gate.record(
            AuditDraft(actor="system", action="test.grant", outcome="ok"), [mint, attach]
        )
        return Agent(
            name, pane, entry.incarnation, principal, grants.get(principal).actor(), control
        )

    async def tool(self, agent: Agent, action: str, **params: Any) -> Any:
        assert agent.actor is not None
        return await self.gate.run(agent.actor, action, params)

    def panes(self) -> set[str]:
        out = self.server.run("list-panes", "-a", "-F", "#{pane_id}")
        return set(out.split())

    def spawns(self) -> list[tuple[str, str]]:
        db = sqlite3.connect(self.services.config.db_path)
        try:
            return [(c, p) for c, p in db.execute("SELECT child, parent FROM spawns")]
        finally:
            db.close()


@pytest.fixture
def server(tmp_path: Path) -> Any:
    with tmux_server(tmp_path / "tmux") as running:
        yield running


@pytest.fixture
def run(
    tmp_path: Path, server: TmuxServer
) -> Callable[[Callable[[Sessions], Awaitable[None]]], None]:
    make_repo(tmp_path / "project")
    argv = child_argv(tmp_path)
    config = parse_config(
        {
            "daemon": {"state_dir": str(tmp_path / "state"), "socket": str(tmp_path / "d.sock")},
            "tmux": {"socket": str(server.socket)},
            "history": {"claude_config_dirs": [], "codex_homes": []},
            "sessions": {
                "trusted_dirs": [str(tmp_path / "trusted")],
                "worktrees_root": str(tmp_path / "trees"),
            },
            "launchers": {
                "tui": {"harness": "claude", "argv": argv},
                "yolo": {
                    "harness": "claude",
                    "argv": [*argv, "--dangerously-skip-permissions"],
                },
            },
        },
        "<test>",
    )

    def go(scenario: Callable[[Sessions], Awaitable[None]]) -> None:
        async def main() -> None:
            daemon = compose.build(config, clock=SystemClock(), random=SystemRandom())
            await daemon.start()
            try:
                await scenario(Sessions(daemon, server, tmp_path))
            finally:
                await daemon.stop()

        asyncio.run(main())

    return go


def child_received(world: Sessions) -> list[str]:
    path = world.root / "child" / "control" / "received"
    return path.read_text().splitlines() if path.exists() else []


def test_an_approved_start_opens_the_child_in_a_worktree_tagged_and_briefed(run: Any) -> None:
    async def scenario(w: Sessions) -> None:
        project = w.root / "project"
        marker = w.root / "hook-ran"
        hook = project / ".git" / "hooks" / "post-checkout"
        hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
        hook.chmod(0o755)
        parent = await w.parent("parent")
        before = w.panes()
        answer = await w.tool(
            parent, "session.start", prompt="Reply with: pong", title="Pong check", worktree=True
        )
        assert answer["state"] == "waiting_for_consent"
        [card] = await w.cards()
        assert card["kind"] == "start_session"
        assert "wants to start a Claude session in" in card["summary"]
        assert card["summary"].endswith(": Reply with: pong")
        assert w.panes() == before  # nothing opens before the human says yes
        await w.decide(card["id"], "approve")
        read = await w.tool(parent, "session.read", session=answer["start"], wait_seconds=20)
        assert read["start"]["state"] == "started"
        child_pane = read["pane"]
        tree = w.root / "trees" / "project" / "pong-check"
        assert read["start"]["worktree"]["branch"] == "openbus/pong-check"
        assert git(tree, "branch", "--show-current") == "openbus/pong-check"
        assert git(project, "config", "branch.openbus/pong-check.openbusBase") == "main"
        assert not marker.exists()
        assert w.spawns() == [(read["principal"], parent.principal)]
        await w.until(
            lambda: any("Reply with: pong" in r for r in child_received(w)), "brief typed"
        )
        # list_sessions mine: exactly the child
        listed = await w.tool(parent, "session.list", mine=True)
        assert [s["pane"] for s in listed["sessions"]] == [child_pane]
        assert listed["sessions"][0]["relation"] == "child"
        # send_to_session reaches the child through messaging
        sent = await w.tool(parent, "session.send", session=child_pane, text="second round")
        assert sent["outcome"] == "queued"
        await w.until(lambda: any("second round" in r for r in child_received(w)), "message typed")
        start_records = [r for r in w.audit() if r["action"] in ("session.start", "session.launch")]
        assert [r["outcome"] for r in start_records] == ["card", "ok"]

    run(scenario)


def test_outsiders_are_listed_bare_and_refusals_open_no_pane_or_worktree(run: Any) -> None:
    async def scenario(w: Sessions) -> None:
        parent = await w.parent("parent")
        other = await w.parent("other")
        watcher = await w.parent("watcher", Preset.OBSERVE)
        before = w.panes()
        listed = await w.tool(parent, "session.list")
        outside = [s for s in listed["sessions"] if s["pane"] in (other.pane, watcher.pane)]
        assert len(outside) == 2  # no title, no last message outside the family
        assert all(set(s) == {"pane", "harness", "cwd", "state"} for s in outside), outside
        with pytest.raises(Forbidden, match="ask the user"):
            await w.tool(parent, "session.start", prompt="x", cwd="/tmp")
        with pytest.raises(Forbidden, match="approvals and sandbox off"):
            await w.tool(parent, "session.start", prompt="x", launcher="yolo")
        with pytest.raises(Forbidden, match="not in your family"):
            await w.tool(parent, "session.read", session=other.pane)
        with pytest.raises(Forbidden, match="not in your family"):
            await w.tool(parent, "session.send", session=other.pane, text="hi")
        with pytest.raises(NotConnected):
            await w.tool(watcher, "session.start", prompt="x")
        answer = await w.tool(parent, "session.start", prompt="x", worktree=True, title="no")
        [card] = await w.cards()
        await w.decide(card["id"], "decline")
        read = await w.tool(parent, "session.read", session=answer["start"], wait_seconds=5)
        assert read["state"] == "declined"
        assert w.panes() == before
        assert not (w.root / "trees").exists()
        assert w.spawns() == []

    run(scenario)


def test_revoking_the_parent_cancels_its_pending_start(run: Any) -> None:
    async def scenario(w: Sessions) -> None:
        parent = await w.parent("parent")
        answer = await w.tool(parent, "session.start", prompt="later")
        await w.connect(parent, "observe")
        assert await w.cards() == []
        assert w.daemon.sessions._starts[answer["start"]].start.state.value == "cancelled"
        with pytest.raises(NotConnected):
            await w.tool(parent, "session.list")

    run(scenario)


def test_a_human_lets_an_agent_start_without_cards_and_disconnect_all_covers_children(
    run: Any,
) -> None:
    async def scenario(w: Sessions) -> None:
        parent = await w.parent("parent")
        await w.gate.run(w.human, "sessions.allow", {"pane": parent.pane})
        answer = await w.tool(parent, "session.start", prompt="no card needed")
        assert answer["state"] == "started"
        assert await w.cards() == []
        family = await w.gate.run(w.human, "sessions.family", {"pane": parent.pane})
        assert [c["pane"] for c in family["family"]["children"]] == [answer["pane"]]
        families = await w.gate.run(w.human, "sessions.families", {})
        assert families == {"children": {answer["pane"]: parent.pane}}
        await w.gate.run(w.human, "connect.disconnect_all", {})  # covers the child too
        assert w.services.grants.get(answer["principal"]).state == "revoked"
        [record] = [r for r in w.audit() if r["action"] == "session.start"]
        assert "may start sessions" in record["details"]

    run(scenario)


def test_the_session_tools_are_listed_only_to_a_caller_holding_spawn(run: Any) -> None:
    async def scenario(w: Sessions) -> None:
        names = {"start_session", "list_sessions", "read_session", "send_to_session"}
        tools = w.daemon.mcp.tools
        agent = (await w.parent("parent")).actor
        assert agent is not None
        collaborate = {t.name for t in tools.listed(w.gate, agent, Preset.COLLABORATE.scopes)}
        observe = {t.name for t in tools.listed(w.gate, agent, Preset.OBSERVE.scopes)}
        assert names <= collaborate
        assert not names & observe

    run(scenario)


def test_the_brief_waits_for_a_child_that_draws_its_composer_before_it_takes_input(
    run: Any,
) -> None:
    async def scenario(w: Sessions) -> None:
        # The child ignores Enter for its first moments, as Claude Code under load does.
        (w.root / "child" / "control" / "cold").write_text("0.3")
        parent = await w.parent("parent")
        await w.gate.run(w.human, "sessions.allow", {"pane": parent.pane})
        answer = await w.tool(parent, "session.start", prompt="Reply with: warm")
        await w.until(
            lambda: "brief" in w.daemon.sessions._starts[answer["start"]].start.result,
            "brief queued",
        )
        status = await w.tool(
            parent, "message.status", message_id=f"brief-{answer['start']}", wait_seconds=20
        )
        assert status["outcome"] == "delivered"
        assert [r for r in child_received(w) if "Reply with: warm" in r] != []
        assert len(child_received(w)) == 1

    run(scenario)


def test_a_listing_without_family_is_kept_until_the_directory_changes(run: Any) -> None:
    async def scenario(w: Sessions) -> None:
        parent = await w.parent("parent")
        other = await w.parent("other")
        first = await w.tool(parent, "session.list")
        assert [s["pane"] for s in first["sessions"]] == [other.pane]
        assert await w.tool(parent, "session.list") is first
        third = await w.parent("third")  # a new pane: the directory changed
        second = await w.tool(parent, "session.list")
        assert {s["pane"] for s in second["sessions"]} == {other.pane, third.pane}
        await w.gate.run(w.human, "sessions.allow", {"pane": parent.pane})
        started = await w.tool(parent, "session.start", prompt="hi")

        async def child_row() -> Any:
            listed = await w.tool(parent, "session.list")
            rows = [s for s in listed["sessions"] if s["pane"] == started["pane"]]
            return listed if rows and rows[0].get("relation") == "child" else None

        listed = await async_wait_until(child_row, timeout=15, what="the child in the listing")
        assert await w.tool(parent, "session.list") is not listed  # a family's, made afresh

    run(scenario)
