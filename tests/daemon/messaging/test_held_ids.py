"""Message ids held in the state database: the sweep that runs every second writes nothing
while no id's hour can be over, and deletes each id at the end of its hour."""

from __future__ import annotations

from pathlib import Path

from openbus.daemon.core.messaging import MessageBook, MessageLimits, Recipient, Target
from openbus.daemon.messaging.held_ids import RECHECK_SECONDS, HeldIds
from openbus.daemon.state import StateDB
from openbus.kernel.testing import FixedClock
from tests.daemon.core.helpers import admit
from tests.support.grants import run_write
from tests.support.sql import statements

TO = Recipient("%2", "inc-b", "p_b", "claude", "agent:claude:b")


def held_on(tmp_path: Path) -> tuple[StateDB, HeldIds, MessageBook, FixedClock]:
    clock = FixedClock()
    db = StateDB(tmp_path / "state.db")
    return db, HeldIds(db), MessageBook(clock, MessageLimits()), clock


def hold(db: StateDB, ids: HeldIds, book: MessageBook, message_id: str) -> None:
    admission = admit(
        book,
        sender="p_a",
        sender_actor="agent:claude:a",
        message_id=message_id,
        text="hello",
        target=Target(pane=TO.pane, incarnation=TO.incarnation),
        recipient=TO,
        pair_approved=True,
        control=False,
    )
    run_write(db, ids.admitted(admission.message))


def stored(db: StateDB) -> list[str]:
    return [m for (m,) in db.conn.execute("SELECT message_id FROM message_ids").fetchall()]


def test_no_id_past_its_hour_means_no_statement_each_second(tmp_path: Path) -> None:
    db, ids, book, clock = held_on(tmp_path)
    assert statements(db, lambda: ids.release_due(clock.now()))  # learns what is stored
    hold(db, ids, book, "m-1")
    for _ in range(int(RECHECK_SECONDS) - 1):
        clock.advance(1)
        assert statements(db, lambda: ids.release_due(clock.now())) == []
    assert stored(db) == ["m-1"]


def test_an_id_is_deleted_at_the_end_of_its_hour_and_may_be_used_again(tmp_path: Path) -> None:
    db, ids, book, clock = held_on(tmp_path)
    ids.release_due(clock.now())
    hold(db, ids, book, "m-1")
    (expires,) = db.conn.execute("SELECT expires FROM message_ids").fetchone()
    clock.advance(expires - clock.now() - 1)
    ids.release_due(clock.now())
    assert stored(db) == ["m-1"]
    clock.advance(1)
    ids.release_due(clock.now())
    assert stored(db) == []
    hold(db, ids, MessageBook(clock, MessageLimits()), "m-1")  # its key is free again
    assert stored(db) == ["m-1"]
