"""A miniature hosted box in a temp dir, with real throwaway users (CI runs as root).

* the daemon's user owns the state dir (0700) and runs the real daemon subprocess with a
  hosted config, a signed org policy and the tunnel's public key; it is a member of the
  agent user's group, as ``deploy/systemd/sysusers.d`` makes ``openbus`` a member of
  ``openbus-agent``;
* the tunnel's user alone holds the Ed25519 credential (0400 in a 0700 dir);
* the agent user runs its own tmux server from its 0700 home; like ``openbus-agent.service`` it
  opens the socket to its group (0660) and grants the daemon's user with ``server-access -a``;
* an operator (in the operators' group) and an outsider (in no group of ours) at the desk;
* the agent-user pool (``agent_isolation = "pool"``, the hosted default): ``POOL_SIZE`` users
  in the pool group, each with a 0700 home, and ``deploy/sudoers.d/openbus`` installed with
  this box's names (checked by ``visudo -c``), so each launched agent runs under its own uid
  as it would on an installed box.

Everything is removed after the module: processes, users, groups and files.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from openbus.kernel.tunnel_signature import public_key_pem
from tests.support.daemon import RunningDaemon, python_for, start_daemon
from tests.support.policy import signed_policy
from tests.support.require import skip_missing
from tests.support.wait import Timeout, wait_until

REPO = Path(__file__).resolve().parents[2]
AGENT_TMUX_CONF = REPO / "deploy" / "systemd" / "agent-tmux.conf"
SUDOERS = REPO / "deploy" / "sudoers.d" / "openbus"
POOL_SIZE = 3

# An agent that keeps its token in a file of its own, as harnesses keep credentials.
FAKE_AGENT = [
    "/bin/sh",
    "-c",
    'printenv OPENBUS_TOKEN > "$HOME/token"; exec sleep 600',
    "agent",
]

# an agent that ignores tmux's hangup, as Gemini CLI does, and leaves a child that does too
HANGUP_PROOF_AGENT = [
    "/bin/sh",
    "-c",
    'printenv OPENBUS_TOKEN > "$HOME/token"; trap "" HUP; sleep 600 & exec sleep 600',
    "agent",
]

needs_root = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="needs root: creates real users and groups and runs the daemon as one of them",
)


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


@dataclass
class Accounts:
    """Throwaway users and groups with unique names; ``remove_all`` deletes them."""

    users: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)

    def group(self) -> str:
        name = "obhg" + secrets.token_hex(4)
        _run("groupadd", "--system", name)
        self.groups.append(name)
        return name

    def user(self, *groups: str, home: Path | None = None) -> str:
        name = "obh" + secrets.token_hex(4)
        argv = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin"]
        if home is not None:
            argv += ["--home-dir", str(home)]
        if groups:
            argv += ["--groups", ",".join(groups)]
        _run(*argv, "--user-group", name)
        self.users.append(name)
        return name

    def remove_all(self) -> list[str]:
        """Remove everything; return what could not be removed."""
        left: list[str] = []
        for name in reversed(self.users):
            if subprocess.run(["userdel", name], capture_output=True, check=False).returncode:
                left.append(name)
        for name in reversed(self.groups):
            if subprocess.run(["groupdel", name], capture_output=True, check=False).returncode:
                left.append(name)
        self.users.clear()
        self.groups.clear()
        return left


def as_user(user: str, argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as ``user`` with that user's groups only (never root's)."""
    entry = pwd.getpwnam(user)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/", "LANG": "C.UTF-8"}
    env.update(kw.pop("env", {}))
    return subprocess.run(
        argv,
        user=entry.pw_uid,
        group=entry.pw_gid,
        extra_groups=os.getgrouplist(user, entry.pw_gid),
        env=env,
        cwd=str(kw.pop("cwd", REPO)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        **kw,
    )


def probe(user: str, name: str, args: dict[str, Any]) -> Any:
    """Run one of ``tests/hosted/probes.py`` as ``user``; its JSON answer."""
    python, env = python_for(user)
    argv = [python, "-m", "tests.hosted.probes", name, json.dumps(args)]
    done = as_user(user, argv, env=dict(env))
    if done.returncode != 0:
        raise AssertionError(f"probe {name} as {user} failed:\n{done.stderr}")
    return json.loads(done.stdout)


@dataclass
class HostedBox:
    root: Path
    daemon_user: str
    tunnel_user: str
    agent_user: str
    operator: str
    outsider: str
    operators_group: str
    pool_group: str
    pool_users: list[str]
    credential: Path
    tmux_socket: Path
    daemon: RunningDaemon
    accounts: Accounts
    config: dict[str, dict[str, Any]]

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A tmux command against the agents' server, as the agent user."""
        return as_user(
            self.agent_user,
            ["tmux", "-S", str(self.tmux_socket), *args],
            env={"HOME": str(self.root / "agent-home"), "SHELL": "/bin/sh"},
        )

    def restart_daemon(self) -> None:
        """Stop the daemon and start it again on the same state, socket and port."""
        assert self.daemon.stop() == 0, self.daemon.log()
        self.daemon = start_daemon(
            self.root / "daemon", self.config, user=self.daemon_user, port=self.daemon.port
        )

    def worker_pids(self) -> list[int]:
        pid = self.daemon.process.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return [pid, *(int(c) for c in children)]


def _start_agent_tmux(box_root: Path, agent: str, daemon_user: str, sock: Path) -> None:
    """The agents' server started in the agent user's 0700 home (``WorkingDirectory=~`` in
    ``openbus-agent.service``), so its first pane sits where the daemon's user cannot look."""
    entry = pwd.getpwnam(agent)
    run_dir, home = sock.parent, box_root / "agent-home"
    for path, mode in ((run_dir, 0o750), (home, 0o700)):
        path.mkdir()
        os.chown(path, entry.pw_uid, entry.pw_gid)
        path.chmod(mode)
    env = {"HOME": str(home), "SHELL": "/bin/sh"}
    base = ["tmux", "-S", str(sock)]
    steps = [
        [*base, "-f", str(AGENT_TMUX_CONF), "new-session", "-d", "-s", "agents"],
        ["chmod", "0660", str(sock)],
        [*base, "server-access", "-a", daemon_user],
    ]
    for argv in steps:
        done = as_user(agent, argv, env=env, cwd=home)
        if done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} as {agent} failed: {done.stderr}")


