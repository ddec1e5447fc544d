"""An agent on a hosted box whose launch directory the daemon no longer knows.

The agents run as the agent user, so the daemon cannot read their ``/proc/<pid>/cwd``; after
a daemon restart the launch records are gone too. Such an agent has no own repo: what it is
told about a past session and what the audit log says it was told must agree.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.daemon.history.homes import ClaudeHome
from tests.hosted.conftest import HostedBox, as_user, needs_root
from tests.support.daemon import python_for, restart_daemon
from tests.support.mcp_results import tool_data
from tests.support.wait import wait_until

pytestmark = [pytest.mark.root, needs_root]

SESSION = "5d2c4f7e-1b3a-4c8e-9f00-0123456789ab"


def launch_as(box: HostedBox, user: str) -> dict[str, Any]:
    python, env = python_for(user)
    argv = [python, "-m", "openbus.daemon.cli", "launch", "fakeclaude", "--preset", "observe"]
    argv += ["--cwd", "/tmp", "--json", "--config", str(box.daemon.config_path)]
    done = as_user(user, argv, env=dict(env))
    assert done.returncode == 0, done.stderr
    launched: dict[str, Any] = json.loads(done.stdout)
    return launched


def token_of(pid: int) -> str:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"OPENBUS_TOKEN="))


def call_tool(box: HostedBox, token: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            create_mcp_http_client(headers=headers) as http,
            streamable_http_client(f"{box.daemon.base_url}/mcp", http_client=http) as (r, w),
            ClientSession(r, w) as session,
        ):
            await session.initialize()
            return tool_data(await session.call_tool(name, args))

    return asyncio.run(go())


def audit(box: HostedBox) -> list[dict[str, Any]]:
    return box.daemon.audit()


def indexed(box: HostedBox) -> bool:
    with box.daemon.human() as desk:
        return desk.get(f"/api/history/sessions/claude/{SESSION}").status_code == 200


def test_get_session_without_a_known_launch_directory_is_refused_and_audited_so(
    box: HostedBox,
) -> None:
    # a past session of another repo in the daemon's own Claude Code config dir
    claude = box.daemon.state_dir / ".claude"
    ClaudeHome(claude).session(SESSION, "/srv/another-team/payroll", ["fix the payroll export"])
    entry = pwd.getpwnam(box.daemon_user)
    for path in [claude, *claude.rglob("*")]:
        os.chown(path, entry.pw_uid, entry.pw_gid)
    launched = launch_as(box, box.operator)
    token = token_of(int(launched["pid"]))

    box.daemon = restart_daemon(box.daemon)  # the launch records are gone; the agent lives
    try:
        wait_until(lambda: indexed(box), timeout=20, what="the past session in the index")
        told = call_tool(box, token, "get_session", {"harness": "claude", "session_id": SESSION})
        assert told["kind"] == "error" and told["error"] == "not_found", told
        assert "payroll" not in json.dumps(told)
        gets = [
            r
            for r in audit(box)
            if r["action"] == "history.get" and r["actor"].startswith("agent:")
        ]
        assert [r["outcome"] for r in gets] == ["refused"], gets
    finally:
        box.daemon.stop()
