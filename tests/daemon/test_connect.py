"""Connect over the real daemon: turning an agent Off revokes its token for good; connecting an
agent without a token offers a restart onto its session where the launch can be reproduced,
and says why not everywhere else."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.mcp.conftest import Fleet, make_fleet
from tests.daemon.mcp.test_endpoint import raw
from tests.support.daemon import restart_daemon
from tests.support.wait import wait_until


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    with make_fleet(tmp_path) as made:
        yield made


def put_connect(fleet: Fleet, pane: str, preset: str) -> Any:
    with fleet.daemon.human() as client:
        return client.put("/api/connect", json={"pane": pane, "preset": preset})


def test_off_then_observe_again_leaves_the_old_token_refused(fleet: Fleet) -> None:
    launched = fleet.launch("fakeclaude", "observe")
    token = fleet.token_of(launched["pid"])
    assert raw(fleet, token).status_code == 200
    assert put_connect(fleet, launched["pane"], "off").status_code == 200
    assert raw(fleet, token).status_code == 401
    again = put_connect(fleet, launched["pane"], "observe")
    assert again.status_code == 200, again.text  # a new grant needs a new token: a restart
    assert again.json()["restart"]["summary"] == "Restart this agent to connect it?"
    assert raw(fleet, token).status_code == 401
    records = [r for r in fleet.audit() if r["action"] == "connect.set"]
    assert records[0]["details"]["revoked"] is True
    assert records[0]["details"]["principals"] == [launched["connect"]["principal"]]
    assert records[-1]["outcome"] == "card"
    # turning it off again is a no-op, not an error
    assert put_connect(fleet, launched["pane"], "off").status_code == 200


def test_disconnect_all_revokes_every_token_of_the_human(fleet: Fleet) -> None:
    first = fleet.launch("fakeclaude", "observe")
    second = fleet.launch("fakecodex", "collaborate")
    tokens = [fleet.token_of(first["pid"]), fleet.token_of(second["pid"])]
    with fleet.daemon.human() as client:
        assert client.post("/api/disconnect-all", json={}).json()["disconnected"] == 2
    assert put_connect(fleet, second["pane"], "collaborate").status_code == 409
    assert [raw(fleet, t).status_code for t in tokens] == [401, 401]


def _typed_claude(fleet: Fleet, tmp_path: Path) -> str:
    """A pane the directory reads as Claude Code, typed into tmux rather than launched."""
    binary = tmp_path / "bin" / "claude"
    binary.parent.mkdir(parents=True)
    shutil.copy(shutil.which("sleep") or "/bin/sleep", binary)
    command = f"{binary} 600"
    pane = fleet.tmux.run("new-window", "-d", "-P", "-F", "#{pane_id}", command).strip()
    wait_until(
        lambda: _pane(fleet, pane).get("harness") == "claude",
        what="the directory to read the typed-in agent as Claude Code",
    )
    return pane


def _pane(fleet: Fleet, pane: str) -> dict[str, Any]:
    with fleet.daemon.human() as client:
        panes = client.get("/api/directory").json()["panes"]
    return next((p for p in panes if p["pane"] == pane), {})


def _unavailable(fleet: Fleet) -> dict[str, str]:
    with fleet.daemon.human() as client:
        body = client.get("/api/connections").json()
    return {u["pane"]: u["reason"] for u in body["unavailable"]}


def test_a_claude_typed_into_a_shell_is_refused_without_a_card_and_no_restart_is_promised(
    fleet: Fleet, tmp_path: Path
) -> None:
    pane = _typed_claude(fleet, tmp_path)
    answer = put_connect(fleet, pane, "observe")
    assert answer.status_code == 409, answer.text
    reason = answer.json()["message"]
    assert "started outside openbus" in reason and "could not reproduce its launch" in reason
    assert _unavailable(fleet)[pane] == reason  # the page shows the same line, no toggle
    with fleet.daemon.human() as client:
        assert client.get("/api/cards").json()["cards"] == []


def test_an_agent_launched_off_is_still_offered_a_restart_after_the_daemon_restarts(
    fleet: Fleet,
) -> None:
    launched = fleet.launch("fakeclaude", "off")
    fleet.daemon = restart_daemon(fleet.daemon)
    try:
        wait_until(
            lambda: _pane(fleet, launched["pane"]).get("incarnation") == launched["incarnation"],
            what="the restarted daemon to see the pane again",
        )
        assert "needs restart-to-connect" in _unavailable(fleet)[launched["pane"]]
        answer = put_connect(fleet, launched["pane"], "observe")
        assert answer.status_code == 200, answer.text
        assert answer.json()["restart"]["summary"] == "Restart this agent to connect it?"
    finally:
        fleet.daemon.stop()


def test_connecting_what_openbus_cannot_relaunch_is_refused_naming_the_reason(
    fleet: Fleet,
) -> None:
    typed = fleet.tmux.run("new-window", "-d", "-P", "-F", "#{pane_id}", "sleep 600").strip()
    opaque = fleet.launch("opaque", "off")
    opencode = fleet.launch("fakeopencode", "off")
    codex = fleet.launch("fakecodex", "off")  # its session was never reported
    reasons = {}
    for name, pane in (
        ("typed", typed),
        ("opaque", opaque["pane"]),
        ("opencode", opencode["pane"]),
        ("codex", codex["pane"]),
    ):
        answer = put_connect(fleet, pane, "observe")
        assert answer.status_code == 409, (name, answer.text)
        assert answer.json()["field"] == "pane"
        reasons[name] = answer.json()["message"]
    assert "runs no coding agent" in reasons["typed"]
    assert "opaque" in reasons["opaque"]
    assert reasons["opencode"].startswith("Connect is unavailable for OpenCode")
    assert "session id is not known" in reasons["codex"]
    with fleet.daemon.human() as client:
        assert client.get("/api/cards").json()["cards"] == []
        offers = {o["pane"]: o for o in client.get("/api/restart-offers").json()["offers"]}
    # the page is told which toggles a restart can honour: none of these, each with its reason
    assert typed not in offers
    assert {offers[p["pane"]]["restartable"] for p in (opaque, opencode, codex)} == {False}
    assert offers[codex["pane"]]["reason"] == reasons["codex"]


def test_an_agent_launched_off_is_offered_a_restart_and_its_card_raised(fleet: Fleet) -> None:
    launched = fleet.launch("fakeclaude", "off")
    with fleet.daemon.human() as client:
        [offer] = client.get("/api/restart-offers").json()["offers"]
        assert offer["pane"] == launched["pane"] and offer["restartable"] is True
        assert offer["session_id"] == launched["session_id"]
        answer = client.put("/api/connect", json={"pane": launched["pane"], "preset": "observe"})
        assert answer.status_code == 200, answer.text
        [card] = client.get("/api/cards").json()["cards"]
    assert card["kind"] == "restart_to_connect" and card["id"] == answer.json()["restart"]["card"]
    assert card["summary"].startswith("Restart this agent to connect it?")


def test_each_pane_connect_cannot_honour_is_refused_with_its_own_reason(fleet: Fleet) -> None:
    opaque = fleet.launch("opaque", "off")
    pure = fleet.launch("fakeclaude", "off")
    connected = fleet.launch("fakeclaude", "observe")
    shell = fleet.tmux.run("list-panes", "-t", "main:0", "-F", "#{pane_id}").split()[0]
    answers = {
        name: put_connect(fleet, pane, "observe")
        for name, pane in (
            ("missing", "%99"),
            ("shell", shell),
            ("opaque", opaque["pane"]),
        )
    }
    assert {n: a.status_code for n, a in answers.items()} == {
        "missing": 404,
        "shell": 409,
        "opaque": 409,
    }
    messages = {n: a.json()["message"] for n, a in answers.items()}
    assert messages["missing"] == "no pane %99 in the fleet"
    assert messages["shell"] == "Connect is unavailable for a shell: it is not an agent"
    assert "opaque command launcher" in messages["opaque"]
    # the page's source: every pane it must not offer a toggle for, with that same reason
    with fleet.daemon.human() as client:
        listing = client.get("/api/connections").json()
    unavailable = {u["pane"]: u["reason"] for u in listing["unavailable"]}
    assert unavailable[shell] == messages["shell"]
    assert unavailable[opaque["pane"]] == messages["opaque"]
    # launched Off, it holds no token: the toggle is a restart (its card), and the line says so
    assert "launched with preset Off" in unavailable[pure["pane"]]
    assert connected["pane"] not in unavailable
    assert [c["pane"] for c in listing["connections"]] == [connected["pane"]]
