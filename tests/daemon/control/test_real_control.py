"""Real Claude Code as the control session, against the stub model, with the real daemon:
an ambiguous ``openbus ask`` while no control runs starts it (first use: tmux session
``control`` with the charter as its first prompt; ``openbus control start`` then says it
runs), and control's first ``wait_for_changes`` answers with the request; its scripted turn
calls ``list_panes``, ``hand_off`` (the target gets the brief under a stamp naming control and
the request) and ``reply`` (in ``openbus ask --json``), presses ``1`` on another agent's
permission prompt (a card: nothing is typed until the human approves it), then waits once
more and ends its turn. A request naming one pane's folder goes straight there, and
control's model gets no request for it; while the directory stays unchanged, control's
model gets none at all. An ordinary Collaborate agent is never offered the act tools.
Re-seed: once a turn's usage in control's own transcript passes ``reseed_tokens``, openbus
closes it and starts a fresh control whose first prompt is the charter with the fleet as it is
now; the restart is a ``control.reseed`` record and a line in control's thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon.control.charter import MARK
from tests.daemon.mcp.conftest import Fleet, read_token
from tests.daemon.mcp.test_endpoint import mcp_session
from tests.daemon.messaging.conftest import FAKE_AGENT
from tests.support.daemon import RunningDaemon, running_daemon
from tests.support.harnesses import make_claude
from tests.support.stub_model import Script, StubModel, call_tool, reply
from tests.support.tmux import TmuxServer
from tests.support.wait import wait_until

pytestmark = [pytest.mark.harness, pytest.mark.timeout(240)]

PROMPT = Path(__file__).parent / "permission_prompt.py"
CAPTURED = Path(__file__).parents[1] / "screens" / "captured" / "claude-permission-menu.txt"
IDLE_WAIT = 2  # control's last wait_for_changes before it ends its turn (seconds)
IDLE_LOOKS = 5  # the daemon's looks at an idle control the test sees (one a second)


def cli_json(daemon: RunningDaemon, *args: str) -> Any:
    return json.loads(daemon.cli(*args, "--json", check=True, timeout=90).stdout)


def pane_entry(daemon: RunningDaemon, pane: str) -> Any:
    for entry in cli_json(daemon, "directory")["panes"]:
        if entry["pane"] == pane:
            return entry
    return None


@dataclass
class ControlFleet:
    """A real daemon whose control launcher runs the real Claude Code against the stub, and
    one worker pane (the fake TUI, seen as Claude Code) in ``alpha-svc``, idle."""

    daemon: RunningDaemon
    worker: dict[str, Any]
    received: Path

    def typed(self) -> str:
        path = self.received / "received"
        lines = path.read_text().splitlines() if path.exists() else []
        return "\n".join(json.loads(line) for line in lines)

    def audit(self) -> list[dict[str, Any]]:
        return self.daemon.audit()

    def health(self) -> dict[str, Any]:
        with self.daemon.human() as client:
            body: dict[str, Any] = client.get("/healthz").json()
        return body

    def until_quiet(self, looks: int) -> dict[str, Any]:
        """Control's health once its feed revision has held for ``looks`` of the daemon's
        looks at control (one a second): the directory unchanged that long."""
        since: dict[str, Any] = {}

        def held() -> dict[str, Any] | None:
            now = self.health()["control"]
            if since.get("feed_revision") != now["feed_revision"]:
                since.clear()
                since.update(now)
            return since if now["looks"] >= since["looks"] + looks else None

        found: dict[str, Any] = wait_until(held, timeout=90, what=f"{looks} quiet looks")
        return found


Boss = Callable[[Path], dict[str, Any]]  # control's launcher, made for its home folder


@contextmanager
def control_fleet(
    tmp_path: Path,
    stub: StubModel,
    tmux: TmuxServer,
    boss: Boss | None = None,
    more: dict[str, dict[str, Any]] | None = None,
) -> Iterator[ControlFleet]:
    """``boss`` makes control's launcher (real Claude Code by default); ``more`` adds daemon
    settings."""
    home = tmp_path / "control-home"
    alpha = tmp_path / "alpha-svc"
    for folder in (home, alpha):
        folder.mkdir()
        subprocess.run(["git", "init", "-q", str(folder)], check=True)
    if boss is None:
        claude = make_claude(tmp_path / "claude", stub, home)
        launcher = {"harness": "claude", "argv": [str(claude.binary)], "env": claude.env()}
    else:
        launcher = boss(home)
    script = tmp_path / "agent" / "bin" / "claude"  # the fake TUI, seen as Claude Code
    script.parent.mkdir(parents=True)
    shutil.copy(FAKE_AGENT, script)
    received = tmp_path / "agent" / "control"
    received.mkdir()
    extra: dict[str, dict[str, Any]] = {
        "tmux": {"socket": str(tmux.socket)},
        "history": {"claude_config_dirs": [], "codex_homes": []},
        "launchers.boss": {**launcher, "cwd": str(home)},
        "launchers.tui": {
            "harness": "claude",
            "argv": [sys.executable, str(script), str(received)],
        },
        "control": {"launcher": "boss"},
        **(more or {}),
    }
    (tmp_path / "d").mkdir()
    with running_daemon(tmp_path / "d", extra) as daemon:
        worker = cli_json(daemon, "launch", "tui", "--cwd", str(alpha), "--preset", "collaborate")
        wait_until(
            lambda: (e := pane_entry(daemon, worker["pane"])) and e["state"] == "idle",
            timeout=30,
            what="the worker idle",
        )
        yield ControlFleet(daemon, worker, received)


def model_requests(stub: StubModel) -> int:
    """Requests to the model (turns and title side calls), not the harness's other calls."""
    return sum(1 for r in list(stub.requests) if r.kind in ("turn", "title"))


