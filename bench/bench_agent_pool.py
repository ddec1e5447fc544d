"""Agent pool benchmark: launching an agent under its own pool uid against a shared-uid launch.

A miniature hosted box (real throwaway users, as ``tests/hosted``): the agents' tmux server
as its user, the rendered ``deploy/sudoers.d/openbus``, and two real daemons on that server,
one with ``agent_isolation = "pool"`` and one with ``"shared"``. Each round launches one agent
through each daemon's human API (``POST /api/launch``, a shell launcher so the directory
recognises it at once) and times the call until the agent's process runs under its uid
(the pool's: sudo and the /proc scan included); the agents are ended between rounds.
Printed: p50 of each and the ratio (target <= 1.2).

Needs root (users, sudoers); skipped otherwise. Run: ``.venv/bin/python -m bench.bench_agent_pool``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from openbus.daemon.agent_users import running_uids
from openbus.daemon.launch_proc import process_tree
from tests.hosted.conftest import (
    Accounts,
    _pool,
    _start_agent_tmux,
    _write_credential,
    as_user,
    install_sudoers,
    render_sudoers,
)
from tests.support.daemon import RunningDaemon, start_daemon
from tests.support.policy import signed_policy
from tests.support.wait import wait_until

ROUNDS = 15
TARGET = 1.2
AGENT = ["/bin/sh", "-c", "sleep 600; :"]


def _uids(pid: int) -> list[int]:
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(x for x in status.splitlines() if x.startswith("Uid:"))
    return [int(v) for v in line.split()[1:]]


def _runs_as(pid: int, uid: int) -> bool:
    for p in process_tree(pid):
        try:
            if _uids(p) == [uid] * 4 and Path(f"/proc/{p}/comm").read_text().strip() == "sleep":
                return True
        except (OSError, StopIteration):
            continue
    return False


def _any_of(uid: int) -> bool:
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and uid in _uids(int(p.name)):
                return True
        except (OSError, StopIteration):
            continue
    return False


def _launch(daemon: RunningDaemon, agent_uid: int) -> tuple[float, int]:
    started = time.perf_counter()
    with daemon.human() as desk:
        response = desk.post(
            "/api/launch", json={"launcher": "agent", "preset": "off", "cwd": "/tmp"}
        )
    assert response.status_code in (200, 201), response.text
    body: dict[str, Any] = response.json()
    uid = pwd.getpwnam(body["agent_user"]).pw_uid if body.get("agent_user") else agent_uid
    wait_until(lambda: _runs_as(int(body["pid"]), uid), timeout=15, what="the agent to run")
    return time.perf_counter() - started, int(body["pid"])


def _end(pids: list[int], uids: list[int]) -> None:
    """End the round's agents and wait until nothing of the box's agent uids runs."""
    for pid in pids:
        for p in reversed(process_tree(pid)):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                continue
    wait_until(lambda: not running_uids()[0] & set(uids), timeout=15, what="the agents to end")


def main() -> None:
    if os.geteuid() != 0 or shutil.which("sudo") is None:
        print("bench_agent_pool: skipped (needs root and sudo: real users and a sudoers rule)")
        return
    accounts = Accounts()
    root = Path(tempfile.mkdtemp(prefix="openbus-bench-pool-", dir="/tmp"))
    root.chmod(0o755)
    sock = root / "agent-run" / "tmux.sock"
    daemons: list[RunningDaemon] = []
    sudoers: Path | None = None
    agent = ""
    try:
        agent = accounts.user()
        daemon_user = accounts.user(agent)
        pool_group = accounts.group()
        pool_uids = [pwd.getpwnam(u).pw_uid for u in _pool(root, accounts, pool_group)]
        tunnel_user = accounts.user()
        sudoers = install_sudoers(render_sudoers(agent, pool_group, daemon_user, tunnel_user))
        _, public = _write_credential(root / "tunnel", tunnel_user)
        _start_agent_tmux(root, agent, daemon_user, sock)
        for mode in ("pool", "shared"):
            (root / mode).mkdir(mode=0o755)
            hosted: dict[str, dict[str, Any]] = {
                "hosted": {
                    "enabled": True,
                    "agent_user": agent,
                    "operators_group": pool_group,
                    "tunnel_user": tunnel_user,
                    "tunnel_public_key": str(public),
                    "agent_isolation": mode,
                    "agent_pool_group": pool_group,
                },
                "tmux": {"socket": str(sock)},
                "policy": signed_policy(root / mode / "org"),
                "launchers.agent": {"harness": "shell", "argv": AGENT},
            }
            daemons.append(start_daemon(root / mode, hosted, user=daemon_user))
        pool_daemon, shared_daemon = daemons
        agent_uid = pwd.getpwnam(agent).pw_uid
        pooled: list[float] = []
        shared: list[float] = []
        for i in range(ROUNDS + 1):
            order = [(pool_daemon, pooled), (shared_daemon, shared)]
            if i % 2:
                order.reverse()  # neither always goes first
            launched: list[int] = []
            for daemon, into in order:
                seconds, pid = _launch(daemon, agent_uid)
                launched.append(pid)
                if i:  # the first round warms both up
                    into.append(seconds)
            _end(launched, pool_uids)
        p_pool, p_shared = statistics.median(pooled) * 1e3, statistics.median(shared) * 1e3
        ratio = p_pool / p_shared
        print(f"launch to agent running, pool uid p50 {p_pool:.1f} ms ({ROUNDS} launches)")
        print(f"launch to agent running, shared uid p50 {p_shared:.1f} ms ({ROUNDS} launches)")
        print(f"ratio {ratio:.2f} (target {TARGET}): {'OK' if ratio <= TARGET else 'OVER'}")
    finally:
        for daemon in daemons:
            daemon.stop()
        if agent and sock.exists():
            as_user(agent, ["tmux", "-S", str(sock), "kill-server"])
        if sudoers is not None:
            sudoers.unlink(missing_ok=True)
        for name in accounts.users:
            uid = pwd.getpwnam(name).pw_uid
            wait_until(lambda uid=uid: not _any_of(uid), timeout=15, what="the box to exit")
        accounts.remove_all()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
