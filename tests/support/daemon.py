"""The real daemon as a subprocess (gunicorn, one worker) for integration tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.wait import wait_until


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


@dataclass
class RunningDaemon:
    process: subprocess.Popen[bytes]
    config_path: Path
    socket_path: Path
    port: int
    state_dir: Path
    log_path: Path

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
    try:
        with daemon.human(timeout=2) as client:
            return client.get("/healthz").status_code == 200
    except httpx.HTTPError:
        return False


def start_daemon(
    tmp: Path,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
) -> RunningDaemon:
    port = port or free_port()
    state = tmp / "state"
    sock = tmp / "run" / "daemon.sock"
    sections: dict[str, dict[str, Any]] = {
        "daemon": {"listen": f"127.0.0.1:{port}", "socket": str(sock), "state_dir": str(state)},
    }
    for name, values in (extra or {}).items():
        sections.setdefault(name, {}).update(values)
    config_path = write_config(tmp / "openbus.toml", sections)
    log_path = tmp / "daemon.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "openbus.daemon.cli", "serve", "--config", str(config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "XDG_STATE_HOME": str(tmp / "xdg-state"), **(env or {})},
            start_new_session=True,
        )
    daemon = RunningDaemon(process, config_path, sock, port, state, log_path)
    try:
        wait_until(lambda: _healthy(daemon), timeout=30, what="the daemon to answer /healthz")
    except BaseException:
        daemon.stop(signal.SIGKILL)
        raise
    return daemon


@contextmanager
def running_daemon(
    tmp: Path,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[RunningDaemon]:
    daemon = start_daemon(tmp, extra, env)
    try:
        yield daemon
    finally:
        if daemon.process.poll() is None:
            daemon.stop()
            if daemon.process.poll() is None:
                os.killpg(daemon.process.pid, signal.SIGKILL)