def control_turn(
    stub: StubModel, fleet: ControlFleet, brief: str, press: dict[str, Any] | None = None
) -> Script:
    """Control's scripted turn for request r1: wait_for_changes (it answers with the request),
    list_panes, hand_off to the worker, reply (and ``press_key`` with ``press``, if given);
    then wait_for_changes again, which answers with nothing after its timeout, and the turn
    ends (the charter's way to go idle)."""
    worker = fleet.worker
    pressing = [call_tool("mcp__openbus__press_key", press)] if press else []
    return stub.script(
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
        call_tool("mcp__openbus__reply", {"thread": "r1", "text": f"Handed to {worker['pane']}."}),
        *pressing,
        call_tool("mcp__openbus__wait_for_changes", {"timeout_seconds": IDLE_WAIT}),
        reply("nothing waits: ending my turn"),
        match=MARK,
    )


def test_real_claude_code_as_control_hands_off_ambiguous_requests_and_replies(
    tmp_path: Path, stub: StubModel, tmux: TmuxServer
) -> None:
    with control_fleet(tmp_path, stub, tmux) as fleet:
        daemon, worker = fleet.daemon, fleet.worker
        # another agent's permission prompt, which control answers with a key
        script = tmp_path / "prompting" / "bin" / "claude"
        script.parent.mkdir(parents=True)
        shutil.copy(PROMPT, script)
        keys = tmp_path / "prompting" / "keys"
        asking_pane = tmux.new_window([sys.executable, str(script), str(CAPTURED), str(keys)])
        menu = wait_until(
            lambda: (e := pane_entry(daemon, asking_pane)) and e["state"] == "menu" and e,
            timeout=30,
            what="the permission prompt read as a menu",
        )
        press = {
            "pane": asking_pane,
            "incarnation": menu["incarnation"],
            "revision": menu["revision"],
            "key": "1",
        }
        brief = "Write the release notes draft for the parser change (the human asked)."
        turn = control_turn(stub, fleet, brief, press)
        # no control runs: the request starts it (first use), and its first wait sees it
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            asking = pool.submit(
                cli_json, daemon, "ask", "what should we work on next?", "--wait", "50"
            )
            entry = wait_until(
                lambda: next(
                    (p for p in cli_json(daemon, "directory")["panes"] if p.get("control")), None
                ),
                timeout=60,
                what="the control pane, started on first use, with its indicator",
            )
            assert entry["session"] == "control"
            again = cli_json(daemon, "control", "start")
            assert again == {**again, "started": False, "pane": entry["pane"]}  # one control
            allowed = cli_json(daemon, "control", "allow-panes")
            assert allowed == {"control_may_open_panes": True}
            taken = cli_json(daemon, "control", "allow-panes", "--off")
            assert taken == {"control_may_open_panes": False}
            asked = asking.result(timeout=90)
        # its first model request is its charter (waited for: never an index into requests
        # that may not have come yet)
        first_turn = wait_until(
            lambda: next(iter(stub.turns()), None), timeout=60, what="control's first request"
        )
        assert MARK in json.dumps(first_turn.body)
        # the charter also came at MCP initialize, after the common rules (Claude Code shows
        # a server's instructions to the model as that server's section)
        given = json.dumps(f"Do not work around it; tell the user.\n\n{MARK}")[1:-1]
        assert any(given in json.dumps(t.body) for t in stub.turns())
        assert asked["request"]["id"] == "r1"
        assert asked["sent_to"] is None  # to control
        assert asked["request"]["state"] == "answered"
        replies = [e for e in asked["later"] if e["kind"] == "reply"]
        assert [e["text"] for e in replies] == [f"Handed to {worker['pane']}."]
        turn.wait_finished(timeout=60)
        wait_until(lambda: brief in fleet.typed(), timeout=30, what="the brief typed")
        assert "from control \u00b7 origin r1" in fleet.typed()
        # its key for the other agent's menu is a card; nothing typed until it is approved
        with daemon.human() as client:
            [card] = client.get("/api/cards").json()["cards"]
            assert "Do you want to proceed?" in json.dumps(card)
            assert not keys.exists()
            decided = client.post(f"/api/cards/{card['id']}", json={"decision": "approve"})
            assert decided.is_success, decided.text
        wait_until(lambda: keys.exists() and keys.read_bytes() == b"1", timeout=30, what="the key")
        offered = stub.turns()[-1].body.get("tools", [])  # once its MCP server is connected
        names = {t.get("name") for t in offered}
        assert {"mcp__openbus__hand_off", "mcp__openbus__press_key"} <= names

        turns = model_requests(stub)
        direct = cli_json(daemon, "ask", "in alpha-svc, add a test for the tokenizer")
        assert direct["sent_to"] == worker["pane"]
        wait_until(lambda: "tokenizer" in fleet.typed(), timeout=30, what="the direct send")
        assert model_requests(stub) == turns  # control's model got no request for it

        # idle: control ended its turn; once the worker has settled after the direct send,
        # the directory stays unchanged while the daemon looks at control's transcript once
        # a tick, and nothing reaches control's model
        quiet = fleet.until_quiet(IDLE_LOOKS)
        after = fleet.health()["control"]
        assert after["looks"] >= quiet["looks"] + IDLE_LOOKS
        assert after["nudges"] == quiet["nudges"] == 0
        assert model_requests(stub) == turns  # no model request from control while idle

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


