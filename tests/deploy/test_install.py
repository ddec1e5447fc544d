"""deploy/install on this machine (root): users, files, units verified, the box started from
its units (as systemd would start them) and reached through its tunnel, then nothing left."""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import re
import secrets
import shutil
import signal
import stat
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.deploy.units import Unit, listen_stream
from tests.support.wait import wait_until
from tests.tunnel.conftest import ThrowawayUsers

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / "deploy" / "install"
POOL = [f"openbus-agent-{i}" for i in range(1, 9)]  # --pool-size's default
USERS = ["openbus", "openbus-tunnel", "openbus-agent", *POOL]
GROUPS = ["openbus", "openbus-tunnel", "openbus-agent", "openbus-operators", "openbus-agents"]
UNITS = [
    "openbus.service",
    "openbus-tunnel.service",
    "openbus-agent.service",
    "openbus-tunnel.socket",
]
STATE = ["/etc/openbus", "/var/lib/openbus", "/var/lib/openbus-tunnel", "/var/lib/openbus-agent"]
INSTALLED = [
    "/opt/openbus",
    "/etc/pam.d/openbus",
    "/etc/sysusers.d/openbus.conf",
    "/etc/tmpfiles.d/openbus.conf",
    "/etc/sysusers.d/openbus-pool.conf",
    "/etc/sudoers.d/openbus",
    *(f"/etc/systemd/system/{u}" for u in UNITS),
    "/run/openbus",
    "/run/openbus-agent",
]

pytestmark = pytest.mark.root


def users_present() -> set[str]:
    return {p.pw_name for p in pwd.getpwall()} & set(USERS)


def groups_present() -> set[str]:
    return {g.gr_name for g in grp.getgrall()} & set(GROUPS)


def snapshot() -> set[str]:
    roots = ["/etc", "/opt", "/var/lib", "/run", "/usr/lib/sysusers.d", "/usr/lib/tmpfiles.d"]
    found: set[str] = set()
    for root in roots:
        for path in Path(root).rglob("*") if Path(root).exists() else []:
            if "openbus" in str(path) or str(path).startswith(
                ("/etc/sysusers.d", "/etc/tmpfiles.d")
            ):
                found.add(str(path))
    return found


