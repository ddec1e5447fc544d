"""Requests from a front end: the fast dispatcher types a plain request into the one matching
agent pane, with an origin link back to the request; anything else becomes control's, which
is woken by ``wait_for_changes``, hands off with provenance and replies in the thread; key
presses on a shell are cards; act actions are control's alone."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon.control.mcp_tools import CONTROL_TOOLS
from openbus.daemon.core.actions import CONTROL_SCOPES
from openbus.daemon.core.actors import CONTROL
from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.core.threads import RequestState
from openbus.daemon.mcp.tools import ToolRegistry
from openbus.kernel.errors import BadRequest, Conflict, Forbidden, NotFound
from openbus.kernel.scopes import Preset
from tests.daemon.messaging.conftest import Agent, Scenario, World

pytestmark = pytest.mark.timeout(120)

Run = Callable[[Scenario], None]
PROMPT = Path(__file__).parent / "permission_prompt.py"
CAPTURED = Path(__file__).parents[1] / "screens" / "captured" / "claude-permission-menu.txt"


async def agent_in(world: World, name: str, folder: str) -> Agent:
    """A fake Claude Code pane working in ``<tmp>/<folder>``."""
    cwd = world.root / folder
    cwd.mkdir(exist_ok=True)
    argv, control = world.fake_argv(name)
    pane = world.server.new_window(argv, cwd=cwd)
    entry = await world.until(lambda: world._idle_entry(pane), f"{name} idle")
    return Agent(name, pane, entry.incarnation, None, None, control)


async def ask(world: World, text: str) -> Any:
    return await world.gate.run(world.human, "control.ask", {"text": text})


def typed(agent: Agent) -> str:
    return "\n".join(agent.received())


def test_a_request_naming_one_panes_folder_is_typed_there_with_its_origin(run_world: Run) -> None:
    async def scenario(world: World) -> None:
        alpha = await agent_in(world, "alpha", "alpha-svc")
        await agent_in(world, "beta", "beta-svc")
        answer = await ask(world, "in alpha-svc, add a test for the parser")
        request = answer["request"]["id"]
        assert answer["sent_to"] == alpha.pane
        assert answer["route"]["route"] == "direct"
        assert "cwd" in answer["route"]["reason"]
        await world.until(lambda: "add a test for the parser" in typed(alpha), "typed")
        assert f"origin {request}" in typed(alpha)
        detail = await world.gate.run(world.human, "directory.pane", {"pane": alpha.pane})
        [origin] = detail["origins"]
        assert origin["request"]["id"] == request
        assert origin["request"]["text"] == "in alpha-svc, add a test for the parser"
        [record] = [r for r in world.audit() if r["action"] == "control.ask"]
        assert '"route":"direct"' in record["details"].replace(" ", "")
        thread = await world.gate.run(world.human, "threads.get", {"request": request})
        assert [e["kind"] for e in thread["entries"]] == ["route", "input"]

    run_world(scenario)


def test_an_ambiguous_request_wakes_control_which_hands_off_and_replies(run_world: Run) -> None:
    async def scenario(world: World) -> None:
        one = await agent_in(world, "one", "shared-lib")
        await agent_in(world, "two", "shared-lib")
        start = (await world.gate.run(CONTROL, "directory.wait", {}))["revision"]
        waiting = asyncio.ensure_future(
            world.gate.run(CONTROL, "directory.wait", {"since": start, "timeout_seconds": 20})
        )
        answer = await ask(world, "in shared-lib, tidy the README wording")
        request = answer["request"]["id"]
        assert answer["sent_to"] is None
        assert "ambiguous" in answer["route"]["reason"]
        woke = await asyncio.wait_for(waiting, 20)
        threads = [c for c in woke["changes"] if c["kind"] == "thread"]
        assert threads[0]["entry"]["id"] == request
        assert [r["id"] for r in woke["open_requests"]] == [request]
        handed = await world.gate.run(
            CONTROL,
            "control.hand_off",
            {
                "thread": request,
                "to": one.pane,
                "incarnation": one.incarnation,
                "brief": "Tidy the README wording in shared-lib (the human asked).",
            },
        )
        assert handed["request_state"] == "handed_off"
        await world.until(lambda: "Tidy the README wording" in typed(one), "the brief typed")
        assert f"from control \u00b7 origin {request}" in typed(one)
        await world.gate.run(
            CONTROL, "control.reply", {"thread": request, "text": f"Handed to {one.pane}."}
        )
        thread = await world.gate.run(world.human, "threads.get", {"request": request})
        assert thread["request"]["state"] == "answered"
        assert [e["kind"] for e in thread["entries"]][-1] == "reply"
        # an ordinary reader never sees requests on the feed
        reader = await world.agent("reader", Preset.OBSERVE)
        assert reader.actor is not None
        seen = await world.gate.run(reader.actor, "directory.wait", {"since": start})
        assert all(c["kind"] != "thread" for c in seen["changes"])

    run_world(scenario)


def test_a_waiting_reply_in_the_thread_ends_the_requesters_wait(run_world: Run) -> None:
    async def scenario(world: World) -> None:
        answer = await ask(world, "what is everyone doing?")
        request = answer["request"]["id"]
        after = max(int(e["id"][1:]) for e in answer["entries"])
        waiting = asyncio.ensure_future(
            world.gate.run(
                world.human,
                "threads.get",
                {"request": request, "after": after, "wait_seconds": 20},
            )
        )
        await world.gate.run(CONTROL, "control.reply", {"thread": request, "text": "All idle."})
        got = await asyncio.wait_for(waiting, 20)
        assert got["entries"][-1]["text"] == "All idle."

    run_world(scenario)


def test_a_direct_send_to_a_pane_recycled_before_delivery_falls_back_to_control(
    run_world: Run,
) -> None:
    async def scenario(world: World) -> None:
        alpha = await agent_in(world, "alpha", "alpha-svc")
        await world.hold(alpha)  # busy: the message waits for its idle
        answer = await ask(world, "in alpha-svc, add a docstring")
        request = answer["request"]["id"]
        assert answer["sent_to"] == alpha.pane
        await world.respawn(alpha)

        store = world.daemon.control.threads
        seq = int(request[1:])
        await world.until(
            lambda: store.get(seq).state == RequestState.DELEGATED, "the fallback to control"
        )
        got = await world.gate.run(world.human, "threads.get", {"request": request})
        assert got["request"]["state"] == "delegated"
        assert "control works it out" in got["entries"][-1]["text"]

    run_world(scenario)


def test_a_direct_send_to_a_pane_whose_screen_changed_after_the_decision_falls_back_to_control(
    run_world: Run,
) -> None:
    async def scenario(world: World) -> None:
        alpha = await agent_in(world, "alpha", "alpha-svc")
        decided = world.directory.entry(alpha.pane).revision
        with pytest.raises(Conflict) as stale:
            await world.gate.run(
                CONTROL,
                "message.send",
                {
                    "target": alpha.pane,
                    "incarnation": alpha.incarnation,
                    "revision": decided - 1,
                    "text": "hello",
                    "message_id": "m-stale",
                },
            )
        assert stale.value.field == "revision"

        # the human types a draft into alpha between the dispatcher's decision and its send
        action, send = world.gate._registry["message.send"]

        async def draft_first(call: Any) -> Any:
            world.server.keys(alpha.pane, "-l", "my own draft")
            await world.until(
                lambda: world.directory.entry(alpha.pane).revision != decided, "the draft seen"
            )
            return await send(call)

        world.gate._registry["message.send"] = (action, draft_first)
        answer = await ask(world, "in alpha-svc, add a docstring")
        assert answer["route"]["route"] == "direct"
        assert answer["route"]["revision"] == decided
        assert answer["sent_to"] is None
        assert answer["request"]["state"] == "delegated"
        note = answer["entries"][-1]["text"]
        assert "screen changed" in note and "control works it out" in note
        assert "add a docstring" not in typed(alpha)

    run_world(scenario)


def test_a_key_for_a_shell_pane_is_a_card_and_typed_only_once_approved(run_world: Run) -> None:
    async def scenario(world: World) -> None:
        pane = world.server.new_window(["sh"])

        def shell() -> Any:
            found = world.directory.entries()
            return next((e for e in found if e.pane_id == pane and e.harness == "shell"), None)

        entry = await world.until(shell, "the shell pane in the directory")
        params = {"pane": pane, "incarnation": entry.incarnation, "key": "x"}
        with pytest.raises(Conflict):
            await world.gate.run(
                CONTROL, "control.press_key", {**params, "revision": entry.revision + 5}
            )
        with pytest.raises(Conflict):
            await world.gate.run(
                CONTROL,
                "control.press_key",
                {**params, "revision": entry.revision, "incarnation": "inc_other"},
            )
        asked = await world.gate.run(
            CONTROL, "control.press_key", {**params, "revision": entry.revision}
        )
        assert asked["pressed"] is False
        [card] = [c for c in await world.cards() if c["id"] == asked["card"]]
        assert "shell pane" in card["summary"]

        def prompt_line() -> str:
            lines = [line for line in world.server.capture(pane).splitlines() if line.strip()]
            return lines[-1] if lines else ""

        assert not prompt_line().endswith("x")  # nothing typed while the card waits
        await world.decide(asked["card"], "approve")
        await world.until(lambda: prompt_line().endswith("x"), "the key typed once approved")

    run_world(scenario)


def test_act_actions_are_controls_alone(run_world: Run) -> None:
    async def scenario(world: World) -> None:
        agent = await world.agent("peer", Preset.COLLABORATE)
        assert agent.actor is not None
        answer = await ask(world, "anything at all for control")
        for action, params in (
            ("control.reply", {"thread": answer["request"]["id"], "text": "hi"}),
            ("control.press_key", {"pane": agent.pane}),
            ("control.open_window", {"launcher": "claude"}),
            ("control.resume_session", {"harness": "claude", "session_id": "s1"}),
            ("control.hand_off", {"thread": answer["request"]["id"]}),
        ):
            with pytest.raises(Forbidden):
                await world.gate.run(agent.actor, action, params)
        registry = ToolRegistry(CONTROL_TOOLS)
        peer = {t.name for t in registry.listed(world.gate, agent.actor, Preset.COLLABORATE.scopes)}
        assert peer == {"wait_for_changes"}
        control = {t.name for t in registry.listed(world.gate, CONTROL, CONTROL_SCOPES)}
        assert control == {t.name for t in CONTROL_TOOLS}

    run_world(scenario)


def test_a_request_for_a_control_that_ended_its_turn_is_typed_into_its_pane(
    run_world: Run,
) -> None:
    async def scenario(world: World) -> None:
        boss = await agent_in(world, "boss", "control-home")
        grants = world.services.grants
        entry = world.directory.entry(boss.pane)
        principal, _token, mint = grants.mint(
            harness="claude",
            owner=world.user,
            preset=Preset.COLLABORATE,
            launcher=None,
            role="control",
        )
        attach = grants.attach_pane(
            principal, boss.pane, entry.process.pid, str(entry.process.start), entry.incarnation
        )
        world.gate.record(
            AuditDraft(actor="system", action="test.grant", outcome="ok"), [mint, attach]
        )
        # blocked in wait_for_changes: the feed wakes it, nothing is typed
        waiting = asyncio.ensure_future(
            world.gate.run(CONTROL, "directory.wait", {"timeout_seconds": 20})
        )
        await world.until(lambda: world.daemon.control._control_waiting == 1, "control waits")
        first = (await ask(world, "what is everyone doing?"))["request"]["id"]
        woke = await asyncio.wait_for(waiting, 20)
        assert [c["entry"]["id"] for c in woke["changes"] if c["kind"] == "thread"] == [first]
        # its turn ended: the next request is typed into its pane, with the request named
        second = (await ask(world, "and what is left to do?"))["request"]["id"]
        await world.until(lambda: f"Request {second} is waiting" in typed(boss), "the nudge")
        assert f"Request {first} is waiting" not in typed(boss)
        assert f"origin {second}" in typed(boss)

    run_world(scenario)


def test_a_key_answering_another_agents_permission_prompt_waits_for_the_human(
    run_world: Run,
) -> None:
    async def scenario(world: World) -> None:
        folder = world.root / "prompting" / "bin"
        folder.mkdir(parents=True)
        script = folder / "claude"
        shutil.copy(PROMPT, script)
        keys = world.root / "prompting" / "keys"
        pane = world.server.new_window([sys.executable, str(script), str(CAPTURED), str(keys)])

        def menu() -> Any:
            found = world.directory.entries()
            return next((e for e in found if e.pane_id == pane and e.state == "menu"), None)

        entry = await world.until(menu, "the permission prompt read as a menu")
        asked = await world.gate.run(
            CONTROL,
            "control.press_key",
            {
                "pane": pane,
                "incarnation": entry.incarnation,
                "revision": entry.revision,
                "key": "1",
            },
        )
        assert asked["pressed"] is False
        assert "Do you want to proceed?" in asked["question"]
        [card] = [c for c in await world.cards() if c["id"] == asked["card"]]
        assert "another agent's menu" in card["summary"]
        assert not keys.exists()  # nothing typed while the card waits
        await world.decide(asked["card"], "approve")
        await world.until(lambda: keys.exists() and keys.read_bytes() == b"1", "the key typed")

    run_world(scenario)


def test_opening_a_window_is_a_card_for_configured_launchers_only(run_world: Run) -> None:
    async def scenario(world: World) -> None:
        with pytest.raises(BadRequest):
            await world.gate.run(CONTROL, "control.open_window", {"launcher": "rm -rf /"})
        asked = await world.gate.run(
            CONTROL, "control.open_window", {"launcher": "shell", "title": "docs"}
        )
        assert asked["opened"] is False
        [card] = [c for c in await world.cards() if c["id"] == asked["card"]]
        assert card["summary"] == "control wants to open a shell window for 'docs'"

    run_world(scenario)


def test_once_control_may_open_panes_a_window_opens_without_a_card(run_world: Run) -> None:
    async def scenario(world: World) -> None:
        before = {e.pane_id for e in world.directory.entries()}
        allowed = await world.gate.run(world.human, "control.allow_panes", {})
        assert allowed == {"control_may_open_panes": True}
        opened = await world.gate.run(CONTROL, "control.open_window", {"launcher": "shell"})
        assert opened["opened"] is True
        await world.until(
            lambda: {e.pane_id for e in world.directory.entries()} - before, "the new window"
        )
        [record] = [r for r in world.audit() if r["action"] == "control.open_window"]
        assert "control may open panes" in record["details"]
        await world.gate.run(world.human, "control.allow_panes", {"allow": False})
        asked = await world.gate.run(CONTROL, "control.open_window", {"launcher": "shell"})
        assert asked["opened"] is False and asked["card"]

    run_world(scenario)


def test_resuming_a_session_is_a_card_and_goes_through_the_resumer_once_allowed(
    run_world: Run,
) -> None:
    async def scenario(world: World) -> None:
        with pytest.raises(BadRequest):
            await world.gate.run(
                CONTROL, "control.resume_session", {"harness": "vi", "session_id": "s1"}
            )
        params = {"harness": "claude", "session_id": "sess-unknown"}
        asked = await world.gate.run(CONTROL, "control.resume_session", params)
        assert asked["opened"] is False
        [card] = [c for c in await world.cards() if c["id"] == asked["card"]]
        assert card["summary"] == "control wants to resume the claude session sess-unknown"
        await world.decide(asked["card"], "approve")
        await world.until(
            lambda: [r for r in world.audit() if r["action"] == "session.resume"],
            "the approved resume, run as the human",
        )
        [resumed] = [r for r in world.audit() if r["action"] == "session.resume"]
        assert resumed["actor"] == f"human:{world.user}" and resumed["outcome"] != "ok"
        await world.gate.run(world.human, "control.allow_panes", {})
        with pytest.raises(NotFound, match="no session claude:sess-unknown is known"):
            await world.gate.run(CONTROL, "control.resume_session", params)

    run_world(scenario)


def test_a_request_for_control_when_none_runs_starts_it_once_and_a_direct_one_does_not(
    run_world: Run,
) -> None:
    async def scenario(world: World) -> None:
        alpha = await agent_in(world, "alpha", "alpha-svc")
        direct = await ask(world, "in alpha-svc, add a test for the parser")
        assert direct["sent_to"] == alpha.pane
        await world.until(lambda: "add a test for the parser" in typed(alpha), "typed")
        assert world.services.grants.control() is None  # a direct send needs no control

        first = (await ask(world, "what is everyone doing?"))["request"]["id"]
        second = (await ask(world, "and what is left to do?"))["request"]["id"]
        control = await world.until(world.services.grants.control, "control started", 30)
        assert control.pane_id is not None
        await world.until(
            lambda: world.directory.entry(str(control.pane_id)).info.session_name == "control",
            "its pane in tmux session control",
        )
        starts = [r for r in world.audit() if r["action"] == "control.start"]
        assert len(starts) == 1 and json.loads(starts[0]["details"])["first_use"] == first
        # the fresh control's first wait_for_changes answers with both requests at once
        waiting = await world.gate.run(CONTROL, "directory.wait", {})
        assert [r["id"] for r in waiting["open_requests"]] == [first, second]

    run_world(scenario)
