"""Real Claude Code as the control session, against the stub model, with the real daemon:
``openbus control start`` opens tmux session ``control`` with the charter as its first
prompt. An ambiguous ``openbus ask`` (made before control starts: control starts on first
use) is what control's first ``wait_for_changes`` answers with; its scripted turn calls
``list_panes``, ``hand_off`` (the target gets the brief under a stamp naming control and the
request) and ``reply`` (in ``openbus ask --json``). A request naming one pane's folder goes
straight there, and control's model gets no request for it. An ordinary Collaborate agent
is never offered the act tools."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon.control.charter import MARK
from tests.daemon.mcp.conftest import Fleet, read_token
from tests.daemon.mcp.test_endpoint import mcp_session
from tests.daemon.messaging.conftest import FAKE_AGENT
from tests.support.daemon import RunningDaemon, running_daemon
from tests.support.harnesses import make_claude
from tests.support.stub_model import StubModel, call_tool, reply
from tests.support.tmux import TmuxServer
from tests.support.wait import wait_until

pytestmark = [pytest.mark.harness, pytest.mark.timeout(240)]


def cli_json(daemon: RunningDaemon, *args: str) -> Any:
    return json.loads(daemon.cli(*args, "--json", check=True, timeout=90).stdout)


def pane_entry(daemon: RunningDaemon, pane: str) -> Any:
    for entry in cli_json(daemon, "directory")["panes"]:
        if entry["pane"] == pane:
            return entry
    return None


def test_real_claude_code_as_control_hands_off_ambiguous_requests_and_replies(
    tmp_path: Path, stub: StubModel, tmux: TmuxServer
) -> None:
    home = tmp_path / "control-home"
    alpha = tmp_path / "alpha-svc"
    for folder in (home, alpha):
        folder.mkdir()
        subprocess.run(["git", "init", "-q", str(folder)], check=True)
    claude = make_claude(tmp_path / "claude", stub, home)
    script = tmp_path / "agent" / "bin" / "claude"  # the fake TUI, seen as Claude Code
    script.parent.mkdir(parents=True)
    shutil.copy(FAKE_AGENT, script)
    received = tmp_path / "agent" / "control"
    received.mkdir()
    extra: dict[str, dict[str, Any]] = {
        "tmux": {"socket": str(tmux.socket)},
        "history": {"claude_config_dirs": [], "codex_homes": []},
        "launchers.boss": {
            "harness": "claude",
            "argv": [str(claude.binary)],
            "env": claude.env(),
            "cwd": str(home),
        },
        "launchers.tui": {
            "harness": "claude",
            "argv": [sys.executable, str(script), str(received)],
        },
        "control": {"launcher": "boss"},
    }
    (tmp_path / "d").mkdir()
    with running_daemon(tmp_path / "d", extra) as daemon:
        worker = cli_json(daemon, "launch", "tui", "--cwd", str(alpha), "--preset", "collaborate")
        wait_until(
            lambda: (e := pane_entry(daemon, worker["pane"])) and e["state"] == "idle",
            timeout=30,
            what="the worker idle",
        )

        def typed() -> str:
            path = received / "received"
            lines = path.read_text().splitlines() if path.exists() else []
            return "\n".join(json.loads(line) for line in lines)

        brief = "Write the release notes draft for the parser change (the human asked)."
        turn = stub.script(
            # the first prompt can arrive before the MCP server is connected: Claude Code's own
            # tool waits for it
            call_tool("WaitForMcpServers", {}),
            call_tool("mcp__openbus__wait_for_changes", {"timeout_seconds": 50}),
            call_tool("mcp__openbus__list_panes", {}),
            call_tool(
                "mcp__openbus__hand_off",
                {
                    "thread": "r1",
                    "to": worker["pane"],
                    "incarnation": worker["incarnation"],
                    "brief": brief,
                },
            ),
            call_tool(
                "mcp__openbus__reply", {"thread": "r1", "text": f"Handed to {worker['pane']}."}
            ),
            reply("routed"),
            match=MARK,
        )
        # the request comes first (control starts on first use): its wait sees it at once
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            asking = pool.submit(
                cli_json, daemon, "ask", "what should we work on next?", "--wait", "50"
            )
            wait_until(
                lambda: cli_json(daemon, "thread")["entries"], timeout=30, what="the request"
            )
            started = cli_json(daemon, "control", "start")
            assert started["started"] is True
            assert started["connect"]["actor"] is not None
            entry = wait_until(
                lambda: (e := pane_entry(daemon, started["pane"])) and e.get("control") and e,
                timeout=60,
                what="the control pane with its indicator",
            )
            assert entry["session"] == "control"
            assert cli_json(daemon, "control", "start")["started"] is False  # one control
            allowed = cli_json(daemon, "control", "allow-panes")
            assert allowed == {"control_may_open_panes": True}
            taken = cli_json(daemon, "control", "allow-panes", "--off")
            assert taken == {"control_may_open_panes": False}
            asked = asking.result(timeout=90)
        assert MARK in json.dumps(stub.turns()[0].body)
        # the charter also came at MCP initialize, after the common rules (Claude Code shows
        # a server's instructions to the model as that server's section)
        given = json.dumps(f"Do not work around it; tell the user.\n\n{MARK}")[1:-1]
        assert any(given in json.dumps(t.body) for t in stub.turns())
        assert asked["request"]["id"] == "r1"
        assert asked["sent_to"] is None  # to control
        assert asked["request"]["state"] == "answered"
        assert asked["later"][-1]["kind"] == "reply"
        assert asked["later"][-1]["text"] == f"Handed to {worker['pane']}."
        turn.wait_finished(timeout=60)
        wait_until(lambda: brief in typed(), timeout=30, what="the brief typed in the worker")
        assert "from control \u00b7 origin r1" in typed()
        offered = stub.turns()[-1].body.get("tools", [])  # once its MCP server is connected
        names = {t.get("name") for t in offered}
        assert {"mcp__openbus__hand_off", "mcp__openbus__press_key"} <= names

        turns = len(stub.turns())
        direct = cli_json(daemon, "ask", "in alpha-svc, add a test for the tokenizer")
        assert direct["sent_to"] == worker["pane"]
        wait_until(lambda: "tokenizer" in typed(), timeout=30, what="the direct send typed")
        assert len(stub.turns()) == turns  # control's model got no request for it

        detail = cli_json(daemon, "pane", worker["pane"])
        assert [o["request"]["id"] for o in detail["origins"]][-1] == "r1"

        # an ordinary Collaborate agent is never offered the act tools
        token = wait_until(lambda: read_token(worker["pid"]), timeout=10, what="its token")
        tools = _tools_of(daemon, token)
        assert "hand_off" not in tools and "press_key" not in tools
        assert "wait_for_changes" in tools


def _tools_of(daemon: RunningDaemon, token: str) -> set[str]:
    fleet = Fleet(daemon, None, Path("/"))  # type: ignore[arg-type]

    async def go() -> set[str]:
        async with mcp_session(fleet, token) as session:
            await session.initialize()
            listed = await session.list_tools()
            return {t.name for t in listed.tools}

    return asyncio.run(go())
