"""Real Codex and the real Gemini CLI as the control session, against the stub model, with the
real daemon: an ambiguous ``openbus ask`` while no control runs starts it from its launcher,
the charter is its first prompt (typed once it listed its openbus tools), and its scripted turn
calls ``wait_for_changes`` (which answers with the request) and ``reply``, which shows in the
requester's thread; its transcript is followed for the re-seed. Claude Code as control is
``test_real_control``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon.control.charter import MARK
from tests.daemon.control.test_real_control import Boss, cli_json, control_fleet
from tests.daemon.mcp.test_real_gemini import state_dir  # noqa: F401 - the fixture
from tests.support.harnesses import make_codex
from tests.support.more_harnesses import make_harness
from tests.support.stub_model import StubModel, call_tool, reply
from tests.support.tmux import TmuxServer
from tests.support.wait import wait_until

pytestmark = [pytest.mark.harness, pytest.mark.timeout(240)]


def codex_boss(tmp_path: Path, stub: StubModel) -> Boss:
    def make(home: Path) -> dict[str, Any]:
        codex = make_codex(tmp_path / "codex", stub, home)
        return {"harness": "codex", "argv": codex.tui_argv(), "env": codex.env()}

    return make


def gemini_boss(tmp_path: Path, stub: StubModel) -> Boss:
    def make(home: Path) -> dict[str, Any]:
        gemini = make_harness("gemini", tmp_path / "gemini", stub, home)
        return {"harness": "gemini", "argv": gemini.tui_argv(), "env": gemini.env()}

    return make


@pytest.mark.parametrize(
    ("harness", "tools"), [("codex", "mcp__openbus__"), ("gemini", "mcp_openbus_")]
)
def test_codex_or_gemini_cli_as_control_gets_the_charter_waits_for_the_request_and_replies(
    tmp_path: Path,
    stub: StubModel,
    tmux: TmuxServer,
    request: pytest.FixtureRequest,
    harness: str,
    tools: str,
) -> None:
    more: dict[str, dict[str, Any]] = {}
    if harness == "gemini":  # a settings file it reads: under root's directories only
        more["daemon"] = {"state_dir": str(request.getfixturevalue("state_dir"))}
        boss = gemini_boss(tmp_path, stub)
    else:
        boss = codex_boss(tmp_path, stub)
    text = f"{harness} as control: nothing to hand off yet."
    turn = stub.script(
        call_tool(f"{tools}wait_for_changes", {"timeout_seconds": 50}),
        call_tool(f"{tools}reply", {"thread": "r1", "text": text}),
        reply("replied: ending my turn"),
        match=MARK,
    )
    with control_fleet(tmp_path, stub, tmux, boss, more) as fleet:
        asked = cli_json(fleet.daemon, "ask", "what should we work on next?", "--wait", "50")
        entry = next(p for p in cli_json(fleet.daemon, "directory")["panes"] if p.get("control"))
        assert entry["session"] == "control" and entry["harness"] == harness
        turn.wait_finished(timeout=60)
        # its transcript is followed for the re-seed: the context its requests carried
        wait_until(
            lambda: (fleet.health()["control"]["context_tokens"] or 0) > 0,
            timeout=30,
            what="control's context read from its transcript",
        )
    first = stub.turns()[0]
    assert first.api == {"codex": "openai", "gemini": "gemini"}[harness]
    assert MARK in json.dumps(first.body)  # the charter is its first prompt
    results = [r for t in stub.turns() for r in t.tool_results]
    assert "what should we work on next?" in results[0]  # its wait answered with the request
    assert asked["request"]["id"] == "r1" and asked["sent_to"] is None  # to control
    assert asked["request"]["state"] == "answered"
    assert asked["later"][-1]["kind"] == "reply" and asked["later"][-1]["text"] == text
