"""What a piece of code asked of a SQLite database."""

from __future__ import annotations

from collections.abc import Callable

from openbus.daemon.state import StateDB


def statements(db: StateDB, call: Callable[[], object]) -> list[str]:
    """The statements ``call`` ran on ``db``'s connection, as SQLite traced them."""
    ran: list[str] = []
    db.conn.set_trace_callback(ran.append)
    try:
        call()
    finally:
        db.conn.set_trace_callback(None)
    return ran
