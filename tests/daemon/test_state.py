"""The state database: what the daemon asks of it every second or on every listing is found
through an index, however many principals were launched and ended before (the table keeps
them all), so neither the idle daemon nor a directory read grows with the box's history."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from openbus.daemon.control.threads import ThreadStore
from openbus.daemon.core.threads import Entry, EntryKind, RequestState
from openbus.daemon.grants import Grants
from openbus.daemon.state import StateDB
from tests.support.grants import launched, run_write, state_grants
from tests.support.sql import statements


def _history(db: StateDB, grants: Grants, ended: int) -> None:
    """``ended`` principals launched into panes and revoked, two active ones, one control."""
    for n in range(ended + 3):
        role = "control" if n == ended + 2 else None
        principal = launched(db, grants, "alice", f"%{n % 50}", f"inc-{n}", role)
        if n < ended:
            run_write(db, grants.revoke(principal))


def _plans(db: StateDB, calls: list[Callable[[], object]]) -> list[str]:
    """The query plan of every statement the calls ran, as SQLite explains it."""
    ran = statements(db, lambda: [call() for call in calls])
    plans = []
    for sql in ran:
        steps = db.conn.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
        plans.append(f"{sql}\n  " + "\n  ".join(str(step[-1]) for step in steps))
    return plans


def test_the_principals_asked_for_every_second_and_on_every_listing_are_sought_not_scanned(
    tmp_path: Path,
) -> None:
    db, grants = state_grants(tmp_path, 1)
    _history(db, grants, ended=300)
    assert len(grants.active()) == 3
    assert grants.control() is not None

    plans = _plans(
        db,
        [
            grants.active,  # the launch sweep, every second
            grants.control,  # control's tick and every directory listing
            lambda: grants.by_pane("%7"),
            lambda: grants.revoked_on_pane("%7", "alice"),
            lambda: grants.panes_owned_by("bob"),  # a hosted user's view
        ],
    )

    assert len(plans) == 5
    scans = [plan for plan in plans if "SCAN principals" in plan]
    assert scans == [], "\n".join(scans)


def test_controls_open_requests_are_sought_among_every_entry_of_its_threads(
    tmp_path: Path,
) -> None:
    db = StateDB(tmp_path / "state.db")
    threads = ThreadStore(db)
    with db.conn:
        for n in range(200):
            kind = EntryKind.REQUEST if n % 2 == 0 else EntryKind.REPLY
            state = RequestState.DELEGATED if n == 198 else RequestState.ANSWERED
            entry = Entry(
                seq=threads.next_seq(),
                thread="human:alice",
                kind=kind,
                time=float(n),
                actor="human:alice",
                text=f"request {n}",
                state=state if kind is EntryKind.REQUEST else None,
            )
            threads.add(entry)(db.conn)

    plans = _plans(db, [threads.open_requests])

    assert [e.text for e in threads.open_requests()] == ["request 198"]
    assert len(plans) == 1
    assert "SCAN thread_entries" not in plans[0], plans[0]
