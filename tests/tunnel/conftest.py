"""Real users, a real PAM service file, the real tunnel subprocess, a recording upstream."""

from __future__ import annotations

import asyncio
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from tests.support.daemon import free_port
from tests.support.policy import signed_policy
from tests.support.wait import wait_until

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: creates real users and a PAM service"
)

RELEASE_TIMEOUT = 60.0


def _run(*argv: str, stdin: str | None = None) -> None:
    subprocess.run(argv, input=stdin, text=True, check=True, capture_output=True)


@dataclass
class ThrowawayUsers:
    created: list[str] = field(default_factory=list)

    def add(self, password: str | None = None, groups: tuple[str, ...] = ()) -> str:
        name = "obt" + secrets.token_hex(4)
        _run(
            "useradd",
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            "--user-group",
            *(("--groups", ",".join(groups)) if groups else ()),
            name,
        )
        self.created.append(name)
        if password is not None:
            _run("chpasswd", stdin=f"{name}:{password}\n")
        return name

    def remove_all(self) -> None:
        for name in self.created:
            subprocess.run(["userdel", name], capture_output=True, check=False)
        self.created.clear()


@pytest.fixture
def users() -> Iterator[ThrowawayUsers]:
    made = ThrowawayUsers()
    try:
        yield made
    finally:
        made.remove_all()
        for name in list(made.created):
            assert name not in {p.pw_name for p in pwd.getpwall()}


@pytest.fixture
def pam_service() -> Iterator[str]:
    """A PAM service like the one deploy/install writes (auth and account via the system's)."""
    name = "openbus-test-" + secrets.token_hex(4)
    path = Path("/etc/pam.d") / name
    path.write_text("@include common-auth\n@include common-account\n")
    try:
        yield name
    finally:
        path.unlink(missing_ok=True)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A temporary directory other users can traverse (pytest's own is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="openbus-tunnel-test-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------- upstream


@dataclass
class Recorded:
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes


class RecordingUpstream:
    """An ASGI server on a unix socket standing in for the daemon: it records each request.

    ``/events`` answers with a server-sent event stream: one event, then it waits for
    ``release`` before the second, so the test can prove the first arrived while the
    stream was still open.
    """

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.requests: list[Recorded] = []
        self.release = threading.Event()
        config = uvicorn.Config(
            self.app,
            uds=str(socket_path),
            interface="asgi3",
            lifespan="off",
            log_config=None,
            access_log=False,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        target = scope["raw_path"].decode() + (
            ("?" + scope["query_string"].decode()) if scope["query_string"] else ""
        )
        self.requests.append(
            Recorded(
                scope["method"],
                target,
                [(k.decode(), v.decode()) for k, v in scope["headers"]],
                body,
            )
        )
        if scope["path"] == "/events":
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream"),
                        (b"cache-control", b"no-cache"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b"data: one\n\n", "more_body": True})
            # the test sets it (or __exit__ does); bounded, so a test that never does ends
            await asyncio.to_thread(self.release.wait, RELEASE_TIMEOUT)
            await send({"type": "http.response.body", "body": b"data: two\n\n", "more_body": False})
            return
        payload = b'{"ok": true}'
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})

    def __enter__(self) -> RecordingUpstream:
        self.thread.start()
        wait_until(lambda: self.server.started, timeout=10, what="the recording upstream to start")
        self.socket_path.chmod(0o666)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.should_exit = True
        self.thread.join(timeout=10)


# --------------------------------------------------------------------------- the tunnel


@dataclass
class RunningTunnel:
    process: subprocess.Popen[bytes]
    port: int
    config_path: Path
    public_key: Path
    log_path: Path

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def client(self, **kw: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, verify=False, timeout=15, **kw)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def login(self, client: httpx.Client, user: str, password: str) -> httpx.Response:
        return client.post(
            "/login",
            data={"user": user, "password": password, "next": "/"},
            headers={"origin": self.url},
        )


