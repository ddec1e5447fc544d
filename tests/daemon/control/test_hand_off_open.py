"""Control hands a request off into a new window: ``hand_off`` with ``open`` (a configured
launcher) asks for the window on open_window's card; once the human approves it the window
opens and the brief arrives when its agent is first idle, an ``input`` entry naming the new
pane in the request's thread; a declined card types nothing and the thread says so; ``to``
and ``open`` are exactly one of the two; once control may open panes the window opens at
once; a card still waiting when the daemon restarts hands off once approved. Driven as the
control session itself (over MCP with control's own token) against the real daemon, the new
windows running the fake agent TUI."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.mcp.conftest import Fleet, read_token
from tests.daemon.mcp.test_endpoint import mcp_session
from tests.daemon.messaging.conftest import FAKE_AGENT
from tests.support.daemon import RunningDaemon, restart_daemon, running_daemon
from tests.support.mcp_results import tool_data
from tests.support.tmux import tmux_server
from tests.support.wait import wait_until

pytestmark = pytest.mark.timeout(180)

STAMP = "from control \u00b7 origin"


def cli_json(daemon: RunningDaemon, *args: str) -> Any:
    return json.loads(daemon.cli(*args, "--json", check=True, timeout=90).stdout)


def panes(daemon: RunningDaemon) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = cli_json(daemon, "directory")["panes"]
    return found


def fake_tui(root: Path, name: str) -> tuple[list[str], Path]:
    """The fake agent TUI (seen as Claude Code) and the folder it records its prompts in."""
    script = root / name / "bin" / "claude"
    script.parent.mkdir(parents=True)
    shutil.copy(FAKE_AGENT, script)
    received = root / name / "control"
    received.mkdir()
    return [sys.executable, str(script), str(received)], received


def hand_offs(box: Box, request: str) -> list[dict[str, Any]]:
    """The audit records of control's hand_off calls for ``request``."""
    return [
        r
        for r in box.audit()
        if r["action"] == "control.hand_off" and r["details"].get("request") == request
    ]


@dataclass
class Box:
    daemon: RunningDaemon
    token: str  # the control session's own
    received: Path  # what the new windows' agents were given
    folder: Path  # where control asks for them

    def call(self, tool: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """One of control's tools, called as control: whether it failed, and its answer."""
        fleet = Fleet(self.daemon, None, Path("/"))  # type: ignore[arg-type]

        async def go() -> tuple[bool, dict[str, Any]]:
            async with mcp_session(fleet, self.token) as session:
                await session.initialize()
                result = await session.call_tool(tool, args)
                data = tool_data(result)  # an error is the one error shape; else framed
                return result.is_error, data if result.is_error else data["result"]

        return asyncio.run(go())

    def tools(self) -> set[str]:
        """The tools control is offered (listing them is what a starting harness does)."""
        fleet = Fleet(self.daemon, None, Path("/"))  # type: ignore[arg-type]

        async def go() -> set[str]:
            async with mcp_session(fleet, self.token) as session:
                await session.initialize()
                return {t.name for t in (await session.list_tools()).tools}

        return asyncio.run(go())

    def typed(self) -> list[str]:
        path = self.received / "received"
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line) for line in lines]

    def ask(self, text: str) -> str:
        asked = cli_json(self.daemon, "ask", text)
        assert asked["sent_to"] is None  # control's to work out
        return str(asked["request"]["id"])

    def thread(self, request: str) -> dict[str, Any]:
        found: dict[str, Any] = cli_json(self.daemon, "thread", request)
        return found

    def audit(self) -> list[dict[str, Any]]:
        return self.daemon.audit()

    def brief_arrived(self, request: str, brief: str) -> dict[str, Any]:
        """Once the brief is typed in a new pane under control's stamp naming the request:
        the request handed off, and the ``input`` entry in its thread."""
        wait_until(lambda: brief in "".join(self.typed()), timeout=60, what="the brief")
        assert f"{STAMP} {request}" in self.typed()[-1]

        def handed() -> Any:
            got = self.thread(request)
            return got if got["request"]["state"] == "handed_off" else None

        thread = wait_until(handed, timeout=10, what="the request handed off")
        [entry] = [e for e in thread["entries"] if e["kind"] == "input"]
        found: dict[str, Any] = entry
        return found

    def hand_off_open(self, request: str, brief: str) -> dict[str, Any]:
        error, asked = self.call(
            "hand_off",
            {
                "thread": request,
                "open": {"launcher": "tui", "cwd": str(self.folder), "title": "release notes"},
                "brief": brief,
            },
        )
        assert not error, asked
        assert asked["opened"] is False
        return asked


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    root = tmp_path_factory.mktemp("handoff")
    folder = root / "docs-site"
    folder.mkdir()
    boss, _ = fake_tui(root, "boss")
    worker, received = fake_tui(root, "worker")
    with tmux_server(root / "tmux") as tmux:
        extra: dict[str, dict[str, Any]] = {
            "tmux": {"socket": str(tmux.socket)},
            "history": {"claude_config_dirs": [], "codex_homes": []},
            "launchers.boss": {"harness": "claude", "argv": boss},
            "launchers.tui": {"harness": "claude", "argv": worker},
            "control": {"launcher": "boss"},
        }
        (root / "d").mkdir()
        with running_daemon(root / "d", extra) as daemon:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                # the start answers once control's charter is typed, after it listed its tools
                starting = pool.submit(cli_json, daemon, "control", "start")
                control = wait_until(
                    lambda: next((p for p in panes(daemon) if p["session"] == "control"), None),
                    timeout=30,
                    what="the control pane",
                )
                token = wait_until(
                    lambda: read_token(control["pid"]), timeout=10, what="control's token"
                )
                made = Box(daemon, token, received, folder)
                assert {"hand_off", "open_window"} <= made.tools()
                assert starting.result(timeout=60)["started"] is True
            try:
                yield made
            finally:
                if made.daemon is not daemon:  # restarted by a test
                    made.daemon.stop()


