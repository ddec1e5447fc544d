"""The real daemon as a subprocess (gunicorn, one worker) for integration tests."""

from __future__ import annotations

import atexit
import functools
import os
import pwd
import signal
import site
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from openbus.daemon import web_access
from openbus.daemon.config import load_config
from tests.support.wait import wait_until


def free_port(other_than: int | None = None) -> int:
    """A port free on 127.0.0.1 now, never ``other_than`` (a port already picked, not yet
    bound, which the kernel may hand out again)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port != other_than:
            return port


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def write_config(path: Path, sections: Mapping[str, Mapping[str, Any]]) -> Path:
    lines: list[str] = []
    for name, values in sections.items():
        lines.append(f"[{name}]")
        lines.extend(f"{key} = {toml_value(value)}" for key, value in values.items())
        lines.append("")
    path.write_text("\n".join(lines))
    return path


AUDIT_PAGE = 1000


@dataclass
class RunningDaemon:
    process: subprocess.Popen[bytes]
    config_path: Path
    socket_path: Path
    port: int
    state_dir: Path
    log_path: Path
    spawned: tuple[list[str], dict[str, str], dict[str, Any]] = ([], {}, {})

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def human(self, timeout: float = 10.0) -> httpx.Client:
        """A client on the human side (unix socket), as the current user."""
        return httpx.Client(
            transport=httpx.HTTPTransport(uds=str(self.socket_path)),
            base_url="http://openbus",
            timeout=timeout,
        )

    def audit(self) -> list[dict[str, Any]]:
        """Every audit record, page by page (a test that polls the audit adds a record a
        read, so the first page alone can stop short of the record it waits for)."""
        records: list[dict[str, Any]] = []
        with self.human() as client:
            while True:
                params = {"after": records[-1]["seq"] if records else 0, "limit": AUDIT_PAGE}
                page = client.get("/api/audit", params=params).json()["records"]
                records.extend(page)
                if len(page) < AUDIT_PAGE:
                    return records

    def agent_side(self, timeout: float = 10.0) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=timeout)

    def cli(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        check: bool = False,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "openbus.daemon.cli", *args, "--config", str(self.config_path)]
        result = subprocess.run(
            cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=timeout
        )
        if check and result.returncode != 0:
            raise AssertionError(f"openbus {' '.join(args)} failed: {result.stderr}")
        return result

    def web_url(self) -> str:
        """The web page's address this start printed (with its secret)."""
        config = load_config(str(self.config_path))
        return web_access.login_url(config, web_access.read_secret(config))

    def web_base(self) -> str:
        return web_access.base_url(load_config(str(self.config_path)))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout)


def _healthy(daemon: RunningDaemon) -> bool:
    if daemon.process.poll() is not None:
        raise AssertionError(
            f"daemon exited early with {daemon.process.returncode}:\n{daemon.log()}"
        )
    if not daemon.socket_path.exists():
        return False
    # a plain request on a socket of our own: a socket file left by a killed daemon refuses,
    # and httpx's unix transport does not close its socket when a connect fails
    with socket.socket(socket.AF_UNIX) as probe:
        probe.settimeout(2)
        try:
            probe.connect(str(daemon.socket_path))
            probe.sendall(b"GET /healthz HTTP/1.0\r\nHost: openbus\r\n\r\n")
            status = probe.recv(64).split(b"\r\n", 1)[0].split()
        except OSError:
            return False
    return status[1:2] == [b"200"]


REPO = Path(__file__).resolve().parents[2]


