"""Grants on a real state database, and agents launched into them as the daemon does it."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from openbus.daemon.grants import Grants
from openbus.daemon.state import StateDB
from openbus.kernel.scopes import Preset
from openbus.kernel.testing import FixedClock, SeededRandom


def state_grants(tmp_path: Path, seed: int) -> tuple[StateDB, Grants]:
    """A new state database under ``tmp_path`` and its grants (every owner capped at
    Collaborate)."""
    db = StateDB(tmp_path / "state.db")
    grants = Grants(db, FixedClock(), SeededRandom(seed), cap_for=lambda owner: Preset.COLLABORATE)
    return db, grants


def run_write(db: StateDB, write: Callable[[sqlite3.Connection], None]) -> None:
    """A write in a transaction of its own, as the gate runs it: rolled back if it fails."""
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        write(db.conn)
    except BaseException:
        db.conn.execute("ROLLBACK")
        raise
    db.conn.execute("COMMIT")


def launched(
    db: StateDB,
    grants: Grants,
    owner: str,
    pane: str,
    incarnation: str,
    role: str | None = None,
) -> str:
    """A Claude Code agent ``owner`` launched into ``pane``: minted, then bound to the pane."""
    principal, _token, mint = grants.mint(
        harness="claude", owner=owner, preset=Preset.OBSERVE, launcher="claude", role=role
    )
    run_write(db, mint)
    run_write(db, grants.attach_pane(principal, pane, 4242, "1", incarnation))
    return principal
