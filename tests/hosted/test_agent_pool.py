"""Agents on a hosted box, each under its own pool user: one agent attacks another as the red
team did (its environment, its memory, its token file, the agents' tmux socket) and the kernel
says no to each; the daemon gives a pool user back only when nothing of it runs; the sudoers
rule lets the agents' tmux server run commands as pool users and as no one else.

Every attempt runs in a subprocess as the attacking agent's uid with that uid's groups, the
same credentials sudo gave the agent's own process (checked against ``/proc``).
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon.launch_proc import process_tree
from tests.hosted.conftest import HostedBox, as_user, mcp_initialize, needs_root, probe
from tests.hosted.test_isolation import audit_after, audit_head
from tests.support.daemon import python_for
from tests.support.wait import wait_until

pytestmark = [pytest.mark.root, needs_root]


def pids_of(uid: int) -> list[int]:
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if uid in uids_of(int(entry.name)):
                    found.append(int(entry.name))
            except (OSError, StopIteration):
                continue
    return found


@pytest.fixture(autouse=True)
def idle_pool(box: HostedBox) -> Iterator[None]:
    """Each test starts with every pool user idle: the agents a test launched are ended (they
    belong to this box's throwaway users) and gone before the next test."""
    yield
    uids = [pwd.getpwnam(u).pw_uid for u in box.pool_users]
    for uid in uids:
        for pid in pids_of(uid):
            os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not any(pids_of(u) for u in uids), timeout=15, what="the pool to be idle")


def launch(
    box: HostedBox, preset: str = "collaborate", launcher: str = "fakeclaude"
) -> dict[str, Any]:
    python, env = python_for(box.operator)
    argv = [python, "-m", "openbus.daemon.cli", "launch", launcher, "--preset", preset]
    argv += ["--cwd", "/tmp", "--json", "--config", str(box.daemon.config_path)]
    done = as_user(box.operator, argv, env=dict(env))
    assert done.returncode == 0, done.stderr
    launched: dict[str, Any] = json.loads(done.stdout)
    return launched


def uids_of(pid: int) -> list[int]:
    status = Path(f"/proc/{pid}/status").read_text()
    return [
        int(v) for v in next(x for x in status.splitlines() if x.startswith("Uid:")).split()[1:]
    ]


def agent_process(launched: dict[str, Any]) -> int:
    """The harness's own process under the pane (the pane's first process is sudo's)."""
    uid = pwd.getpwnam(launched["agent_user"]).pw_uid

    def found() -> int | None:
        for pid in process_tree(int(launched["pid"])):
            try:
                token_file = Path(pwd.getpwuid(uid).pw_dir) / "token"
                if uids_of(pid) == [uid] * 4 and token_file.stat().st_size > 0:
                    return pid
            except OSError:
                continue
        return None

    pid: int = wait_until(found, timeout=15, what=f"the agent to run as {launched['agent_user']}")
    return pid


def token_of(pid: int) -> str:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"OPENBUS_TOKEN="))


def test_two_agents_run_under_two_pool_users_and_neither_reaches_the_other(
    box: HostedBox,
) -> None:
    before = audit_head(box)
    first, second = launch(box, "collaborate"), launch(box, "observe")
    victim, attacker = agent_process(first), agent_process(second)
    pool = set(box.pool_users)
    assert first["agent_user"] in pool and second["agent_user"] in pool
    assert first["agent_user"] != second["agent_user"]
    assert box.agent_user not in (first["agent_user"], second["agent_user"])
    assert uids_of(victim) == [pwd.getpwnam(first["agent_user"]).pw_uid] * 4
    token = token_of(victim)  # root can: the secret is there to be stolen
    assert mcp_initialize(box, token) == 200
    victim_home = Path(pwd.getpwnam(first["agent_user"]).pw_dir)
    assert (victim_home / "token").read_text().strip() == token

    targets = [f"/proc/{victim}/environ", f"/proc/{victim}/mem", str(victim_home / "token")]
    stolen = probe(second["agent_user"], "read", {"paths": targets})
    assert stolen == dict.fromkeys(targets, "PermissionError")
    socket = probe(second["agent_user"], "connect", {"socket": str(box.tmux_socket)})
    assert socket == "PermissionError"
    typed = as_user(
        second["agent_user"],
        [
            "tmux",
            "-S",
            str(box.tmux_socket),
            "send-keys",
            "-t",
            first["pane"],
            "echo pwned",
            "Enter",
        ],
        env={"HOME": str(Path(pwd.getpwnam(second["agent_user"]).pw_dir))},
    )
    assert typed.returncode != 0
    assert "Permission denied" in typed.stderr
    # the attacker's own process is the one that was refused: same uid, same groups
    assert uids_of(attacker) == [pwd.getpwnam(second["agent_user"]).pw_uid] * 4
    own = probe(second["agent_user"], "read", {"paths": [f"/proc/{attacker}/environ"]})
    assert own == {f"/proc/{attacker}/environ": "ok"}

    launches = [r for r in audit_after(box, before) if r["action"] == "launch"]
    assert [r["details"]["agent_user"] for r in launches] == [
        first["agent_user"],
        second["agent_user"],
    ]
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            assert token.encode() not in cmdline.read_bytes()
        except OSError:
            continue


