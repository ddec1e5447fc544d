"""A private tmux server for one test (``tmux -S <tmp>/sock -f /dev/null``) and a fake harness.

The fake harness is a small Python program that draws screens like a real harness would, for
deterministic cases: it clears the terminal and prints the screen file named by each line it
reads (``idle``, ``running`` ...) from a folder of screens. Named ``claude`` or ``codex`` on
its command line, it is detected as that harness from the process tree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

FAKE_HARNESS = """\
import sys, pathlib
screens = pathlib.Path(sys.argv[1])
def show(name):
    path = screens / (name + ".txt")
    if not path.exists():
        return
    sys.stdout.write("\\x1b[2J\\x1b[H" + path.read_text(encoding="utf-8").rstrip("\\n"))
    sys.stdout.flush()
show(sys.argv[2] if len(sys.argv) > 2 else "idle")
for line in sys.stdin:
    word = line.strip()
    if word == "exit":
        sys.exit(0)
    show(word)
"""


class Server:
    def __init__(self, root: Path, *, width: int = 120, height: int = 40) -> None:
        self.root = root
        # a short path: unix socket paths are limited to about 100 bytes
        self._sockdir = Path(tempfile.mkdtemp(prefix="obtmux-"))
        self.socket = self._sockdir / "sock"
        self.width = width
        self.height = height
        self.binary = shutil.which("tmux") or "tmux"
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(root),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TERM": "xterm-256color",
            "SHELL": "/bin/sh",
            "PS1": "$ ",
        }

    def run(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(
            [self.binary, "-S", str(self.socket), "-f", "/dev/null", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"tmux {args[0]} failed: {done.stderr.strip()}")
        return done.stdout

    def start(self, argv: Sequence[str] = ("sh",)) -> str:
        """Start the server with one session ``main``; return its first pane id."""
        out = self.run(
            "new-session", "-d", "-s", "main", "-x", str(self.width), "-y", str(self.height),
            "-P", "-F", "#{pane_id}", *argv,
        )  # fmt: skip
        self.run("set", "-g", "remain-on-exit", "off")
        return out.strip()

    def window(
        self, argv: Sequence[str], *, session: str = "main", env: Mapping[str, str] | None = None
    ) -> str:
        args = ["new-window", "-d", "-P", "-F", "#{pane_id}", "-t", f"{session}:"]
        for key, value in (env or {}).items():
            args += ["-e", f"{key}={value}"]
        return self.run(*args, *argv).strip()

    def session(self, name: str, argv: Sequence[str] = ("sh",)) -> str:
        return self.run("new-session", "-d", "-s", name, "-P", "-F", "#{pane_id}", *argv).strip()

    def keys(self, pane: str, *keys: str) -> None:
        self.run("send-keys", "-t", pane, *keys)

    def capture(self, pane: str) -> str:
        return self.run("capture-pane", "-p", "-t", pane)

    def kill(self) -> None:
        self.run("kill-server", check=False)

    def cleanup(self) -> None:
        self.kill()
        shutil.rmtree(self._sockdir, ignore_errors=True)

    def fake_harness(self, name: str, screens: Path, first: str = "idle") -> list[str]:
        """argv running the fake harness as ``name`` (``claude``, ``codex``) over ``screens``."""
        folder = self.root / "bin"
        folder.mkdir(exist_ok=True)
        script = folder / name
        script.write_text(FAKE_HARNESS)
        return [sys.executable, str(script), str(screens), first]


@contextmanager
def tmux_server(root: Path, argv: Sequence[str] = ("sh",)) -> Iterator[Server]:
    root.mkdir(parents=True, exist_ok=True)
    server = Server(root)
    server.start(argv)
    try:
        yield server
    finally:
        server.cleanup()
