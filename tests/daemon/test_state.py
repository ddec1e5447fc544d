"""The state database: what the daemon asks of it every second or on every listing is found
through an index, however many principals were launched and ended before (the table keeps
them all), so neither the idle daemon nor a directory read grows with the box's history."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from openbus.daemon.control.threads import ThreadStore
from openbus.daemon.core.threads import Entry, EntryKind, RequestState
from openbus.daemon.grants import Grants
from openbus.daemon.launch_records import LaunchRecords
from openbus.daemon.state import StateDB
from openbus.kernel.testing import FixedClock, SeededRandom
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

    plans = _plans(
        db,
        [
            grants.active,  # the launch sweep, every second (after a write: else it is kept)
            grants.control,  # control's tick and every directory listing (the same)
            lambda: grants.by_pane("%7"),
            lambda: grants.revoked_on_pane("%7", "alice"),
            lambda: grants.panes_owned_by("bob"),  # a hosted user's view
        ],
    )

    assert len(grants.active()) == 3
    assert grants.control() is not None
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


def test_the_reads_each_second_asks_are_asked_again_only_after_a_row_has_changed(
    tmp_path: Path,
) -> None:
    db, grants = state_grants(tmp_path, 1)
    records = LaunchRecords(db, FixedClock(), SeededRandom(2))
    first = launched(db, grants, "alice", "%1", "inc-1", "control")
    launch, add = records.add(**LAUNCH, principal=first)
    run_write(db, add)

    def second() -> object:  # what the launch sweep and control's tick ask
        return (grants.active(), grants.control(), records.live())

    assert len(statements(db, second)) == 3
    assert statements(db, lambda: [second() for _ in range(5)]) == []  # nothing written since
    other = launched(db, grants, "bob", "%2", "inc-2")
    assert [p.owner for p in grants.active()] == ["alice", "bob"]
    run_write(db, grants.revoke(first))
    run_write(db, records.set_state(launch, "exited"))
    assert ([p.id for p in grants.active()], grants.control(), records.live()) == (
        [other],
        None,
        [],
    )


def test_a_read_inside_a_transaction_is_not_kept_so_a_write_rolled_back_is_not_seen_after(
    tmp_path: Path,
) -> None:
    db, grants = state_grants(tmp_path, 1)
    first = launched(db, grants, "alice", "%1", "inc-1")
    assert [p.id for p in grants.active()] == [first]
    db.conn.execute("BEGIN IMMEDIATE")
    grants.revoke(first)(db.conn)
    assert grants.active() == []  # the transaction's own write, read back
    db.conn.execute("ROLLBACK")
    assert [p.id for p in grants.active()] == [first]


LAUNCH = {
    "owner": "alice",
    "launcher": "claude",
    "harness": "claude",
    "cwd": "/tmp",
    "session_id": None,
    "pane_id": "%1",
    "pid": 4242,
    "pid_start": "1",
    "server": None,
}
