"""Grants: a hosted owner's panes (every agent they ever launched, bound to its pane's
incarnation) are read from the database once, and again after any write that binds or unbinds
a pane, so a view built on every listing and agent call does not re-read that history."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from openbus.kernel.scopes import Preset
from tests.support.grants import launched, run_write, state_grants


def test_an_owners_panes_are_read_once_and_again_after_a_pane_is_bound_or_unbound(
    tmp_path: Path,
) -> None:
    db, grants = state_grants(tmp_path, 2)
    first = launched(db, grants, "alice", "%1", "inc-1")
    launched(db, grants, "bob", "%2", "inc-2")
    ran: list[str] = []
    db.conn.set_trace_callback(ran.append)

    assert grants.panes_owned_by("alice") == {("%1", "inc-1")}
    assert grants.panes_owned_by("alice") == {("%1", "inc-1")}
    assert len(ran) == 1  # the second answer is the first one's

    second = launched(db, grants, "alice", "%3", "inc-3")
    assert grants.panes_owned_by("alice") == {("%1", "inc-1"), ("%3", "inc-3")}

    run_write(db, grants.revoke(first))  # a state change alone: the pane stays the owner's
    assert grants.panes_owned_by("alice") == {("%1", "inc-1"), ("%3", "inc-3")}

    _token, rejoin = grants.rejoin(second)  # its session resumes: bound again later
    run_write(db, rejoin)
    assert grants.panes_owned_by("alice") == {("%1", "inc-1")}
    assert grants.panes_owned_by("bob") == {("%2", "inc-2")}


def test_a_binding_rolled_back_leaves_no_pane_in_the_owners_answer(tmp_path: Path) -> None:
    db, grants = state_grants(tmp_path, 3)
    principal, _token, mint = grants.mint(
        harness="claude", owner="alice", preset=Preset.OBSERVE, launcher="claude"
    )
    run_write(db, mint)
    assert grants.panes_owned_by("alice") == frozenset()
    attach = grants.attach_pane(principal, "%1", 4242, "1", "inc-1")

    def failing(conn: sqlite3.Connection) -> None:
        attach(conn)
        raise sqlite3.OperationalError("disk I/O error")

    with pytest.raises(sqlite3.OperationalError):
        run_write(db, failing)

    assert grants.panes_owned_by("alice") == frozenset()
    run_write(db, attach)
    assert grants.panes_owned_by("alice") == {("%1", "inc-1")}
