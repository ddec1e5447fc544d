"""Agents on a hosted box in ``shared`` mode: every agent runs as the agents' tmux server's
user, which the daemon's user may not signal."""

from __future__ import annotations

import pytest

from openbus.daemon.launch_proc import identity_of, session_members
from tests.hosted.conftest import HostedBox, mcp_initialize, needs_root
from tests.hosted.test_agent_pool import launch, token_of
from tests.support.wait import wait_until

pytestmark = [pytest.mark.root, needs_root]


def test_an_agent_whose_pane_is_closed_while_it_runs_on_is_ended_by_the_agents_server(
    shared_box: HostedBox,
) -> None:
    launched = launch(shared_box, "observe", "hangupproof")
    assert launched["agent_user"] is None  # no pool user: the server's own
    members = wait_until(
        lambda: len(found := session_members(launched["pid"])) == 2 and found,
        what="the agent and its child",
    )
    token = token_of(launched["pid"])
    assert mcp_initialize(shared_box, token) == 200
    killed = shared_box.tmux("kill-pane", "-t", launched["pane"])
    assert killed.returncode == 0, killed.stderr
    wait_until(
        lambda: all(identity_of(m.pid) != m for m in members),
        timeout=30,
        what="the agent and its child to be ended",
    )
    assert mcp_initialize(shared_box, token) == 401
