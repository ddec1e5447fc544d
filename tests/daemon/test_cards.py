"""Consent cards on a real state database: the expiry sweep that runs every second asks the
database only once a card can have expired, and still resolves every card on its second."""

from __future__ import annotations

from pathlib import Path

from openbus.daemon.cards import RECHECK_SECONDS, Cards
from openbus.daemon.state import StateDB
from openbus.kernel.testing import FixedClock, SeededRandom
from tests.support.grants import run_write
from tests.support.sql import statements


def cards_on(tmp_path: Path) -> tuple[StateDB, Cards, FixedClock]:
    db = StateDB(tmp_path / "state.db")
    clock = FixedClock()
    return db, Cards(db, clock, SeededRandom(3)), clock


def new_card(db: StateDB, cards: Cards, ttl: float) -> str:
    card, write = cards.new(
        kind="message", requester="agent:claude:a", owner="alice", summary="A asks B", ttl=ttl
    )
    run_write(db, write)
    return card.id


def test_an_idle_sweep_asks_the_database_nothing_until_the_recheck(tmp_path: Path) -> None:
    db, cards, clock = cards_on(tmp_path)
    assert statements(db, cards.expired_unresolved)  # the first sweep learns what is stored
    for _ in range(int(RECHECK_SECONDS) - 1):
        clock.advance(1)
        assert statements(db, cards.expired_unresolved) == []
    clock.advance(1)
    assert statements(db, cards.expired_unresolved)


def test_a_card_is_resolved_by_the_sweep_on_the_second_it_expires(tmp_path: Path) -> None:
    db, cards, clock = cards_on(tmp_path)
    cards.expired_unresolved()
    card = new_card(db, cards, ttl=30)
    clock.advance(29)
    assert statements(db, cards.expired_unresolved) == []
    clock.advance(1)
    assert [c.id for c in cards.expired_unresolved()] == [card]


def test_a_card_stored_before_the_daemon_started_is_resolved_by_its_first_sweep(
    tmp_path: Path,
) -> None:
    db, cards, clock = cards_on(tmp_path)
    card = new_card(db, cards, ttl=5)
    clock.advance(10)
    again = Cards(db, clock, SeededRandom(4))  # a new lifetime: nothing known in memory
    assert [c.id for c in again.expired_unresolved()] == [card]


def test_a_card_left_unresolved_keeps_the_sweep_asking(tmp_path: Path) -> None:
    """A sweep whose record of an expired card failed leaves it pending: the next second asks
    again, as every second did before the sweep learned to wait."""
    db, cards, clock = cards_on(tmp_path)
    card = new_card(db, cards, ttl=5)
    clock.advance(5)
    assert [c.id for c in cards.expired_unresolved()] == [card]  # (its record not written)
    clock.advance(1)
    assert [c.id for c in cards.expired_unresolved()] == [card]


def test_a_later_card_does_not_hide_a_sooner_one(tmp_path: Path) -> None:
    db, cards, clock = cards_on(tmp_path)
    cards.expired_unresolved()
    late = new_card(db, cards, ttl=50)
    soon = new_card(db, cards, ttl=20)
    clock.advance(20)
    [expired] = cards.expired_unresolved()
    assert expired.id == soon
    _draft, writes = cards.resolution_record(expired)  # as the sweep records it
    for write in writes:
        run_write(db, write)
    clock.advance(1)  # the second after a sweep with work asks again, and learns the next
    assert cards.expired_unresolved() == []
    clock.advance(28)
    assert statements(db, cards.expired_unresolved) == []
    clock.advance(1)
    assert [c.id for c in cards.expired_unresolved()] == [late]
