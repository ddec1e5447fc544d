"""What the daemon launched, in the state database: one row per process it started.

Every launch (``openbus launch``, a resume, a restart onto a session, a restore) records the
pane and the exact process (pid plus start time), the launcher it came from, the cwd, the
owner, the session id once known (Claude Code's preset one at once; Codex's once its rollout
is seen), its principal when connected, the tmux server it ran on (that server's pid plus start
time) and, on a hosted box in pool mode, the pool user it ran as (a resume runs as that
user). Its state:

* ``live``: the process runs (as far as the last look saw);
* ``exited``: the process ended while its tmux server kept running (the agent quit);
* ``lost``: the tmux server that held it is gone (a reboot, a ``kill-server``): the session
  was live in a pane when the fleet was lost, so ``restore`` offers it;
* ``restored``: a later launch resumed it (restart onto its session, resume, restore).

This is what restart-to-connect reads to reproduce a launch exactly (the launcher's own
environment, never one guessed from /proc) and what restore lists.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from openbus.daemon.state import StateDB
from openbus.kernel.clock import Clock, Random

Write = Callable[[sqlite3.Connection], None]

_FIELDS = (
    "id",
    "owner",
    "launcher",
    "harness",
    "cwd",
    "session_id",
    "principal",
    "pane_id",
    "pid",
    "pid_start",
    "server",
    "state",
    "created",
    "updated",
    "agent_user",
)
_COLUMNS = ", ".join(_FIELDS)


@dataclass(frozen=True)
class LaunchRecord:
    id: str
    owner: str
    launcher: str
    harness: str
    cwd: str | None
    session_id: str | None
    principal: str | None
    pane_id: str
    pid: int
    pid_start: str | None
    server: str | None
    state: str
    created: float
    updated: float
    agent_user: str | None = None  # the pool user it ran as (hosted, pool mode)

    def to_dict(self) -> dict[str, Any]:
        return {
            "launch": self.id,
            "owner": self.owner,
            "launcher": self.launcher,
            "harness": self.harness,
            "cwd": self.cwd,
            "session_id": self.session_id,
            "principal": self.principal,
            "pane": self.pane_id,
            "pid": self.pid,
            "state": self.state,
            "agent_user": self.agent_user,
        }


def _row(row: tuple[Any, ...]) -> LaunchRecord:
    return LaunchRecord(**dict(zip(_FIELDS, row, strict=True)))


class LaunchRecords:
    def __init__(self, db: StateDB, clock: Clock, random: Random) -> None:
        self.db = db
        self.clock = clock
        self.random = random

    def _select(self, where: str, args: tuple[object, ...]) -> list[LaunchRecord]:
        rows = self.db.conn.execute(
            f"SELECT {_COLUMNS} FROM launches WHERE {where} ORDER BY created", args
        ).fetchall()
        return [_row(r) for r in rows]

    def live(self) -> list[LaunchRecord]:
        """The live launches (read again only after a write: the launch sweep asks each
        second)."""
        return list(self.db.kept("live launches", self._live))

    def _live(self) -> tuple[LaunchRecord, ...]:
        return tuple(self._select("state = 'live'", ()))

    def live_in(self, pane_id: str) -> LaunchRecord | None:
        """The newest live launch in ``pane_id`` (the caller checks its process is the pane's)."""
        found = self._select("state = 'live' AND pane_id = ?", (pane_id,))
        return found[-1] if found else None

    def lost(self) -> list[LaunchRecord]:
        return self._select("state = 'lost'", ())

    def of_session(self, harness: str, session_id: str) -> LaunchRecord | None:
        found = self._select("harness = ? AND session_id = ?", (harness, session_id))
        return found[-1] if found else None

    def add(
        self,
        *,
        owner: str,
        launcher: str,
        harness: str,
        cwd: str | None,
        session_id: str | None,
        principal: str | None,
        pane_id: str,
        pid: int,
        pid_start: str | None,
        server: str | None,
        agent_user: str | None = None,
    ) -> tuple[str, Write]:
        launch_id = "l_" + self.random.token_bytes(8).hex()
        now = self.clock.now()
        values = (
            launch_id,
            owner,
            launcher,
            harness,
            cwd,
            session_id,
            principal,
            pane_id,
            pid,
            pid_start,
            server,
            "live",
            now,
            now,
            agent_user,
        )

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"INSERT INTO launches ({_COLUMNS}) VALUES ({','.join('?' * len(_FIELDS))})",
                values,
            )

        return launch_id, write

    def set_state(self, launch_id: str, state: str) -> Write:
        now = self.clock.now()

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE launches SET state = ?, updated = ? WHERE id = ?", (state, now, launch_id)
            )

        return write

    def set_session(self, launch_id: str, session_id: str) -> Write:
        now = self.clock.now()

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE launches SET session_id = ?, updated = ? "
                "WHERE id = ? AND session_id IS NULL",
                (session_id, now, launch_id),
            )

        return write

    def end_session(self, harness: str, session_id: str) -> Write:
        """Every earlier launch of this session is behind a newer one now: not offered again."""
        now = self.clock.now()

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE launches SET state = 'restored', updated = ? "
                "WHERE harness = ? AND session_id = ? AND state IN ('lost', 'exited', 'live')",
                (now, harness, session_id),
            )

        return write
