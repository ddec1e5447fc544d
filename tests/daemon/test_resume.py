"""Resume over the real daemon: a session's grant follows it across its process's exit.

The agents here are stand-ins (a sleeping process under a structured launcher); the real
Claude Code and Codex TUIs resume in ``test_restart_real_harnesses.py``.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon.launch_proc import identity_of
from tests.daemon.mcp.conftest import Fleet, make_fleet
from tests.daemon.mcp.test_endpoint import raw
from tests.support.wait import wait_until


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    with make_fleet(tmp_path) as made:
        yield made


def resume(fleet: Fleet, harness: str, session_id: str, **extra: Any) -> Any:
    with fleet.daemon.human() as client:
        return client.post(
            "/api/resume", json={"harness": harness, "session_id": session_id, **extra}
        )


def actions(fleet: Fleet, name: str) -> list[dict[str, Any]]:
    return [r for r in fleet.audit() if r["action"] == name]


def test_an_exited_session_is_suspended_and_its_resume_rejoins_the_same_principal(
    fleet: Fleet,
) -> None:
    launched = fleet.launch("fakeclaude", "observe")
    principal = launched["connect"]["principal"]
    session_id = launched["connect"]["session_id"]
    old = fleet.token_of(launched["pid"])
    os.kill(launched["pid"], signal.SIGKILL)
    wait_until(
        lambda: actions(fleet, "agent.suspended"), timeout=30, what="the principal suspended"
    )
    assert raw(fleet, old).status_code == 401
    answer = resume(fleet, "claude", session_id)
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert body["principal"] == principal and body["preset"] == "observe"
    assert body["session_id"] == session_id and body["pane"] != launched["pane"]
    new = fleet.token_of(body["pid"])
    assert new != old
    assert raw(fleet, new).status_code == 200  # the same grant, a fresh token
    assert raw(fleet, old).status_code == 401
    [record] = actions(fleet, "session.resume")
    assert record["details"]["rejoined"] is True and record["outcome"] == "ok"
    # a session that runs is not opened twice
    again = resume(fleet, "claude", session_id)
    assert again.status_code == 409 and "running in" in again.json()["message"]


def test_resume_refuses_what_it_cannot_reopen_naming_the_field(fleet: Fleet) -> None:
    unknown = resume(fleet, "claude", "no-such-session")
    assert unknown.status_code == 404 and unknown.json()["field"] == "session_id"
    bad = resume(fleet, "nope", "x")
    assert bad.status_code == 400 and bad.json()["field"] == "harness"


def test_a_new_agent_in_the_pane_of_one_that_exited_inherits_nothing(fleet: Fleet) -> None:
    launched = fleet.launch("fakeclaude", "observe")
    pane = launched["pane"]
    fleet.tmux.run("set-option", "-p", "-t", pane, "remain-on-exit", "on")
    os.kill(launched["pid"], signal.SIGKILL)
    wait_until(
        lambda: actions(fleet, "agent.suspended"), timeout=30, what="the principal suspended"
    )
    fleet.tmux.run("respawn-pane", "-t", pane, "sleep 600")
    respawned = fleet.tmux.pane_pid(pane)
    with fleet.daemon.human() as client:

        def read_anew() -> bool:
            [entry] = [p for p in client.get("/api/directory").json()["panes"] if p["pane"] == pane]
            return entry["dead"] is False and entry["pane_pid"] == respawned

        # a respawn is announced to no control client: the directory sees it on its own
        wait_until(read_anew, timeout=10, what="the directory reading the respawned process")
        assert client.get("/api/connections").json()["connections"] == []
        answer = client.put("/api/connect", json={"pane": pane, "preset": "observe"})
    assert answer.status_code == 409 and "runs no coding agent" in answer.json()["message"]


def lose_a_connected_agent(fleet: Fleet) -> dict[str, Any]:
    """Launch a stand-in agent with preset observe, kill its tmux server, wait for it to end."""
    launched: dict[str, Any] = fleet.launch("fakeclaude", "observe")
    before = identity_of(launched["pid"])
    fleet.tmux.run("kill-server", check=False)
    wait_until(lambda: identity_of(launched["pid"]) != before, timeout=30, what="the agent ended")
    return launched


def test_openbus_restore_lists_a_lost_session_and_openbus_resume_reopens_it_with_its_grant(
    fleet: Fleet,
) -> None:
    launched = lose_a_connected_agent(fleet)
    session_id = launched["connect"]["session_id"]
    listed = fleet.daemon.cli("restore", "--dry-run", check=True).stdout
    assert listed.startswith("restore 1 session(s)?") and f"claude {session_id}" in listed
    assert "(observe)" in listed
    answer = fleet.daemon.cli("resume", "claude", session_id, "--json", check=True)
    resumed = json.loads(answer.stdout)
    assert resumed["session_id"] == session_id and resumed["preset"] == "observe"
    assert resumed["principal"] == launched["connect"]["principal"]  # the same grant
    assert fleet.daemon.cli("restore", "--dry-run", check=True).stdout.strip() == (
        "nothing to restore"  # resumed by hand: not offered again
    )
    again = fleet.daemon.cli("resume", "claude", session_id)
    assert again.returncode != 0 and f"is running in {resumed['pane']}" in again.stderr