def test_an_approved_window_gets_the_brief_at_its_first_idle_and_the_thread_names_it(
    box: Box,
) -> None:
    request = box.ask("someone should write the release notes")
    brief = "Write the release notes draft for the parser change (the human asked)."
    asked = box.hand_off_open(request, brief)
    [card] = [c for c in cli_json(box.daemon, "cards")["cards"] if c["id"] == asked["card"]]
    assert card["kind"] == "control_window"
    assert f"open a tui window in {box.folder}" in card["summary"]
    assert f"hand it request {request}: {brief}" in card["summary"]
    waiting = box.thread(request)
    assert waiting["request"]["state"] == "delegated"  # not handed off while the card waits
    assert asked["card"] in waiting["entries"][-1]["text"]

    cli_json(box.daemon, "approve", asked["card"])
    entry = box.brief_arrived(request, brief)
    [opened] = [p for p in panes(box.daemon) if p["pane"] == entry["pane"]]
    assert opened["cwd"] == str(box.folder) and opened["incarnation"] == entry["incarnation"]
    assert entry["text"] == brief
    message_id = entry["details"]["message_id"]
    assert message_id.startswith(f"handoff-{request}-")

    # the call is one record naming the card; the delivery is the message's own records
    [call] = hand_offs(box, request)
    assert call["outcome"] == "card" and call["details"]["card"] == asked["card"]

    def delivered() -> Any:
        found = [r for r in box.audit() if r.get("message_id") == message_id]
        return found if "delivered" in {r["outcome"] for r in found} else None

    message = wait_until(delivered, timeout=15, what="the brief's delivery record")
    assert {(r["actor"], r["action"]) for r in message} == {("control", "message.send")}


def test_a_declined_window_types_nothing_and_the_thread_says_declined(box: Box) -> None:
    before = {p["pane"] for p in panes(box.daemon)}
    typed = len(box.typed())
    request = box.ask("and someone should tidy the changelog")
    asked = box.hand_off_open(request, "Tidy the changelog wording.")
    cli_json(box.daemon, "decline", asked["card"])

    def declined() -> Any:
        got = box.thread(request)
        notes = [e for e in got["entries"] if "declined" in e["text"]]
        return got if notes else None

    thread = wait_until(declined, timeout=15, what="the declined note in the thread")
    assert f"card {asked['card']}" in thread["entries"][-1]["text"]
    assert "nothing was sent" in thread["entries"][-1]["text"]
    assert thread["request"]["state"] == "delegated"  # still control's, not handed off
    assert not [e for e in thread["entries"] if e["kind"] == "input"]
    assert {p["pane"] for p in panes(box.daemon)} == before  # no window opened
    assert len(box.typed()) == typed and "changelog" not in " ".join(box.typed())


def test_hand_off_takes_exactly_one_of_to_and_open(box: Box) -> None:
    request = box.ask("who could look at the flaky build?")
    window = {"launcher": "tui"}
    error, both = box.call(
        "hand_off", {"thread": request, "to": "%0", "open": window, "brief": "Look at it."}
    )
    assert error and both["error"] == "bad_request" and both["field"] == "open"
    assert "not both" in both["message"]
    error, neither = box.call("hand_off", {"thread": request, "brief": "Look at it."})
    assert error and neither["error"] == "bad_request" and neither["field"] == "to"
    assert "open" in neither["message"]
    error, unknown = box.call(
        "hand_off",
        {"thread": request, "open": {"launcher": "rm -rf /"}, "brief": "Look at it."},
    )
    assert error and unknown["field"] == "open.launcher"
    thread = box.thread(request)
    assert thread["request"]["state"] == "delegated"
    assert [e["kind"] for e in thread["entries"]] == ["route"]  # nothing asked, nothing sent


def test_once_control_may_open_panes_the_window_opens_at_once_and_gets_the_brief(
    box: Box,
) -> None:
    request = box.ask("someone should proofread the install guide")
    brief = "Proofread the install guide (the human asked)."
    cli_json(box.daemon, "control", "allow-panes")
    try:
        error, opened = box.call(
            "hand_off",
            {
                "thread": request,
                "open": {"launcher": "tui", "cwd": str(box.folder)},
                "brief": brief,
            },
        )
    finally:
        cli_json(box.daemon, "control", "allow-panes", "--off")
    assert not error, opened
    assert opened["opened"] is True and "card" not in opened
    entry = box.brief_arrived(request, brief)
    assert entry["pane"] == opened["pane"]
    [call] = hand_offs(box, request)
    assert "control may open panes" in call["details"]["allowed_by"]


def test_a_hand_off_card_outlives_a_daemon_restart(box: Box) -> None:
    request = box.ask("someone should update the screenshots")
    brief = "Update the screenshots in the guide (the human asked)."
    asked = box.hand_off_open(request, brief)
    box.daemon = restart_daemon(box.daemon)  # the card and its hand-off are in the state
    cli_json(box.daemon, "approve", asked["card"])
    entry = box.brief_arrived(request, brief)
    assert entry["details"]["card"] == asked["card"]
