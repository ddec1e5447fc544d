"""A private tmux server per test: ``tmux -S <tmp socket> -f /dev/null``, fixed window size.

The server starts with a small, explicit environment (no inherited TMUX, HOME under the test's
tmp dir, a UTF-8 locale) so panes see only what a test passes them. ``focus-events`` is on so
Claude Code shows no focus-tracking hint.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

WIDTH = 120
HEIGHT = 40


class TmuxServer:
    def __init__(
        self, socket: Path, home: Path, *, width: int = WIDTH, height: int = HEIGHT
    ) -> None:
        self.socket = socket
        self.home = home
        self.width = width
        self.height = height
        self.binary = shutil.which("tmux") or "tmux"
        self.base_env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TERM": "xterm-256color",
            "SHELL": "/bin/sh",
            "USER": os.environ.get("USER", "root"),
        }

    def run(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(
            [self.binary, "-S", str(self.socket), "-f", "/dev/null", *args],
            env=self.base_env,
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args[:1])} failed: {done.stderr.strip()}")
        return done.stdout

    def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.run(
            "new-session", "-d", "-s", "main", "-n", "placeholder",
            "-x", str(self.width), "-y", str(self.height),
            ";", "set", "-g", "focus-events", "on",
            ";", "set", "-g", "default-size", f"{self.width}x{self.height}",
            ";", "set", "-g", "history-limit", "5000",
            ";", "set", "-g", "status", "off",
        )  # fmt: skip

    def new_window(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        *,
        remain_on_exit: bool = True,
    ) -> str:
        """Run ``argv`` in a new window; return its pane id (``%N``). The pane's environment is
        the server's base environment plus ``env``. With ``remain_on_exit`` an exited process
        leaves its last screen."""
        args = ["new-window", "-d", "-P", "-F", "#{pane_id}", "-t", "main"]
        if cwd is not None:
            args += ["-c", str(cwd)]
        for key, value in (env or {}).items():
            args += ["-e", f"{key}={value}"]
        pane = self.run(*args, "--", *argv).strip()
        if remain_on_exit:
            self.run("set-option", "-p", "-t", pane, "remain-on-exit", "on")
        return pane

    def capture(self, pane: str, *, escapes: bool = False) -> str:
        """The visible screen as plain text (``-e``: with SGR escapes)."""
        args = ["capture-pane", "-p", "-t", pane]
        if escapes:
            args.append("-e")
        return self.run(*args)

    def send_text(self, pane: str, text: str) -> None:
        """Type ``text`` literally (no key names interpreted)."""
        self.run("send-keys", "-t", pane, "-l", "--", text)

    def send_keys(self, pane: str, *keys: str) -> None:
        """Send tmux key names such as ``Enter``, ``Escape``, ``C-c``."""
        self.run("send-keys", "-t", pane, *keys)

    def pane_field(self, pane: str, field: str) -> str:
        return self.run("display-message", "-p", "-t", pane, f"#{{{field}}}").strip()

    def pane_pid(self, pane: str) -> int:
        return int(self.pane_field(pane, "pane_pid"))

    def pane_dead(self, pane: str) -> bool:
        return self.pane_field(pane, "pane_dead") == "1"

    def kill_pane(self, pane: str) -> None:
        self.run("kill-pane", "-t", pane, check=False)

    def kill(self) -> None:
        self.run("kill-server", check=False)


@contextmanager
def private_tmux(tmp_path: Path, **size: int) -> Iterator[TmuxServer]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    # A short socket path: unix socket paths are limited to ~107 bytes.
    socket_dir = Path(tempfile.mkdtemp(prefix="obtmux-", dir="/tmp"))
    server = TmuxServer(socket_dir / "sock", tmp_path / "home", **size)
    try:
        server.start()
        yield server
    finally:
        server.kill()
        shutil.rmtree(socket_dir, ignore_errors=True)


@pytest.fixture
def harness_tmux(tmp_path: Path) -> Iterator[TmuxServer]:
    """A private tmux server (own socket, ``-f /dev/null``, 120x40, focus-events on)."""
    with private_tmux(tmp_path) as server:
        yield server