def test_real_claude_code_as_control_is_reseeded_once_its_transcript_passes_the_limit(
    tmp_path: Path, stub: StubModel, tmux: TmuxServer
) -> None:
    limit = 5_000
    settings: dict[str, dict[str, Any]] = {"control": {"launcher": "boss", "reseed_tokens": limit}}
    with control_fleet(tmp_path, stub, tmux, more=settings) as fleet:
        daemon, worker = fleet.daemon, fleet.worker
        seeded = stub.script(reply("standing by"), match=MARK)  # a small first request
        # its next turn reports a context past the limit, as Claude Code then records it in
        # its transcript (stub scripts report the input tokens a test gives them)
        grown = stub.script(reply("noted"), match="a long task", input_tokens=limit + 1_000)
        fresh = stub.script(reply("fresh, standing by"), match=MARK)
        first = cli_json(daemon, "control", "start")
        seeded.wait_finished(timeout=60)
        tmux.keys(first["pane"], "-l", "a long task")
        tmux.keys(first["pane"], "Enter")
        grown.wait_finished(timeout=60)

        [record] = wait_until(
            lambda: [r for r in fleet.audit() if r["action"] == "control.reseed"],
            timeout=60,
            what="the re-seed record",
        )
        assert f"{limit + 1_000} tokens" in record["details"]["reason"]
        with daemon.human() as client:
            thread = client.get("/api/threads", params={"thread": "control"}).json()
        assert any("re-seeded" in e["text"] for e in thread["entries"])

        # a fresh Claude Code in session control, seeded with the charter and the fleet now
        fresh.wait_finished(timeout=90)
        assert worker["pane"] in fresh.prompt and worker["incarnation"] in fresh.prompt
        panes = cli_json(daemon, "directory")["panes"]
        [now] = [p for p in panes if p.get("control")]
        assert now["session"] == "control" and now["pane"] != first["pane"]