def _pool(box_root: Path, accounts: Accounts, group: str) -> list[str]:
    """The pool's users, each with a private home (the harness's config lives there)."""
    users: list[str] = []
    for i in range(POOL_SIZE):
        home = box_root / "pool-home" / str(i)
        home.mkdir(parents=True)
        name = accounts.user(group, home=home)
        entry = pwd.getpwnam(name)
        os.chown(home, entry.pw_uid, entry.pw_gid)
        home.chmod(0o700)
        users.append(name)
    (box_root / "pool-home").chmod(0o755)
    return users


def render_sudoers(agent_user: str, pool_group: str, daemon_user: str, tunnel_user: str) -> str:
    """``deploy/sudoers.d/openbus`` with this box's names."""
    text = SUDOERS.read_text()
    text = text.replace("%openbus-agents", "%" + pool_group)
    text = text.replace("OPENBUS_POOL", "OPENBUS_POOL_" + secrets.token_hex(4).upper())
    text = re.sub(r"!openbus-tunnel\b", "!" + tunnel_user, text)
    text = re.sub(r"\bopenbus-agent\b(?!s)", agent_user, text)
    return re.sub(r"!openbus\b(?!-)", "!" + daemon_user, text)


def install_sudoers(text: str) -> Path:
    path = Path("/etc/sudoers.d") / ("openbus-test-" + secrets.token_hex(4))
    staged = path.with_name("." + path.name)
    staged.write_text(text)
    staged.chmod(0o440)
    checked = subprocess.run(["visudo", "-cf", str(staged)], capture_output=True, text=True)
    if checked.returncode != 0:
        staged.unlink()
        raise AssertionError(f"visudo refused the rendered sudoers file: {checked.stderr}")
    staged.rename(path)
    return path


def _write_credential(directory: Path, tunnel_user: str) -> tuple[Path, Path]:
    """The tunnel's Ed25519 credential (0400, its user's, in a 0700 dir) and public key."""
    entry = pwd.getpwnam(tunnel_user)
    key = Ed25519PrivateKey.generate()
    secrets_dir = directory / "secrets"
    secrets_dir.mkdir(parents=True)
    credential = secrets_dir / "credential.key"
    credential.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    for path, mode in ((credential, 0o400), (secrets_dir, 0o700)):
        os.chown(path, entry.pw_uid, entry.pw_gid)
        path.chmod(mode)
    public = directory / "tunnel.pub"
    public.write_bytes(public_key_pem(key))
    public.chmod(0o444)
    return credential, public


def mcp_initialize(box: HostedBox, token: str) -> int:
    """The agents' port answers an MCP ``initialize`` with ``token``: its status."""
    with httpx.Client(base_url=box.daemon.base_url, timeout=10) as agent_side:
        answer = agent_side.post(
            "/mcp",
            headers={
                "authorization": f"Bearer {token}",
                "accept": "application/json, text/event-stream",
                "content-type": "application/json",
            },
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "0"},
                },
            },
        )
    return answer.status_code


