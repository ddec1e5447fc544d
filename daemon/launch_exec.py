"""``python -m openbus.daemon.launch_exec ENVFILE -- ARGV...``: the tiny exec wrapper a launch
runs in its new tmux pane when the tmux server is the daemon's own user's.

The daemon writes the launch's environment (the launcher's ``env`` and, when connected, the
per-launch token) to a 0600 JSON file; this wrapper reads it, unlinks it at once, adds it to
its environment and replaces itself with the harness (``execvpe``, same pid). So the token
never appears in any process's argv (world-readable in /proc), not even tmux's own client,
and never in tmux's environment tables; it lives only in the harness's environment, which
only its own user can read. The file is refused unless it belongs to this user, is a regular
file and is readable by nobody else. Standard library only, to start fast.

On a hosted box no wrapper runs: the daemon hands the environment to the agents' tmux server
over its control client's stdin, and in pool mode sudo keeps exactly those variables and
execs the harness under the agent's pool user (``launch_plan.as_pool_user``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import sys
from collections.abc import Sequence

EXIT_STATUS = 127
# The wrapper's own failure, with its exit status: tmux 3.3a often keeps a dead pane with no
# status at all (its pty closed before the exit was reaped), so the launch reads it from here.
FAILED_STATUS = re.compile(r"^openbus launch \(exit status (\d+)\): ", re.MULTILINE)


def fail(message: str) -> int:
    print(f"openbus launch (exit status {EXIT_STATUS}): {message}", file=sys.stderr)
    return EXIT_STATUS


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