def write_tunnel_config(
    directory: Path, *, port: int, daemon_socket: Path, pam_service: str, run_as: str, **extra: Any
) -> Path:
    lines = [
        "[tunnel]",
        f'listen = "127.0.0.1:{port}"',
        f'tls_cert = "{directory}/secrets/tls.crt"',
        f'tls_key = "{directory}/secrets/tls.key"',
        f'daemon_socket = "{daemon_socket}"',
        f'credential = "{directory}/secrets/credential.key"',
        f'cookie_key = "{directory}/secrets/cookie.keys"',
        f'pam_service = "{pam_service}"',
        f'run_as = "{run_as}"',
    ]
    for key, value in extra.items():
        lines.append(f"{key} = {value!r}" if not isinstance(value, str) else f'{key} = "{value}"')
    path = directory / "tunnel.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def start_tunnel(
    directory: Path, *, daemon_socket: Path, pam_service: str, run_as: str, **extra: Any
) -> RunningTunnel:
    port = free_port()
    config = write_tunnel_config(
        directory,
        port=port,
        daemon_socket=daemon_socket,
        pam_service=pam_service,
        run_as=run_as,
        **extra,
    )
    public_key = directory / "tunnel.pub"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "openbus.tunnel.cli",
            "init",
            "--config",
            str(config),
            "--public-key",
            str(public_key),
            "--hostname",
            "localhost",
        ],
        check=True,
        capture_output=True,
    )
    entry = pwd.getpwnam(run_as)
    secrets_dir = directory / "secrets"
    os.chown(secrets_dir, entry.pw_uid, entry.pw_gid)
    secrets_dir.chmod(0o700)
    for item in secrets_dir.iterdir():
        os.chown(item, entry.pw_uid, entry.pw_gid)
    log_path = directory / "tunnel.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "openbus.tunnel.cli", "serve", "--config", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    tunnel = RunningTunnel(process, port, config, public_key, log_path)

    def answering() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"tunnel exited with {process.returncode}:\n{tunnel.log()}")
        try:
            with tunnel.client() as c:
                return c.get("/login").status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(answering, timeout=30, what="the tunnel to serve /login")
    except BaseException:
        stop_tunnel(tunnel)
        raise
    return tunnel


def stop_tunnel(tunnel: RunningTunnel) -> None:
    if tunnel.process.poll() is None:
        tunnel.process.send_signal(signal.SIGTERM)
        try:
            tunnel.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(tunnel.process.pid, signal.SIGKILL)
            tunnel.process.wait(timeout=5)


def hosted_pair(
    base: Path, *, tunnel_user: str, pam_service: str
) -> tuple[Path, Path, Path, dict[str, dict[str, Any]]]:
    """The tunnel's secrets (made first, so the daemon starts with its public key) and the
    hosted daemon's config sections. Returns (daemon dir, tunnel dir, daemon socket, sections)."""
    daemon_dir, tunnel_dir = base / "daemon", base / "tunnel"
    daemon_dir.mkdir(mode=0o755)
    tunnel_dir.mkdir(mode=0o755)
    sock = daemon_dir / "run" / "daemon.sock"
    config = write_tunnel_config(
        tunnel_dir, port=1, daemon_socket=sock, pam_service=pam_service, run_as=tunnel_user
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "openbus.tunnel.cli",
            "init",
            "--config",
            str(config),
            "--public-key",
            str(tunnel_dir / "tunnel.pub"),
            "--hostname",
            "localhost",
        ],
        check=True,
        capture_output=True,
    )
    sections: dict[str, dict[str, Any]] = {
        "hosted": {
            "enabled": True,
            "tunnel_user": tunnel_user,
            "tunnel_public_key": str(tunnel_dir / "tunnel.pub"),
            "operators_group": tunnel_user,
            "agent_isolation": "shared",  # these boxes launch no agents
        },
        "policy": signed_policy(base / "org"),
    }
    return daemon_dir, tunnel_dir, sock, sections