@pytest.fixture(scope="module")
def box() -> Iterator[HostedBox]:
    with hosted_box("pool") as made:
        yield made


@pytest.fixture(scope="module")
def shared_box() -> Iterator[HostedBox]:
    """A box whose agents all run as the agents' tmux server's user (``shared`` mode)."""
    with hosted_box("shared") as made:
        yield made


@contextlib.contextmanager
def hosted_box(isolation: str) -> Iterator[HostedBox]:
    if os.geteuid() != 0:
        skip_missing("root", "needs root: creates real users and groups")
    accounts = Accounts()
    root = Path(tempfile.mkdtemp(prefix="openbus-hosted-", dir="/tmp"))
    root.chmod(0o755)
    tmux_socket = root / "agent-run" / "tmux.sock"
    daemon: RunningDaemon | None = None
    hosted_box: HostedBox | None = None
    agent = ""
    sudoers: Path | None = None
    pool_users: list[str] = []
    try:
        operators = accounts.group()
        agent = accounts.user()
        daemon_user = accounts.user(agent)  # like `m openbus openbus-agent`
        tunnel_user = accounts.user()
        operator = accounts.user(operators)
        outsider = accounts.user()
        pool_group = accounts.group()
        pool_users = _pool(root, accounts, pool_group)
        if shutil.which("sudo") is None or shutil.which("visudo") is None:
            skip_missing("root", "the agent pool needs sudo (apt-get install sudo)")
        sudoers = install_sudoers(render_sudoers(agent, pool_group, daemon_user, tunnel_user))
        tunnel_dir = root / "tunnel"
        tunnel_dir.mkdir(mode=0o755)
        credential, public = _write_credential(tunnel_dir, tunnel_user)
        _start_agent_tmux(root, agent, daemon_user, tmux_socket)
        (root / "daemon").mkdir(mode=0o755)
        hosted: dict[str, dict[str, Any]] = {
            "hosted": {
                "enabled": True,
                "tunnel_user": tunnel_user,
                "agent_user": agent,
                "operators_group": operators,
                "tunnel_public_key": str(public),
                "agent_pool_group": pool_group,
                "agent_isolation": isolation,
            },
            "tmux": {"socket": str(tmux_socket)},
            "policy": signed_policy(root / "org"),
            "launchers.fakeclaude": {"harness": "claude", "argv": FAKE_AGENT},
            "launchers.hangupproof": {"harness": "claude", "argv": HANGUP_PROOF_AGENT},
        }
        daemon = start_daemon(root / "daemon", hosted, user=daemon_user)
        hosted_box = HostedBox(
            root=root,
            daemon_user=daemon_user,
            tunnel_user=tunnel_user,
            agent_user=agent,
            operator=operator,
            outsider=outsider,
            operators_group=operators,
            pool_group=pool_group,
            pool_users=pool_users,
            credential=credential,
            tmux_socket=tmux_socket,
            daemon=daemon,
            accounts=accounts,
            config=hosted,
        )
        yield hosted_box
    finally:
        if hosted_box is not None:  # its daemon, restarted or not
            daemon = hosted_box.daemon
        if daemon is not None and daemon.process.poll() is None:
            daemon.stop()
            if daemon.process.poll() is None:
                os.killpg(daemon.process.pid, signal.SIGKILL)
        if agent and tmux_socket.exists():
            as_user(agent, ["tmux", "-S", str(tmux_socket), "kill-server"])
        for user in [agent, *pool_users] if agent else pool_users:
            _until_nothing_runs(user)
        if sudoers is not None:
            sudoers.unlink(missing_ok=True)
        left = accounts.remove_all()
        shutil.rmtree(root, ignore_errors=True)
        assert not left, f"could not remove {left}"


@pytest.fixture
def pam_service() -> Iterator[str]:
    """A PAM service like the one deploy/install writes, minus its group check."""
    name = "openbus-test-" + secrets.token_hex(4)
    path = Path("/etc/pam.d") / name
    path.write_text("@include common-auth\n@include common-account\n")
    try:
        yield name
    finally:
        path.unlink(missing_ok=True)


def _until_nothing_runs(user: str) -> None:
    """Wait for ``user``'s processes to end on their tmux server's hangup; one slow to (a real
    harness on a loaded host) or that ignores it is killed, so the account can go."""
    try:
        wait_until(lambda: not _has_processes(user), timeout=10, what=f"{user}'s agents to exit")
    except Timeout:
        subprocess.run(["pkill", "-KILL", "-u", user], check=False)
        wait_until(
            lambda: not _has_processes(user), timeout=10, what=f"{user}'s killed agents to exit"
        )


def _has_processes(user: str) -> bool:
    uid = pwd.getpwnam(user).pw_uid
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    return True
            except FileNotFoundError:
                continue
    return False
