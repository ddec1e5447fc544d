"""``python -m openbus.daemon.launch_exec ENVFILE -- ARGV...``: the tiny exec wrapper a launch
runs in its new tmux pane when the tmux server is the daemon's own user's.

The daemon writes the launch's environment (the launcher's ``env`` and, when connected, the
per-launch token) to a 0600 JSON file; this wrapper reads it, unlinks it at once, adds it to
its environment and replaces itself with the harness (``execvpe``, same pid). So the token
never appears in any process's argv (world-readable in /proc), not even tmux's own client,
and never in tmux's environment tables; it lives only in the harness's environment, which
only its own user can read. The file is refused unless it belongs to this user, is a regular
file and is readable by nobody else. Standard library only, to start fast.

When it cannot start the harness it prints why and exits, but only once the terminal has read
that line (bounded, ``SETTLE_SECONDS``): tmux 3.3a drops a pane's unread output when it reaps
the exit first (it closes the pty on the exit, fixed upstream after 3.3a), so the launch would
read an empty last screen. The wrapper asks the terminal where its cursor is (``CSI 6 n``)
and waits for the answer, which a terminal sends only after reading what came before.

On a hosted box no wrapper runs: the daemon hands the environment to the agents' tmux server
over its control client's stdin, and in pool mode sudo keeps exactly those variables and
execs the harness under the agent's pool user (``launch_plan.as_pool_user``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import stat
import sys
import termios
import time
from collections.abc import Sequence

EXIT_STATUS = 127
SETTLE_SECONDS = 2.0
CURSOR_QUERY = b"\x1b[6n"
# The wrapper's own failure, with its exit status: tmux 3.3a often keeps a dead pane with no
# status at all (its pty closed before the exit was reaped), so the launch reads it from here.
FAILED_STATUS = re.compile(r"^openbus launch \(exit status (\d+)\): ", re.MULTILINE)


def fail(message: str) -> int:
    print(f"openbus launch (exit status {EXIT_STATUS}): {message}", file=sys.stderr, flush=True)
    with contextlib.suppress(OSError, ValueError):  # (stdin or stderr without a descriptor)
        settled(sys.stdin.fileno(), sys.stderr.fileno(), SETTLE_SECONDS)
    return EXIT_STATUS


def settled(tty_in: int, tty_out: int, timeout: float) -> bool:
    """True once the terminal on ``tty_out`` has read everything written to it before: it
    answers a cursor-position query, read from ``tty_in`` (without echo, not line by line)
    within ``timeout`` seconds. False at once when either is not a terminal."""
    if not (os.isatty(tty_in) and os.isatty(tty_out)):
        return False
    try:
        saved = termios.tcgetattr(tty_in)
    except termios.error:
        return False
    quiet = list(saved)
    quiet[3] &= ~(termios.ICANON | termios.ECHO)
    quiet[6] = list(saved[6])
    quiet[6][termios.VMIN], quiet[6][termios.VTIME] = 1, 0
    deadline = time.monotonic() + timeout
    try:
        termios.tcsetattr(tty_in, termios.TCSANOW, quiet)
        os.write(tty_out, CURSOR_QUERY)
        answer = b""
        while not answer.endswith(b"R"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([tty_in], [], [], left)[0]:
                return False
            chunk = os.read(tty_in, 64)
            if not chunk:
                return False
            answer += chunk
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(tty_in, termios.TCSANOW, saved)


def read_env_file(path: str) -> dict[str, str]:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("the launch environment is not a regular file")
        if info.st_uid != os.getuid():
            raise ValueError("the launch environment belongs to another user")
        if info.st_mode & 0o077:
            raise ValueError("the launch environment is readable by others")
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = json.loads(handle.read(1024 * 1024).decode("utf-8"))
    finally:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    env = data.get("env") if isinstance(data, dict) else None
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise ValueError("the launch environment is malformed")
    return env


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[1] != "--":
        return fail("usage: python -m openbus.daemon.launch_exec ENVFILE -- ARGV...")
    path, command = args[0], args[2:]
    try:
        extra = read_env_file(path)
    except (OSError, ValueError) as exc:
        return fail(f"cannot read the launch environment: {exc}")
    env = dict(os.environ)
    env.update(extra)
    try:
        os.execvpe(command[0], command, env)  # noqa: S606 - the launcher's own argv, no shell
    except OSError as exc:
        # the pane is kept (remain-on-exit, set as tmux made it) with this line for the launch
        # to report; it closes the pane once read
        return fail(f"cannot start {command[0]}: {exc.strerror}")


if __name__ == "__main__":
    sys.exit(main())