@functools.cache
def python_for(user: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """An interpreter ``user`` may run with this project importable, and the environment it
    needs: this one when the user can execute it; otherwise (a pyenv under a 0700 /root) the
    system's Python of the same minor version with our site-packages on ``PYTHONPATH``."""
    entry = pwd.getpwnam(user)
    ids: dict[str, Any] = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
    try:
        subprocess.run(
            [sys.executable, "-c", "import httpx"], check=True, capture_output=True, **ids
        )
    except (PermissionError, subprocess.CalledProcessError):
        pass
    else:
        return sys.executable, ()
    system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    if not system.exists():
        raise AssertionError(f"{user} cannot run {sys.executable} and there is no {system}")
    paths = [*site.getsitepackages(), str(REPO)]
    for place in paths:
        _let_others_traverse(Path(place))
    return str(system), (("PYTHONPATH", os.pathsep.join(paths)),)


def _let_others_traverse(path: Path) -> None:
    """A checkout in a private directory (``mktemp -d`` is 0700) cannot be imported by another
    user: let others list the import path entry itself and search (x, not read) each ancestor
    that lacks it, and put the modes back when the test run ends."""
    for directory, wanted in [(path, 0o005), *((parent, 0o001) for parent in path.parents)]:
        mode = stat.S_IMODE(directory.stat().st_mode)
        if mode & wanted != wanted:
            directory.chmod(mode | wanted)
            atexit.register(directory.chmod, mode)


def _as_user(user: str, dirs: list[Path]) -> dict[str, Any]:
    """Popen arguments running the daemon as ``user`` (its own groups only), and the
    directories it writes made its own (0700); the test dir must be traversable by it."""
    entry = pwd.getpwnam(user)
    for path in dirs:
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, entry.pw_uid, entry.pw_gid)
        path.chmod(0o700)
    return {
        "user": entry.pw_uid,
        "group": entry.pw_gid,
        "extra_groups": os.getgrouplist(user, entry.pw_gid),
    }


def start_daemon(
    tmp: Path,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
    user: str | None = None,
    serve: Sequence[str] = ("-m", "openbus.daemon.cli", "serve"),
) -> RunningDaemon:
    """Start the daemon; with ``user`` (tests run as root) it runs as that system user.
    ``serve`` is how the interpreter is told to serve (a bench serves its own app factory)."""
    port = port or free_port()
    state = tmp / "state"
    sock = tmp / "run" / "daemon.sock"
    sections: dict[str, dict[str, Any]] = {
        "daemon": {
            "listen": f"127.0.0.1:{port}",
            "socket": str(sock),
            "state_dir": str(state),
            "web_listen": f"127.0.0.1:{free_port(other_than=port)}",
        },
    }
    for name, values in (extra or {}).items():
        sections.setdefault(name, {}).update(values)
    config_path = write_config(tmp / "openbus.toml", sections)
    (tmp / "daemon.log").unlink(missing_ok=True)
    identity: dict[str, Any] = {}
    base_env = {**os.environ, "XDG_STATE_HOME": str(tmp / "xdg-state")}
    python = sys.executable
    if user is not None:
        config_path.chmod(0o644)
        identity = _as_user(user, [state, sock.parent, tmp / "xdg-state"])
        python, python_env = python_for(user)
        base_env.update(python_env, HOME=str(state))
    argv = [python, *serve, "--config", str(config_path)]
    return _spawn(argv, {**base_env, **(env or {})}, identity, config_path, sock, port, state)


def _spawn(
    argv: list[str],
    env: Mapping[str, str],
    identity: Mapping[str, Any],
    config_path: Path,
    sock: Path,
    port: int,
    state: Path,
) -> RunningDaemon:
    log_path = config_path.parent / "daemon.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
            **identity,
        )
    daemon = RunningDaemon(process, config_path, sock, port, state, log_path)
    daemon.spawned = (argv, dict(env), dict(identity))
    try:
        wait_until(lambda: _healthy(daemon), timeout=60, what="the daemon to answer /healthz")
    except BaseException:
        daemon.stop(signal.SIGKILL)
        raise
    return daemon


def restart_daemon(daemon: RunningDaemon, sig: int = signal.SIGTERM) -> RunningDaemon:
    """Stop ``daemon`` and start it again on the same config, state and port (the caller
    stops the one returned)."""
    daemon.stop(sig)
    argv, env, identity = daemon.spawned
    return _spawn(
        argv, env, identity, daemon.config_path, daemon.socket_path, daemon.port, daemon.state_dir
    )


@contextmanager
def running_daemon(
    tmp: Path,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    env: Mapping[str, str] | None = None,
    user: str | None = None,
    serve: Sequence[str] = ("-m", "openbus.daemon.cli", "serve"),
) -> Iterator[RunningDaemon]:
    daemon = start_daemon(tmp, extra, env, user=user, serve=serve)
    try:
        yield daemon
    finally:
        if daemon.process.poll() is None:
            daemon.stop()
            if daemon.process.poll() is None:
                os.killpg(daemon.process.pid, signal.SIGKILL)
