"""Grants: a hosted owner's panes (every agent they ever launched, bound to its pane's
incarnation) are read from the database once, and again after any write that binds or unbinds
a pane, so a view built on every listing and agent call does not re-read that history."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from openbus.daemon.grants import Grants
from openbus.daemon.state import StateDB
from openbus.kernel.scopes import Preset
from openbus.kernel.testing import FixedClock, SeededRandom


def _run(db: StateDB, write: Callable[[sqlite3.Connection], None]) -> None:
    """A write in a transaction of its own, as the gate runs it: rolled back if it fails."""
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        write(db.conn)
    except BaseException:
        db.conn.execute("ROLLBACK")
        raise
    db.conn.execute("COMMIT")


def _launched(db: StateDB, grants: Grants, owner: str, pane: str, incarnation: str) -> str:
    principal, _token, mint = grants.mint(
        harness="claude", owner=owner, preset=Preset.OBSERVE, launcher="claude"
    )
    _run(db, mint)
    _run(db, grants.attach_pane(principal, pane, 4242, "1", incarnation))
    return principal


def test_an_owners_panes_are_read_once_and_again_after_a_pane_is_bound_or_unbound(
    tmp_path: Path,
) -> None:
    db = StateDB(tmp_path / "state.db")
    grants = Grants(db, FixedClock(), SeededRandom(2), cap_for=lambda owner: Preset.COLLABORATE)
    first = _launched(db, grants, "alice", "%1", "inc-1")
    _launched(db, grants, "bob", "%2", "inc-2")
    ran: list[str] = []
    db.conn.set_trace_callback(ran.append)

    assert grants.panes_owned_by("alice") == {("%1", "inc-1")}
    assert grants.panes_owned_by("alice") == {("%1", "inc-1")}
    assert len(ran) == 1  # the second answer is the first one's

    second = _launched(db, grants, "alice", "%3", "inc-3")
    assert grants.panes_owned_by("alice") == {("%1", "inc-1"), ("%3", "inc-3")}

    _run(db, grants.revoke(first))  # a state change alone: the pane stays the owner's
    assert grants.panes_owned_by("alice") == {("%1", "inc-1"), ("%3", "inc-3")}

    _token, rejoin = grants.rejoin(second)  # its session resumes: bound again later
    _run(db, rejoin)
    assert grants.panes_owned_by("alice") == {("%1", "inc-1")}
    assert grants.panes_owned_by("bob") == {("%2", "inc-2")}


def test_a_binding_rolled_back_leaves_no_pane_in_the_owners_answer(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "state.db")
    grants = Grants(db, FixedClock(), SeededRandom(3), cap_for=lambda owner: Preset.COLLABORATE)
    principal, _token, mint = grants.mint(
        harness="claude", owner="alice", preset=Preset.OBSERVE, launcher="claude"
    )
    _run(db, mint)
    assert grants.panes_owned_by("alice") == frozenset()
    attach = grants.attach_pane(principal, "%1", 4242, "1", "inc-1")

    def failing(conn: sqlite3.Connection) -> None:
        attach(conn)
        raise sqlite3.OperationalError("disk I/O error")

    with pytest.raises(sqlite3.OperationalError):
        _run(db, failing)

    assert grants.panes_owned_by("alice") == frozenset()
    _run(db, attach)
    assert grants.panes_owned_by("alice") == {("%1", "inc-1")}
