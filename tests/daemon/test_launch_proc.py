"""Processes of a pane: closing a pane ends what ran in it, on a real tmux server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from openbus.daemon.launch_proc import (
    ProcessIdentity,
    children_of,
    close_pane,
    end_processes,
    identity_of,
    session_members,
)
from openbus.daemon.tmux.adapter import Tmux
from tests.support.tmux import TmuxServer, tmux_server
from tests.support.wait import wait_until


@pytest.fixture
def server(tmp_path: Path) -> Iterator[TmuxServer]:
    with tmux_server(tmp_path / "tmux") as running:
        yield running


def pane_pid(server: TmuxServer, pane: str) -> int:
    return int(server.run("display-message", "-p", "-t", pane, "#{pane_pid}").strip())


def members_once(server: TmuxServer, pane: str, count: int) -> list[ProcessIdentity]:
    """The pane's session members once ``count`` run (its shell and what it started)."""
    leader = pane_pid(server, pane)

    def enough() -> list[ProcessIdentity] | None:
        found = session_members(leader)
        return found if len(found) >= count else None

    return wait_until(enough, what=f"{count} processes in {pane}")


def running(members: list[ProcessIdentity]) -> list[ProcessIdentity]:
    return [m for m in members if identity_of(m.pid) == m]


def ended(server: TmuxServer, members: list[ProcessIdentity]) -> bool:
    """Whether none of ``members`` runs (a zombie the server has yet to reap is ended)."""
    return all(server.reaped(m.pid) or identity_of(m.pid) != m for m in members)


def test_closing_a_pane_ends_what_ran_in_it_though_it_ignores_the_hangup(
    server: TmuxServer,
) -> None:
    # as Gemini CLI was seen to: it caught tmux's hangup and ran on, orphaned
    pane = server.new_window(["sh", "-c", "trap '' HUP; sleep 1000 & sleep 1000"])
    members = members_once(server, pane, 3)
    asyncio.run(close_pane(Tmux(server.socket), pane))
    assert pane not in server.run("list-panes", "-a", "-F", "#{pane_id}").split()
    wait_until(lambda: ended(server, members), what="the pane's processes to end")


def test_what_ignores_sigterm_too_is_killed_after_the_grace(server: TmuxServer) -> None:
    pane = server.new_window(["sh", "-c", "trap '' HUP TERM; sleep 1000 & sleep 1000"])
    members = members_once(server, pane, 3)
    server.kill_pane(pane)
    assert len(running(members)) == 3  # the hangup alone ended none
    left = asyncio.run(end_processes(members, hangup=0.0, term=0.2))
    assert left == []
    wait_until(lambda: ended(server, members), what="the pane's processes to end")


def test_a_process_that_left_the_pane_s_session_is_left_alone(server: TmuxServer) -> None:
    pane = server.new_window(["sh", "-c", "setsid sleep 1000 & trap '' HUP; sleep 1000"])
    leader = pane_pid(server, pane)

    def escaped() -> int | None:
        inside = {m.pid for m in session_members(leader)}
        return next((c for c in children_of(leader) if c not in inside), None)

    away = wait_until(escaped, what="the process in a session of its own")
    members = members_once(server, pane, 2)
    assert away not in {m.pid for m in members}
    try:
        asyncio.run(close_pane(Tmux(server.socket), pane))
        wait_until(lambda: ended(server, members), what="the pane's processes to end")
        assert identity_of(away) is not None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(away, signal.SIGKILL)


def test_a_pid_taken_by_another_process_is_not_signalled() -> None:
    me = identity_of(os.getpid())
    assert me is not None
    stale = ProcessIdentity(me.pid, str(int(me.start) - 1))  # this pid, another start time
    assert asyncio.run(end_processes([stale], hangup=0.0, term=0.0)) == []
    assert identity_of(os.getpid()) == me  # still here: nothing was sent


def test_closing_a_dead_or_gone_pane_ends_nothing_and_raises_nothing(
    server: TmuxServer,
) -> None:
    tmux = Tmux(server.socket)
    pane, _ = asyncio.run(tmux.new_window(["sh", "-c", "exit 3"], remain_on_exit=True))
    wait_until(
        lambda: server.run("display-message", "-p", "-t", pane, "#{pane_dead}").strip() == "1",
        what="the pane dead",
    )
    asyncio.run(close_pane(tmux, pane))
    assert pane not in server.run("list-panes", "-a", "-F", "#{pane_id}").split()
    asyncio.run(close_pane(tmux, pane))  # gone: nothing more to do


def test_a_test_s_tmux_server_leaves_nothing_of_its_panes_running(tmp_path: Path) -> None:
    with tmux_server(tmp_path / "tmux") as server:
        pane = server.new_window(["sh", "-c", "trap '' HUP; sleep 1000"])
        members = members_once(server, pane, 2)
    assert running(members) == []
