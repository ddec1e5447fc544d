"""A daemon in-process over a real tmux server, with fake agent panes.

``world(tmp_path)`` builds the real daemon (``compose.build``: gate, audit, cards, grants,
directory, watcher, messaging) on a private tmux server, starts them inside the test's event
loop and hands a ``World`` to the scenario: ``agent()`` starts a fake agent pane (``fake_agent.py``,
detected as Claude Code) and grants it a preset; ``send``, ``status``, ``decide`` and
``connect`` go through the gate like the MCP tools and the human API do.

``box`` is the real daemon instead (gunicorn subprocess) on a private tmux server, with the
launchers ``sleeper`` (a pane that never looks idle) and ``tui`` (the fake agent TUI, its
control dir ``tmp_path/agent/control``); senders talk to it over MCP (``send``).
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon import compose
from openbus.daemon.compose import Daemon
from openbus.daemon.config import parse_config
from openbus.daemon.core.actors import Actor, human
from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.messaging.service import MessagingService
from openbus.kernel.clock import SystemClock, SystemRandom
from openbus.kernel.scopes import Preset
from tests.daemon.mcp.conftest import SLEEPER, Fleet
from tests.daemon.mcp.test_endpoint import mcp_session
from tests.support.daemon import start_daemon
from tests.support.tmux import TmuxServer, tmux_server
from tests.support.wait import async_wait_until, wait_until

FAKE_AGENT = Path(__file__).parent / "fake_agent.py"


@dataclass
class Agent:
    name: str
    pane: str
    incarnation: str
    principal: str | None
    actor: Actor | None
    control: Path

    def received(self) -> list[str]:
        path = self.control / "received"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def release(self) -> None:
        (self.control / "release").write_text("")


class World:
    def __init__(self, daemon: Daemon, server: TmuxServer, root: Path) -> None:
        self.daemon = daemon
        self.services = daemon.foundation
        self.server = server
        self.root = root
        self.user = getpass.getuser()
        self.human = human(self.user)
        self.gate = daemon.foundation.gate

    @property
    def messaging(self) -> MessagingService:
        return self.daemon.messaging

    @property
    def directory(self) -> Any:
        return self.daemon.directory.directory

    async def until(self, predicate: Callable[[], object], what: str, timeout: float = 15) -> Any:
        async def check() -> object:
            return predicate()

        return await async_wait_until(check, timeout=timeout, what=what)

    def fake_argv(self, name: str, harness: str = "claude") -> tuple[list[str], Path]:
        folder = self.root / "agents" / name
        (folder / "bin").mkdir(parents=True, exist_ok=True)
        script = folder / "bin" / harness
        shutil.copy(FAKE_AGENT, script)
        control = folder / "control"
        control.mkdir(exist_ok=True)
        return [sys.executable, str(script), str(control)], control

    async def agent(self, name: str, preset: Preset | None = Preset.COLLABORATE) -> Agent:
        argv, control = self.fake_argv(name)
        return await self.adopt(name, self.server.new_window(argv), control, preset)

    async def adopt(
        self,
        name: str,
        pane: str,
        control: Path,
        preset: Preset | None = Preset.COLLABORATE,
        timeout: float = 15,
    ) -> Agent:
        """The agent in ``pane`` once it is idle in the directory, granted ``preset``."""
        entry = await self.until(
            lambda: self._idle_entry(pane), f"{name}'s pane idle in the directory", timeout
        )
        principal = actor = None
        if preset is not None:
            grants = self.services.grants
            principal, _token, mint = grants.mint(
                harness=entry.harness, owner=self.user, preset=preset, launcher=None
            )
            attach = grants.attach_pane(
                principal, pane, entry.process.pid, str(entry.process.start), entry.incarnation
            )
            self.gate.record(
                AuditDraft(actor="system", action="test.grant", outcome="ok"), [mint, attach]
            )
            actor = grants.get(principal).actor()
        return Agent(name, pane, entry.incarnation, principal, actor, control)

    def _idle_entry(self, pane: str) -> Any:
        try:
            entry = self.directory.entry(pane)
        except Exception:
            return None
        ok = entry.reading.state == "idle" and entry.reading.composer_empty is True
        return entry if ok else None

    async def hold(self, agent: Agent) -> None:
        """The human starts a long turn in ``agent``'s pane (until ``agent.release()``)."""
        await self.until(lambda: self._idle_entry(agent.pane), f"{agent.name} idle")
        count = len(agent.received())
        self.server.keys(agent.pane, "-l", "HOLD this turn")
        await self.until(
            lambda: self.directory.entry(agent.pane).reading.composer_empty is False, "typed"
        )
        self.server.keys(agent.pane, "Enter")
        await self.until(lambda: len(agent.received()) > count, "the HOLD prompt submitted")
        await self.until(lambda: self.directory.entry(agent.pane).reading.state == "busy", "busy")

    async def respawn(self, agent: Agent) -> str:
        argv, _ = self.fake_argv(agent.name + "-again")
        self.server.run("respawn-pane", "-k", "-t", agent.pane, *argv)
        entry = await self.until(
            lambda: (
                (e := self._idle_entry(agent.pane)) and e.incarnation != agent.incarnation and e
            ),
            "the replaced pane idle",
        )
        return str(entry.incarnation)

    async def send(self, sender: Agent, to: Agent | str, text: str, mid: str, **extra: Any) -> Any:
        assert sender.actor is not None
        params: dict[str, Any] = {"text": text, "message_id": mid, **extra}
        if isinstance(to, Agent):
            params["target"] = to.pane
            params.setdefault("incarnation", to.incarnation)
        else:
            params["target"] = to
        return await self.gate.run(sender.actor, "message.send", params)

    async def status(self, sender: Agent, mid: str, wait: float = 0) -> Any:
        assert sender.actor is not None
        return await self.gate.run(
            sender.actor, "message.status", {"message_id": mid, "wait_seconds": wait}
        )

    async def final(self, sender: Agent, mid: str) -> str:
        answer = await self.status(sender, mid, wait=20)
        return str(answer["outcome"])

    async def cards(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = await self.gate.run(self.human, "cards.list", {})
        return found

    async def decide(self, card: str, decision: str) -> Any:
        return await self.gate.run(self.human, "cards.decide", {"card": card, "decision": decision})

    async def connect(self, agent: Agent, preset: str) -> Any:
        return await self.gate.run(
            self.human, "connect.set", {"pane": agent.pane, "preset": preset}
        )

    def audit(self, message_id: str | None = None) -> list[dict[str, Any]]:
        db = sqlite3.connect(self.services.config.db_path)
        try:
            db.row_factory = sqlite3.Row
            rows = db.execute("SELECT * FROM audit ORDER BY seq").fetchall()
        finally:
            db.close()
        out = [dict(r) for r in rows]
        if message_id is not None:
            out = [r for r in out if r.get("message_id") == message_id]
        return out


Scenario = Callable[[World], Awaitable[None]]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[TmuxServer]:
    with tmux_server(tmp_path / "tmux") as running:
        yield running


@pytest.fixture
def run_world(tmp_path: Path, server: TmuxServer) -> Callable[[Scenario], None]:
    def run(scenario: Scenario) -> None:
        # control, when a request starts it, is the fake TUI (``<tmp>/agents/control``)
        boss = tmp_path / "agents" / "control"
        (boss / "bin").mkdir(parents=True, exist_ok=True)
        (boss / "control").mkdir(exist_ok=True)
        tui = boss / "bin" / "claude"
        shutil.copy(FAKE_AGENT, tui)
        config = parse_config(
            {
                "daemon": {
                    "state_dir": str(tmp_path / "state"),
                    "socket": str(tmp_path / "d.sock"),
                },
                "tmux": {"socket": str(server.socket)},
                "history": {"claude_config_dirs": [], "codex_homes": []},
                "launchers": {
                    "boss": {
                        "harness": "claude",
                        "argv": [sys.executable, str(tui), str(boss / "control")],
                        "cwd": str(tmp_path),
                    }
                },
                "control": {"launcher": "boss"},
            },
            "<test>",
        )

        async def main() -> None:
            daemon = compose.build(config, clock=SystemClock(), random=SystemRandom())
            await daemon.start()
            try:
                await scenario(World(daemon, server, tmp_path))
            finally:
                await daemon.stop()

        asyncio.run(main())

    return run


# ---------------------------------------------------------------- the real daemon


@dataclass
class Box:
    fleet: Fleet
    extra: dict[str, Any]  # the config sections, for a restart on the same state directory


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    script = tmp_path / "agent" / "bin" / "claude"  # named so the directory sees Claude Code
    script.parent.mkdir(parents=True)
    shutil.copy(FAKE_AGENT, script)
    control = tmp_path / "agent" / "control"
    control.mkdir()
    with tmux_server(tmp_path / "tmux") as tmux:
        extra = {
            "tmux": {"socket": str(tmux.socket)},
            "history": {"claude_config_dirs": [], "codex_homes": []},
            "launchers.sleeper": {"harness": "claude", "argv": SLEEPER},
            "launchers.tui": {
                "harness": "claude",
                "argv": [sys.executable, str(script), str(control)],
            },
        }
        made = Fleet(start_daemon(tmp_path, extra), tmux, project)
        try:
            yield Box(made, extra)
        finally:
            if made.daemon.process.poll() is None:
                made.daemon.stop()
            if made.daemon.process.poll() is None:
                os.killpg(made.daemon.process.pid, signal.SIGKILL)


def entry_of(fleet: Fleet, pane: str, *, idle: bool = False) -> dict[str, Any]:
    def find() -> Any:
        with fleet.daemon.human() as client:
            panes = client.get("/api/directory").json()["panes"]
        found = next((p for p in panes if p["pane"] == pane), None)
        if found is None or found["harness"] == "shell":  # until the launched agent is seen
            return None
        if idle and not (found["state"] == "idle" and found["composer_empty"]):
            return None
        return found

    entry: dict[str, Any] = wait_until(find, timeout=20, what=f"{pane} in the directory")
    return entry


def send(fleet: Fleet, token: str, args: dict[str, Any]) -> Any:
    async def go() -> Any:
        async with mcp_session(fleet, token) as session:
            await session.initialize()
            return await session.call_tool("send_message", args)

    return asyncio.run(go())


def outcomes(fleet: Fleet, message_id: str) -> list[str]:
    return [r["outcome"] for r in fleet.audit() if r["message_id"] == message_id]


def approve_and_deliver(fleet: Fleet, message_id: str) -> None:
    """The human approves the one pending card; wait for the message's delivered record."""
    with fleet.daemon.human() as client:
        [card] = client.get("/api/cards").json()["cards"]
        assert client.post(f"/api/cards/{card['id']}", json={"decision": "approve"}).is_success
    wait_until(
        lambda: outcomes(fleet, message_id) == ["queued", "delivered"],
        timeout=20,
        what="the delivered record",
    )
