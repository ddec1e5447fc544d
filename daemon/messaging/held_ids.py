"""The message ids in force, kept in the state database so at most once survives a restart.

Each admitted message's id is inserted (outcome ``queued``) by a write that commits with the
``queued`` audit record, and its final outcome is updated by a write that commits with the
outcome's record: an id is held in the database exactly when the audit log says it was
admitted. A new daemon lifetime reads the rows still within their hour (``held``) and the
book refuses those ids again; the sweep deletes the rows whose hour is over, asking the
database only once one can be (``core.due``): an idle daemon writes nothing each second.
"""

from __future__ import annotations

import sqlite3

from openbus.daemon.core.due import Due
from openbus.daemon.core.messaging import HeldId, Message, Outcome
from openbus.daemon.gate import Write
from openbus.daemon.state import StateDB

# The sweep deletes at least this often, whatever it expects (``core.due``)
RECHECK_SECONDS = 60.0


class HeldIds:
    def __init__(self, db: StateDB) -> None:
        self.db = db
        self._due = Due(recheck=RECHECK_SECONDS)  # when a held id's hour can next be over

    def admitted(self, message: Message) -> Write:
        """Hold ``message``'s id (to commit with its ``queued`` record)."""
        row = (
            message.sender,
            message.message_id,
            message.sender_actor,
            message.recipient.pane,
            message.outcome.value,
            message.expires,
        )
        self._due.added(message.expires)

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO message_ids (principal, message_id, sender_actor, recipient_pane,"
                " outcome, expires) VALUES (?, ?, ?, ?, ?, ?)",
                row,
            )

        return write

    def ended(self, held: HeldId) -> Write:
        """Record an id's final outcome (to commit with the outcome's record)."""
        row = (held.outcome.value, held.sender, held.message_id)

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE message_ids SET outcome = ? WHERE principal = ? AND message_id = ?", row
            )

        return write

    def held(self, now: float) -> list[HeldId]:
        """The ids whose hour is not over, as the last lifetime left them."""
        rows = self.db.conn.execute(
            "SELECT principal, message_id, sender_actor, recipient_pane, outcome, expires"
            " FROM message_ids WHERE expires > ? ORDER BY expires",
            (now,),
        ).fetchall()
        return [HeldId(p, m, a, pane, Outcome(o), e) for p, m, a, pane, o, e in rows]

    def release_due(self, now: float) -> None:
        """Delete the rows whose hour is over (their outcomes are already recorded)."""
        if not self._due.due(now):
            return
        conn = self.db.conn
        conn.execute("DELETE FROM message_ids WHERE expires <= ?", (now,))
        (soonest,) = conn.execute("SELECT MIN(expires) FROM message_ids").fetchone()
        self._due.swept(now, soonest)
