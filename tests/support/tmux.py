"""A private tmux server per test (``tmux -S <tmp socket> -f /dev/null``) and a fake harness.

``tmux_server(root)`` starts one with session ``main`` (its first pane runs ``sh``) at a fixed
120x40 with no status line, ``focus-events`` on so Claude Code shows no focus-tracking hint,
and a small, explicit environment (no inherited TMUX, HOME at ``root``, a UTF-8 locale, ``sh``
with a ``$ `` prompt), so panes see only what a test passes them. ``TmuxServer`` drives it:
new windows and sessions, typed text and keys, captures, pane fields, waiting for a screen.

The fake harness is a small Python program that draws screens like a real harness would, for
deterministic cases: it clears the terminal and prints the screen file named by each line it
reads (``idle``, ``running`` ...) from a folder of screens. Named ``claude`` or ``codex`` on
its command line, it is detected as that harness from the process tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from openbus.daemon.launch_proc import ProcessIdentity, end_processes, identity_of, session_members
from tests.support.require import skip_missing
from tests.support.wait import Timeout, wait_until

WIDTH = 120
HEIGHT = 40

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


class TmuxServer:
    def __init__(self, socket: Path, home: Path) -> None:
        self.socket = socket
        self.home = home
        self.binary = shutil.which("tmux") or "tmux"
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TERM": "xterm-256color",
            "SHELL": "/bin/sh",
            "PS1": "$ ",
            "USER": os.environ.get("USER", "root"),
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
            raise RuntimeError(f"tmux {' '.join(args[:1])} failed: {done.stderr.strip()}")
        return done.stdout

    def start(self) -> None:
        """Start the server (again, after ``kill``) with session ``main`` running ``sh``."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.run(
            "new-session", "-d", "-s", "main", "-x", str(WIDTH), "-y", str(HEIGHT), "sh",
            ";", "set", "-g", "focus-events", "on",
            ";", "set", "-g", "default-size", f"{WIDTH}x{HEIGHT}",
            ";", "set", "-g", "history-limit", "5000",
            ";", "set", "-g", "status", "off",
        )  # fmt: skip

    def session(self, name: str, argv: Sequence[str] = ("sh",)) -> str:
        """A new session ``name`` running ``argv``; return its pane id."""
        return self.run("new-session", "-d", "-s", name, "-P", "-F", "#{pane_id}", *argv).strip()

    def new_window(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        *,
        remain_on_exit: bool = False,
    ) -> str:
        """Run ``argv`` in a new window of ``main``; return its pane id (``%N``). The pane's
        environment is the server's plus ``env``. With ``remain_on_exit`` an exited process
        leaves its last screen (and a dead pane) instead of closing the window."""
        args = ["new-window", "-d", "-P", "-F", "#{pane_id}", "-t", "main:"]
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

    def wait_for(
        self, pane: str, *markers: str, timeout: float = 30.0, absent: Sequence[str] = ()
    ) -> str:
        """Wait until the pane shows every marker (and none of ``absent``); return the screen.
        On timeout the assertion message carries the last screen."""
        last = ""

        def shows() -> str:
            nonlocal last
            last = self.capture(pane)
            if all(m in last for m in markers) and not any(a in last for a in absent):
                return last
            return ""

        try:
            return wait_until(shows, timeout=timeout, what=f"pane {pane} to show {markers!r}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- last screen of {pane} ---\n{last}") from None

    def send_text(self, pane: str, text: str) -> None:
        """Type ``text`` literally (no key names interpreted)."""
        self.run("send-keys", "-t", pane, "-l", "--", text)

    def keys(self, pane: str, *keys: str) -> None:
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

    def pane_processes(self) -> list[ProcessIdentity]:
        """The processes running in the live panes (their sessions' members), for what a
        harness that ignores tmux's hangup leaves running to be ended (Gemini CLI does)."""
        listed = self.run("list-panes", "-a", "-F", "#{pane_pid} #{pane_dead}", check=False)
        rows = (line.partition(" ") for line in listed.splitlines())
        leaders = [int(pid) for pid, _, dead in rows if pid.isdigit() and dead != "1"]
        return [m for leader in leaders for m in session_members(leader)]

    def reaped(self, pid: int) -> bool:
        """Whether the pane process ``pid`` is gone, its zombie reaped by this server.

        tmux 3.3a here now and then misses a SIGCHLD (measured: 1 kill in 20 right after a
        control client went away) and leaves its dead child a zombie until the next one; a
        zombie still holds its pid, so this sends the server the SIGCHLD it missed.
        """
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state == "Z":
            os.kill(int(self.run("display-message", "-p", "#{pid}").strip()), signal.SIGCHLD)
        return False

    def fake_harness(self, name: str, screens: Path, first: str = "idle") -> list[str]:
        """argv running the fake harness as ``name`` (``claude``, ``codex``) over ``screens``."""
        folder = self.home / "bin"
        folder.mkdir(exist_ok=True)
        script = folder / name
        script.write_text(FAKE_HARNESS)
        return [sys.executable, str(script), str(screens), first]


@contextmanager
def tmux_server(root: Path) -> Iterator[TmuxServer]:
    """A started private server with HOME at ``root``; killed, its socket removed, at exit."""
    if shutil.which("tmux") is None:
        skip_missing("tmux", "tmux is not installed")
    # A short socket path: unix socket paths are limited to ~107 bytes.
    socket_dir = Path(tempfile.mkdtemp(prefix="obtmux-", dir="/tmp"))
    server = TmuxServer(socket_dir / "sock", root)
    try:
        server.start()
        yield server
    finally:
        members = server.pane_processes()
        server.kill()
        end_leftovers(server.socket)
        if any(identity_of(m.pid) == m for m in members):  # what ignored the hangup
            asyncio.run(end_processes(members))
        shutil.rmtree(socket_dir, ignore_errors=True)


def _on_socket(socket: Path) -> list[int]:
    """tmux processes (the server, control clients a daemon left) naming ``socket``."""
    found = []
    needle = str(socket).encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"tmux") and needle in argv:
            found.append(int(entry.name))
    return found


def end_leftovers(socket: Path) -> None:
    """After ``kill-server``: what still runs on the socket after 5 s is killed. tmux 3.3a's
    server can wait for good on a control client whose daemon died before it (both asleep),
    one leftover pair per test otherwise."""
    try:
        wait_until(lambda: not _on_socket(socket), timeout=5, what="the tmux server gone")
    except Timeout:
        for pid in _on_socket(socket):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
