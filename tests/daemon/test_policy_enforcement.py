"""The org policy in force in the daemon: caps bound grants, and narrowing cascades at once."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.daemon.mcp.conftest import SLEEPER, Fleet
from tests.daemon.mcp.test_endpoint import mcp_session
from tests.support.daemon import running_daemon
from tests.support.mcp_results import tool_data
from tests.support.policy import signed_policy
from tests.support.tmux import tmux_server
from tests.support.wait import wait_until


@contextmanager
def governed_fleet(tmp_path: Path, default: str) -> Iterator[tuple[Fleet, Path]]:
    org = tmp_path / "org"
    section = signed_policy(org, version=1, default=default)
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    with tmux_server(tmp_path / "tmux") as tmux:
        extra: dict[str, Any] = {
            "tmux": {"socket": str(tmux.socket)},
            "policy": section,
            "history": {
                "claude_config_dirs": [str(tmp_path / "c")],
                "codex_homes": [str(tmp_path / "x")],
            },
            "launchers.fakeclaude": {"harness": "claude", "argv": SLEEPER},
        }
        with running_daemon(tmp_path, extra) as daemon:
            yield Fleet(daemon, tmux, project), org


def records(fleet: Fleet) -> list[dict[str, Any]]:
    db = sqlite3.connect(f"file:{fleet.daemon.state_dir / 'openbus.db'}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT actor, action, outcome, target, message_id, details FROM audit ORDER BY seq"
        )
        keys = ("actor", "action", "outcome", "target", "message_id", "details")
        return [dict(zip(keys, row, strict=True)) for row in rows.fetchall()]
    finally:
        db.close()


def call(fleet: Fleet, token: str, tool: str, args: dict[str, Any]) -> Any:
    async def go() -> Any:
        async with mcp_session(fleet, token) as session:
            await session.initialize()
            return await session.call_tool(tool, args)

    return asyncio.run(go())


def test_a_grant_above_the_cap_is_refused_naming_the_cap_and_its_rule(tmp_path: Path) -> None:
    with governed_fleet(tmp_path, "observe") as (fleet, _org):
        with fleet.daemon.human() as client:
            response = client.post(
                "/api/launch",
                json={"launcher": "fakeclaude", "preset": "collaborate", "cwd": str(fleet.project)},
            )
        assert response.status_code == 403
        body = response.json()
        assert body["error"] == "policy_refused" and body["field"] == "preset"
        assert "observe" in body["message"] and "default" in body["message"]


def test_narrowing_the_cap_takes_effect_on_the_next_call_and_cancels_queued_messages(
    tmp_path: Path,
) -> None:
    with governed_fleet(tmp_path, "collaborate") as (fleet, org):
        sender = fleet.launch("fakeclaude", "collaborate")
        recipient = fleet.launch("fakeclaude", "collaborate")
        token = fleet.token_of(sender["pid"])
        sent = call(
            fleet,
            token,
            "send_message",
            {
                "target": recipient["pane"],
                "incarnation": recipient["incarnation"],
                "text": "please rebase onto main",
                "message_id": "m-1",
            },
        )
        assert not sent.is_error, tool_data(sent)
        assert tool_data(sent)["result"]["outcome"] == "queued"

        signed_policy(org, version=2, default="observe")  # the org narrows everyone to observe

        wait_until(
            lambda: [r for r in records(fleet) if r["action"] == "policy.narrowed"],
            timeout=15,
            what="the daemon to notice the narrower policy",
        )
        final = wait_until(
            lambda: [
                r
                for r in records(fleet)
                if r["message_id"] == "m-1" and r["outcome"] == "cancelled"
            ],
            timeout=15,
            what="the queued message to be cancelled and audited",
        )
        assert final[-1]["actor"] == sender["connect"]["actor"]  # the outcome of its message
        assert any(
            r["action"] == "cards.resolve" and r["outcome"] == "cancelled" for r in records(fleet)
        )

        refused = call(
            fleet,
            token,
            "send_message",
            {
                "target": recipient["pane"],
                "incarnation": recipient["incarnation"],
                "text": "again",
                "message_id": "m-2",
            },
        )
        assert refused.is_error and "not connected" in str(refused.content[0])
        still = call(fleet, token, "list_panes", {})
        assert not still.is_error  # observe is within the new cap


def test_a_tampered_or_older_policy_is_refused_audited_and_the_last_good_one_stays(
    tmp_path: Path,
) -> None:
    with governed_fleet(tmp_path, "observe") as (fleet, org):
        policy = org / "policy.toml"
        policy.write_bytes(policy.read_bytes().replace(b'"observe"', b'"collaborate"'))
        rejected = wait_until(
            lambda: [r for r in records(fleet) if r["action"] == "policy.rejected"],
            timeout=15,
            what="the tampered policy to be refused",
        )
        assert rejected[-1]["outcome"] == "refused"
        with fleet.daemon.human() as client:
            response = client.post(
                "/api/launch",
                json={"launcher": "fakeclaude", "preset": "collaborate", "cwd": str(fleet.project)},
            )
        assert response.status_code == 403  # still capped at observe
        signed_policy(org, version=0, default="collaborate")  # a rollback, properly signed
        wait_until(
            lambda: len([r for r in records(fleet) if r["action"] == "policy.rejected"]) >= 2,
            timeout=15,
            what="the rollback to be refused",
        )


HARNESS_POLICY = """\
org = "test"
version = {version}
issued = "2026-11-30T00:00:00Z"

[caps]
default = "collaborate"

[harnesses]
allowed = [{allowed}]
"""


def test_a_harness_the_policy_does_not_allow_is_refused_at_launch_and_at_connect(
    tmp_path: Path,
) -> None:
    with governed_fleet(tmp_path, "collaborate") as (fleet, org):
        signed_policy(org, HARNESS_POLICY.format(version=2, allowed='"claude"'))
        launched = fleet.launch("fakeclaude", "observe")
        signed_policy(org, HARNESS_POLICY.format(version=3, allowed='"codex"'))
        with fleet.daemon.human() as client:

            def launch_refused() -> Any:
                response = client.post(
                    "/api/launch",
                    json={"launcher": "fakeclaude", "preset": "off", "cwd": str(fleet.project)},
                )
                return response if response.status_code == 403 else None

            refused = wait_until(launch_refused, timeout=15, what="the codex-only policy").json()
            connect = client.put(
                "/api/connect", json={"pane": launched["pane"], "preset": "collaborate"}
            )
        assert refused["error"] == "policy_refused" and refused["field"] == "harness"
        assert "claude harness" in refused["message"]
        assert "harnesses.allowed = [codex]" in refused["message"]
        assert connect.status_code == 403, connect.text
        body = connect.json()
        assert body["field"] == "harness" and "harnesses.allowed" in body["message"]
        outcomes = [(r["action"], r["outcome"]) for r in records(fleet)]
        assert ("launch", "refused") in outcomes and ("connect.set", "refused") in outcomes
