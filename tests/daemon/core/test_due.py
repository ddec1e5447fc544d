"""When a sweep of stored deadlines can next have work (``core.due``), on exact times."""

from __future__ import annotations

from openbus.daemon.core.due import Due

RECHECK = 60.0


def test_the_first_sweep_is_due_at_once_then_an_empty_store_waits_for_the_recheck() -> None:
    due = Due(recheck=RECHECK)
    assert due.due(0.0)
    due.swept(0.0, None)
    assert not due.due(59.9)
    assert due.due(60.0)


def test_a_deadline_added_is_due_at_its_time_and_not_before() -> None:
    due = Due(recheck=RECHECK)
    due.swept(0.0, None)
    due.added(10.0)
    assert not due.due(9.9)
    assert due.due(10.0)


def test_after_a_sweep_the_soonest_stored_deadline_is_next() -> None:
    due = Due(recheck=RECHECK)
    due.swept(0.0, 25.0)
    assert due.soonest() == 25.0
    due.swept(25.0, 40.0)  # the row at 25 was resolved; the next stored is at 40
    assert (due.due(39.0), due.due(40.0)) == (False, True)


def test_a_deadline_whose_write_had_not_committed_at_a_sweep_stays_until_its_time() -> None:
    due = Due(recheck=RECHECK)
    due.added(30.0)  # its write commits later than the sweep below
    due.swept(5.0, None)  # the store had nothing yet
    assert due.soonest() == 30.0
    due.swept(30.0, None)  # the sweep at its time passed it
    assert due.soonest() == 90.0


def test_an_overdue_row_left_stored_keeps_the_sweep_due() -> None:
    """A row the sweep could not resolve (its record failed) is still stored, overdue: the
    next sweep is due at once, as every sweep was before the bound."""
    due = Due(recheck=RECHECK)
    due.swept(100.0, 95.0)
    assert due.due(100.0)


def test_a_row_stored_after_its_own_deadline_is_seen_within_the_recheck() -> None:
    due = Due(recheck=RECHECK)
    due.added(10.0)
    due.swept(10.0, None)  # its write was still held back at its deadline
    assert not due.due(69.9)
    assert due.due(70.0)  # the row, committed meanwhile, is asked for then