def run(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(INSTALL), *args], capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, (
        f"deploy/install {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    )
    return result


def digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def mode_owner(path: str) -> tuple[str, str, str]:
    st = os.stat(path)
    return (
        oct(stat.S_IMODE(st.st_mode)),
        pwd.getpwuid(st.st_uid).pw_name,
        grp.getgrgid(st.st_gid).gr_name,
    )


# Written before a test installs and removed once it has uninstalled: an installation found
# beside it was left by a test run that was killed part-way, and is the tests' own to purge.
MARKER = Path("/var/lib/.openbus-install-under-test")


def existing_installation() -> list[str]:
    paths = [p for p in STATE + INSTALLED if Path(p).exists()]
    return sorted(users_present()) + sorted(groups_present()) + paths


def uninstall() -> None:
    subprocess.run(
        [str(INSTALL), "--uninstall", "--purge"], capture_output=True, text=True, check=False
    )


@contextmanager
def fresh_install(*args: str) -> Iterator[subprocess.CompletedProcess[str]]:
    """deploy/install on a machine without openbus; uninstalled and purged afterwards."""
    if existing_installation() and MARKER.exists():
        uninstall()
    if found := existing_installation():
        pytest.skip(
            "an openbus installation already exists on this machine; not touching it: "
            + ", ".join(found[:6])
        )
    if shutil.which("systemd-sysusers") is None:
        pytest.skip("systemd-sysusers is not installed (make system-deps)")
    MARKER.unlink(missing_ok=True)
    before = snapshot()
    MARKER.write_text("deploy/install run by tests/deploy/test_install.py\n")
    try:
        yield run(*args)
    finally:
        uninstall()
        MARKER.unlink(missing_ok=True)
    assert users_present() == set()
    assert groups_present() == set()
    assert snapshot() - before == set()


@pytest.mark.skipif(os.geteuid() != 0, reason="deploy/install needs root")
@pytest.mark.timeout(900)
def test_install_then_uninstall_leaves_nothing_behind() -> None:
    with fresh_install():
        assert users_present() == set(USERS)
        assert groups_present() == set(GROUPS)
        assert grp.getgrnam("openbus").gr_mem == ["openbus-tunnel"]
        assert grp.getgrnam("openbus-agent").gr_mem == ["openbus"]
        pool_gid = grp.getgrnam("openbus-agents").gr_gid
        assert {pwd.getpwnam(u).pw_gid for u in POOL} == {pool_gid}
        for user in POOL:
            assert mode_owner(f"/var/lib/openbus-agents/{user}") == (
                "0o700",
                user,
                "openbus-agents",
            )
        assert mode_owner("/etc/sudoers.d/openbus") == ("0o440", "root", "root")
        checked = subprocess.run(["visudo", "-c"], capture_output=True, text=True, check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert mode_owner("/etc/openbus/tunnel/credential.key") == (
            "0o400",
            "openbus-tunnel",
            "openbus-tunnel",
        )
        assert mode_owner("/etc/openbus/tunnel/cookie.keys") == (
            "0o400",
            "openbus-tunnel",
            "openbus-tunnel",
        )
        assert mode_owner("/etc/openbus/tunnel/tls.key") == (
            "0o400",
            "openbus-tunnel",
            "openbus-tunnel",
        )
        assert mode_owner("/etc/openbus/tunnel") == ("0o700", "openbus-tunnel", "openbus-tunnel")
        assert mode_owner("/etc/openbus/tunnel.pub") == ("0o444", "root", "openbus")
        assert mode_owner("/var/lib/openbus") == ("0o700", "openbus", "openbus")
        assert Path("/etc/pam.d/openbus").read_text().count("common-auth") == 1
        assert os.access("/opt/openbus/venv/bin/openbus-tunnel", os.X_OK)
        for unit in UNITS:
            verify = subprocess.run(
                ["systemd-analyze", "verify", f"/etc/systemd/system/{unit}"],
                capture_output=True,
                text=True,
                check=False,
            )
            assert verify.returncode == 0 and not verify.stderr.strip(), f"{unit}: {verify.stderr}"
        for unit in UNITS[:3]:
            out = subprocess.run(
                ["systemd-analyze", "security", "--offline=true", f"/etc/systemd/system/{unit}"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout
            match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", out)
            assert match and float(match.group(1)) <= 2.0, out[-400:]

        # Idempotent: a second run keeps the credentials and the config.
        kept = {
            p: digest(p)
            for p in [
                "/etc/openbus/tunnel/credential.key",
                "/etc/openbus/openbus.toml",
                "/etc/openbus/tunnel.pub",
            ]
        }
        run()
        assert {p: digest(p) for p in kept} == kept

        run("--uninstall")
        assert users_present() == set()
        assert groups_present() == set()
        assert [p for p in INSTALLED if Path(p).exists()] == []
        assert all(Path(p).exists() for p in STATE), "state is kept without --purge"


def started(stack: ExitStack, unit: Unit, log: Path, **kw: Any) -> subprocess.Popen[bytes]:
    """The unit's ExecStart running, stopped (its whole process group) when ``stack`` closes."""
    process = unit.start(log=stack.enter_context(log.open("ab")), **kw)

    def stop() -> None:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)

    stack.callback(stop)
    return process


def alive_until(process: subprocess.Popen[bytes], log: Path, ready: Any) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"exited with {process.returncode}:\n{log.read_text()[-3000:]}")
    return bool(ready())


@pytest.mark.skipif(os.geteuid() != 0, reason="deploy/install needs root")
@pytest.mark.timeout(900)
def test_an_installed_box_starts_from_its_units_and_answers_healthz_through_the_tunnel(
    tmp_path: Path,
) -> None:
    with fresh_install() as installed, ExitStack() as stack:
        # no --policy: a single-org key pair and a default policy, and the output says where
        assert "/etc/openbus/org/org.key" in installed.stdout
        assert "/etc/openbus/policy.toml" in installed.stdout
        assert mode_owner("/etc/openbus/org/org.key") == ("0o400", "root", "root")
        assert mode_owner("/etc/openbus/org") == ("0o700", "root", "root")
        for public in ("/etc/openbus/org.pub", "/etc/openbus/policy.toml.sig"):
            assert mode_owner(public) == ("0o444", "root", "openbus")
        units = {name: Unit.read(Path("/etc/systemd/system") / name) for name in UNITS}

        agents = units["openbus-agent.service"]
        tmux = started(stack, agents, tmp_path / "agent.log")
        wait_until(
            lambda: alive_until(
                tmux, tmp_path / "agent.log", Path(agents.argv("ExecStop")[2]).exists
            ),
            timeout=30,
            what="the agents' tmux server",
        )
        post = subprocess.run(
            agents.argv("ExecStartPost"),
            env=agents.environment(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            **agents.credentials(),
        )
        assert post.returncode == 0, post.stderr

        daemon = started(stack, units["openbus.service"], tmp_path / "daemon.log")

        def daemon_answers() -> bool:
            try:
                return httpx.get("http://127.0.0.1:7707/healthz", timeout=5).status_code == 200
            except httpx.TransportError:
                return False

        # its worker built, so the verifier too: a request signed before that is refused
        wait_until(
            lambda: alive_until(daemon, tmp_path / "daemon.log", daemon_answers),
            timeout=60,
            what="the daemon to answer /healthz on its agents' port",
        )
        listening = stack.enter_context(listen_stream(units["openbus-tunnel.socket"]))
        port = listening.getsockname()[1]
        tunnel = started(
            stack, units["openbus-tunnel.service"], tmp_path / "tunnel.log", listening=listening
        )

        password = "pw-" + secrets.token_urlsafe(12)
        people = ThrowawayUsers()
        stack.callback(people.remove_all)
        operator = people.add(password, groups=("openbus-operators",))

        url = "https://127.0.0.1" + ("" if port == 443 else f":{port}")  # the Host it sends
        client = stack.enter_context(httpx.Client(base_url=url, verify=False, timeout=15))

        def signed_in() -> bool:
            try:
                response = client.post(
                    "/login",
                    data={"user": operator, "password": password, "next": "/"},
                    headers={"origin": url},
                )
            except httpx.TransportError:
                return alive_until(tunnel, tmp_path / "tunnel.log", lambda: False)
            assert response.status_code == 303, response.text
            return True

        wait_until(signed_in, timeout=60, what="a sign-in through the tunnel")
        health = client.get("/healthz")
        assert health.status_code == 200, health.text
        assert isinstance(health.json(), dict)
        assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()[-3000:]