def test_a_pool_user_goes_back_to_the_pool_only_when_nothing_of_it_runs(box: HostedBox) -> None:
    launched = launch(box, "observe")
    user = launched["agent_user"]
    uid = pwd.getpwnam(user).pw_uid
    agent_process(launched)
    # the agent leaves a process behind that outlives its pane
    left = as_user(user, ["/bin/sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"])
    straggler = int(left.stdout.strip())
    assert uids_of(straggler) == [uid] * 4
    killed = box.tmux("kill-pane", "-t", launched["pane"])
    assert killed.returncode == 0, killed.stderr
    wait_until(lambda: pids_of(uid) == [straggler], timeout=15, what="the pane's agent to exit")

    others = {launch(box, "observe")["agent_user"] for _ in range(len(box.pool_users) - 1)}
    assert user not in others, "a uid with a process still running was handed out again"
    with box.daemon.human() as desk:
        full = desk.post(
            "/api/launch", json={"launcher": "fakeclaude", "preset": "observe", "cwd": "/tmp"}
        )
    assert full.status_code == 409, full.text
    assert full.json()["field"] == "agent_user"
    assert (
        f"({user} runs no agent, only processes an ended agent left running"
        in (full.json()["message"])
    )

    os.kill(straggler, signal.SIGKILL)
    wait_until(lambda: not pids_of(uid), timeout=10, what=f"nothing of {user} to run")
    assert launch(box, "observe")["agent_user"] == user


def test_an_agent_whose_pane_is_closed_while_it_runs_on_is_ended_as_its_pool_user(
    box: HostedBox,
) -> None:
    """The daemon may not signal a pool user's processes: the agents' tmux server, whose user
    may run commands as pool users, ends them for it (sudo), and the pool user is free again."""
    launched = launch(box, "observe", "hangupproof")
    user = launched["agent_user"]
    uid = pwd.getpwnam(user).pw_uid
    token = token_of(agent_process(launched))
    assert mcp_initialize(box, token) == 200
    wait_until(lambda: len(pids_of(uid)) == 2, what="the agent and its child")
    killed = box.tmux("kill-pane", "-t", launched["pane"])
    assert killed.returncode == 0, killed.stderr
    wait_until(lambda: not pids_of(uid), timeout=30, what=f"nothing of {user} to run")
    assert mcp_initialize(box, token) == 401
    assert launch(box, "observe")["agent_user"] == user  # the lowest uid, free again


def sudo_as(box: HostedBox, target: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``argv`` through sudo as ``target``, run as the agents' tmux server's user the way its
    panes do, keeping one named variable of two."""
    sudo = ["sudo", "--non-interactive", "--user", target, "--preserve-env=KEPT", "--"]
    return as_user(box.agent_user, [*sudo, *argv], env={"KEPT": "k", "DROPPED": "d"})


def test_the_agents_server_user_runs_commands_only_as_pool_users_even_if_the_group_holds_others(
    box: HostedBox,
) -> None:
    """The installed sudoers rule lets the tmux server's user run any command as a pool user
    (the harness itself, no wrapper between): a careless operator puts root and the box's own
    users in the pool group, and sudo still refuses each of them."""
    others = ["root", box.daemon_user, box.agent_user, box.tunnel_user]
    for name in others:
        subprocess.run(["gpasswd", "-a", name, box.pool_group], check=True, capture_output=True)
    try:
        for name in [*others, "#0"]:
            refused = sudo_as(box, name, "/usr/bin/id", "-u")
            assert refused.returncode != 0, f"sudo ran a command as {name}: {refused.stdout}"
            assert refused.stdout == ""
        as_root_group = as_user(
            box.agent_user, ["sudo", "-n", "-u", box.pool_users[0], "-g", "root", "id", "-g"]
        )
        assert as_root_group.returncode != 0 and as_root_group.stdout == ""

        ran = sudo_as(box, box.pool_users[0], "/usr/bin/env")
        assert ran.returncode == 0, ran.stderr
        env = dict(line.split("=", 1) for line in ran.stdout.splitlines())
        assert env["USER"] == box.pool_users[0] and env["KEPT"] == "k"
        assert "DROPPED" not in env
    finally:
        for name in others:
            subprocess.run(["gpasswd", "-d", name, box.pool_group], check=True, capture_output=True)
