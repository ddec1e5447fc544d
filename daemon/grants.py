"""Principals and grants in the state database.

One immutable principal per launch token. Before its session id is known the principal is
bound to the pane and process it was launched into (``agent:<harness>:pane:<pane>:<pid>``);
once the session id is seen it is attached as an alias, once and atomically, and the binding
is itself an audit record. Grants (the preset) live on the principal; scope is looked up on
every call and capped by the org policy, so revoking or narrowing takes effect on the next
call. Only the token's hash is stored.

Grants follow the session: a principal bound to a session whose process exits is
*suspended*, not deleted (its token is refused, its preset kept). When that session is
resumed, the resumed process's new token *rejoins* the same principal (``rejoin``: a new
token hash, the old one dead), so message ids, counters and approvals keyed on the principal
carry over. A principal never bound to a session is revoked at exit: a new agent in a
recycled pane finds nothing to inherit. One (harness, session id) has at most one principal
that is not revoked (a unique index).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from openbus.daemon.core import tokens
from openbus.daemon.core.actors import CONTROL, Actor, agent_pane, agent_session
from openbus.daemon.state import StateDB
from openbus.kernel.clock import Clock, Random
from openbus.kernel.errors import Conflict, NotConnected, NotFound
from openbus.kernel.scopes import Preset, Scope, effective_scopes

CapLookup = Callable[[str], Preset]
CONTROL_ROLE = "control"

_FIELDS = (
    "id",
    "harness",
    "launcher",
    "owner",
    "session_id",
    "pane_id",
    "pid",
    "pid_start",
    "incarnation",
    "preset",
    "state",
    "created",
    "updated",
    "role",
)
_COLUMNS = ", ".join(_FIELDS)


@dataclass(frozen=True)
class Principal:
    id: str
    harness: str
    launcher: str | None
    owner: str
    session_id: str | None
    pane_id: str | None
    pid: int | None
    pid_start: str | None  # the process's start time (/proc/<pid>/stat field 22)
    incarnation: str | None
    preset: Preset
    state: str
    created: float
    updated: float
    role: str | None = None  # "control" for the control session's principal; else None

    @property
    def is_control(self) -> bool:
        return self.role == CONTROL_ROLE

    @property
    def active(self) -> bool:
        return self.state == "active"

    def actor(self) -> Actor:
        if self.is_control:
            return CONTROL
        if self.session_id:
            return agent_session(self.harness, self.session_id, self.id)
        return agent_pane(self.harness, self.pane_id or "%0", self.pid or 0, self.id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "principal": self.id,
            "harness": self.harness,
            "launcher": self.launcher,
            "owner": self.owner,
            "session_id": self.session_id,
            "pane_id": self.pane_id,
            "pid": self.pid,
            "incarnation": self.incarnation,
            "preset": self.preset.value,
            "state": self.state,
        }


def _row(row: tuple[Any, ...]) -> Principal:
    fields = dict(zip(_FIELDS, row, strict=True))
    fields["preset"] = Preset(fields["preset"])
    return Principal(**fields)


class Grants:
    def __init__(self, db: StateDB, clock: Clock, random: Random, *, cap_for: CapLookup) -> None:
        self.db = db
        self.clock = clock
        self.random = random
        self.cap_for = cap_for  # the owner's cap under the org policy, on every scope check
        # Writes run that bind a principal to a pane or unbind it (attach, rejoin), counted as
        # they run, and each owner's panes as read at a count: a hosted view is built on every
        # listing and agent call, and an owner's principals are every agent they ever launched.
        self._bindings = 0
        self._owned: dict[str, tuple[int, frozenset[tuple[str, str]]]] = {}

    # ------------------------------------------------------------------ reads

    def get(self, principal_id: str) -> Principal:
        row = self.db.conn.execute(
            f"SELECT {_COLUMNS} FROM principals WHERE id = ?", (principal_id,)
        ).fetchone()
        if row is None:
            raise NotFound(f"no such principal {principal_id}")
        return _row(row)

    def by_token(self, token: str) -> Principal | None:
        if not tokens.well_formed(token):
            return None
        row = self.db.conn.execute(
            f"SELECT {_COLUMNS} FROM principals WHERE token_hash = ?", (tokens.token_hash(token),)
        ).fetchone()
        return _row(row) if row else None

    def by_pane(self, pane_id: str) -> list[Principal]:
        rows = self.db.conn.execute(
            f"SELECT {_COLUMNS} FROM principals "
            "WHERE pane_id = ? AND state = 'active' ORDER BY created",
            (pane_id,),
        ).fetchall()
        return [_row(r) for r in rows]

    def revoked_on_pane(self, pane_id: str, owner: str) -> bool:
        """Whether ``owner`` launched an agent into ``pane_id`` whose token has been revoked."""
        row = self.db.conn.execute(
            "SELECT 1 FROM principals WHERE pane_id = ? AND owner = ? AND state = 'revoked' "
            "LIMIT 1",
            (pane_id, owner),
        ).fetchone()
        return row is not None

    def panes_owned_by(self, owner: str) -> frozenset[tuple[str, str]]:
        """(pane id, incarnation) of every agent ``owner`` launched, whatever its state: read
        again only after a write that binds or unbinds a pane has run (the count is taken
        before the read, so a write run meanwhile makes the next call read again)."""
        bindings = self._bindings
        kept = self._owned.get(owner)
        if kept is not None and kept[0] == bindings:
            return kept[1]
        rows = self.db.conn.execute(
            "SELECT pane_id, incarnation FROM principals "
            "WHERE owner = ? AND pane_id IS NOT NULL AND incarnation IS NOT NULL",
            (owner,),
        ).fetchall()
        owned = frozenset((str(pane), str(incarnation)) for pane, incarnation in rows)
        self._owned[owner] = (bindings, owned)
        return owned

    def by_session(self, harness: str, session_id: str) -> Principal | None:
        """The principal (active or suspended) that holds this session's grant, if any."""
        row = self.db.conn.execute(
            f"SELECT {_COLUMNS} FROM principals WHERE harness = ? AND session_id = ? "
            "AND state IN ('active', 'suspended')",
            (harness, session_id),
        ).fetchone()
        return _row(row) if row else None

    def control(self) -> Principal | None:
        """The active control principal, if the control session runs (read again only after
        a write: control's tick asks each second)."""
        return self.db.kept("control principal", self._control)

    def _control(self) -> Principal | None:
        row = self.db.conn.execute(
            f"SELECT {_COLUMNS} FROM principals WHERE role = ? AND state = 'active' "
            "ORDER BY created DESC LIMIT 1",
            (CONTROL_ROLE,),
        ).fetchone()
        return _row(row) if row else None

    def active(self) -> list[Principal]:
        """The active principals (read again only after a write: the launch sweep asks each
        second)."""
        return list(self.db.kept("active principals", self._active))

    def _active(self) -> tuple[Principal, ...]:
        rows = self.db.conn.execute(
            f"SELECT {_COLUMNS} FROM principals WHERE state = 'active'"
        ).fetchall()
        return tuple(_row(r) for r in rows)

    def scopes_for(self, actor: Actor) -> frozenset[Scope]:
        """The scopes the agent holds right now: its preset under the owner's cap."""
        if actor.principal is None:
            return frozenset()
        row = self.db.conn.execute(
            "SELECT preset, state, owner FROM principals WHERE id = ?", (actor.principal,)
        ).fetchone()
        if row is None or row[1] != "active":
            return frozenset()
        return effective_scopes(Preset(row[0]), self.cap_for(row[2]))

    def authenticate(self, token: str) -> Principal:
        principal = self.by_token(token)
        if principal is None or not principal.active:
            raise NotConnected("not connected")
        return principal

    # ------------------------------------------------------------------ writes (queued callbacks)

    def mint(
        self,
        *,
        harness: str,
        owner: str,
        preset: Preset,
        launcher: str | None,
        session_id: str | None = None,
        role: str | None = None,
    ) -> tuple[str, str, Callable[[sqlite3.Connection], None]]:
        """A fresh principal and token. Returns (principal id, token, write). Only the control
        session's start passes ``role="control"``: no grant or preset ever makes one."""
        principal_id = "p_" + self.random.token_bytes(12).hex()
        token = tokens.mint(self.random)
        digest = tokens.token_hash(token)
        now = self.clock.now()

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"INSERT INTO principals ({_COLUMNS}, token_hash) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    principal_id,
                    harness,
                    launcher,
                    owner,
                    session_id,
                    None,
                    None,
                    None,
                    None,
                    preset.value,
                    "active",
                    now,
                    now,
                    role,
                    digest,
                ),
            )

        return principal_id, token, write

    def attach_pane(
        self, principal_id: str, pane_id: str, pid: int, pid_start: str | None, incarnation: str
    ) -> Callable[[sqlite3.Connection], None]:
        """Bind the principal to the process it was launched into: pid plus start time."""
        now = self.clock.now()

        def write(conn: sqlite3.Connection) -> None:
            self._bindings += 1  # run, even if rolled back: the next owners' read reads again
            conn.execute(
                "UPDATE principals SET pane_id = ?, pid = ?, pid_start = ?, incarnation = ?, "
                "updated = ? WHERE id = ?",
                (pane_id, pid, pid_start, incarnation, now, principal_id),
            )

        return write

    def bind_session(
        self, principal_id: str, session_id: str
    ) -> Callable[[sqlite3.Connection], None]:
        """Attach the session id as the principal's alias, once. Rebinding elsewhere is refused."""
        current = self.get(principal_id)
        if current.session_id not in (None, session_id):
            raise Conflict(f"principal {principal_id} is already bound to another session")
        now = self.clock.now()

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE principals SET session_id = ?, updated = ? "
                "WHERE id = ? AND (session_id IS NULL OR session_id = ?)",
                (session_id, now, principal_id, session_id),
            )

        return write

    def set_preset(self, principal_id: str, preset: Preset) -> Callable[[sqlite3.Connection], None]:
        now = self.clock.now()

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE principals SET preset = ?, updated = ? WHERE id = ?",
                (preset.value, now, principal_id),
            )

        return write

    def suspend(self, principal_id: str) -> Callable[[sqlite3.Connection], None]:
        """Its process exited: the token is refused, the grant waits for a resume."""
        now = self.clock.now()

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE principals SET state = 'suspended', updated = ? "
                "WHERE id = ? AND state = 'active'",
                (now, principal_id),
            )

        return write

    def rejoin(self, principal_id: str) -> tuple[str, Callable[[sqlite3.Connection], None]]:
        """A new token for the same principal (its session is being resumed): the old token is
        dead from the commit on, the grant active again, the process attached afterwards."""
        token = tokens.mint(self.random)
        digest = tokens.token_hash(token)
        now = self.clock.now()

        def write(conn: sqlite3.Connection) -> None:
            self._bindings += 1
            done = conn.execute(
                "UPDATE principals SET token_hash = ?, state = 'active', pane_id = NULL, "
                "pid = NULL, pid_start = NULL, incarnation = NULL, updated = ? "
                "WHERE id = ? AND state IN ('active', 'suspended')",
                (digest, now, principal_id),
            )
            if done.rowcount != 1:
                raise Conflict(f"principal {principal_id} was revoked; it cannot be resumed")

        return token, write

    def revoke(self, principal_id: str) -> Callable[[sqlite3.Connection], None]:
        now = self.clock.now()

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE principals SET state = 'revoked', preset = 'off', updated = ? WHERE id = ?",
                (now, principal_id),
            )

        return write
