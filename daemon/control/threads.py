"""Threads in the state database: entries written with the audit record of the call that made
them (``Call.write``), read back per thread, per request and per pane."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from openbus.daemon.core.threads import Entry, EntryKind, RequestState
from openbus.daemon.state import StateDB
from openbus.kernel.errors import NotFound

Write = Callable[[sqlite3.Connection], None]

_COLUMNS = "seq, thread, kind, time, actor, text, origin, pane, incarnation, state, details"


def _entry(row: tuple[Any, ...]) -> Entry:
    seq, thread, kind, time, actor, text, origin, pane, incarnation, state, details = row
    return Entry(
        seq=int(seq),
        thread=str(thread),
        kind=EntryKind(kind),
        time=float(time),
        actor=str(actor),
        text=str(text),
        origin=origin,
        pane=pane,
        incarnation=incarnation,
        state=RequestState(state) if state else None,
        details=json.loads(details),
    )


class ThreadStore:
    def __init__(self, db: StateDB) -> None:
        self.db = db
        (last,) = db.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM thread_entries").fetchone()
        self._next = int(last) + 1

    def next_seq(self) -> int:
        """A fresh entry number (numbers a failed call took are simply never used)."""
        seq, self._next = self._next, self._next + 1
        return seq

    def add(self, entry: Entry) -> Write:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"INSERT INTO thread_entries ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    entry.seq,
                    entry.thread,
                    entry.kind.value,
                    entry.time,
                    entry.actor,
                    entry.text,
                    entry.origin,
                    entry.pane,
                    entry.incarnation,
                    entry.state.value if entry.state else None,
                    json.dumps(entry.details, separators=(",", ":")),
                ),
            )

        return write

    def set_state(self, seq: int, state: RequestState) -> Write:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE thread_entries SET state = ? WHERE seq = ?", (state.value, seq))

        return write

    def get(self, seq: int) -> Entry:
        row = self.db.conn.execute(
            f"SELECT {_COLUMNS} FROM thread_entries WHERE seq = ?", (seq,)
        ).fetchone()
        if row is None:
            raise NotFound(f"no request r{seq}", field="thread")
        return _entry(row)

    def request(self, seq: int) -> Entry:
        entry = self.get(seq)
        if entry.kind is not EntryKind.REQUEST:
            raise NotFound(f"r{seq} is not a request", field="thread")
        return entry

    def of_request(self, request_id: str) -> list[Entry]:
        rows = self.db.conn.execute(
            f"SELECT {_COLUMNS} FROM thread_entries WHERE origin = ? ORDER BY seq", (request_id,)
        ).fetchall()
        return [_entry(r) for r in rows]

    def thread(self, thread: str, limit: int = 200) -> list[Entry]:
        rows = self.db.conn.execute(
            f"SELECT {_COLUMNS} FROM thread_entries WHERE thread = ? ORDER BY seq DESC LIMIT ?",
            (thread, limit),
        ).fetchall()
        return [_entry(r) for r in reversed(rows)]

    def for_pane(self, pane: str, limit: int = 50) -> list[Entry]:
        rows = self.db.conn.execute(
            f"SELECT {_COLUMNS} FROM thread_entries WHERE pane = ? ORDER BY seq DESC LIMIT ?",
            (pane, limit),
        ).fetchall()
        return [_entry(r) for r in rows]

    def open_requests(self, limit: int = 50) -> list[Entry]:
        """Requests control has to work out (delegated, not yet handed off or answered)."""
        rows = self.db.conn.execute(
            f"SELECT {_COLUMNS} FROM thread_entries WHERE kind = 'request' AND state = ? "
            "ORDER BY seq LIMIT ?",
            (RequestState.DELEGATED.value, limit),
        ).fetchall()
        return [_entry(r) for r in rows]
