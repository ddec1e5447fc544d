"""A real daemon on a private tmux server, with fake structured launchers, for the MCP tests.

The fake launchers are structured (harness ``claude`` / ``codex``) but run ``sleep`` through
``sh -c``, so the injected flags land in ``$0 $1 ...`` and are ignored: the pane's process
lives, holds the token in its environment, and exits when the test kills the pane.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import RunningDaemon, running_daemon
from tests.support.tmux import TmuxServer, tmux_server
from tests.support.wait import wait_until

SLEEPER = ["/bin/sh", "-c", "exec sleep 600", "agent"]


@dataclass
class Fleet:
    daemon: RunningDaemon
    tmux: TmuxServer
    project: Path

    def launch(
        self, launcher: str = "fakeclaude", preset: str = "observe", **extra: Any
    ) -> dict[str, Any]:
        with self.daemon.human() as client:
            response = client.post(
                "/api/launch",
                json={"launcher": launcher, "preset": preset, "cwd": str(self.project), **extra},
            )
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        return body

    def token_of(self, pid: int) -> str:
        return wait_until(
            lambda: read_token(pid), timeout=10, what=f"the token in pid {pid}'s environment"
        )

    def audit(self) -> list[dict[str, Any]]:
        return self.daemon.audit()


def read_token(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    for item in raw.split(b"\0"):
        if item.startswith(b"OPENBUS_TOKEN="):
            return item.split(b"=", 1)[1].decode()
    return None


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    with make_fleet(tmp_path) as made:
        yield made


@contextmanager
def make_fleet(tmp_path: Path, config: dict[str, dict[str, Any]] | None = None) -> Iterator[Fleet]:
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(project),
            "remote",
            "add",
            "origin",
            "https://github.com/acme/widget.git",
        ],
        check=True,
    )
    with tmux_server(tmp_path / "tmux") as tmux:
        extra = {
            "tmux": {"socket": str(tmux.socket)},
            "history": {
                "claude_config_dirs": [str(tmp_path / "claude")],
                "codex_homes": [str(tmp_path / "codex")],
            },
            "launchers.fakeclaude": {"harness": "claude", "argv": SLEEPER},
            "launchers.fakecodex": {"harness": "codex", "argv": SLEEPER},
            "launchers.fakeopencode": {"harness": "opencode", "argv": SLEEPER},
            "launchers.fakegemini": {"harness": "gemini", "argv": SLEEPER},
            "launchers.opaque": {"command": "exec sleep 600"},
            **(config or {}),
        }
        with running_daemon(tmp_path, extra) as daemon:
            yield Fleet(daemon, tmux, project)
