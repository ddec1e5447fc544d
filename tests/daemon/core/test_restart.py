"""The restart-to-connect record: its moves, its persistence, and how recovery finishes it."""

from __future__ import annotations

import pytest

from openbus.daemon.core.restart import (
    MOVES,
    Event,
    PaneSeen,
    RestartRecord,
    Step,
    recover,
)
from openbus.kernel.errors import InvalidTransition

RECORD = RestartRecord(
    pane="%3",
    incarnation="%3:100:555",
    pid=100,
    pid_start="555",
    remain_on_exit=None,
    harness="claude",
    session_id="s-1",
    launcher="claude",
    preset="observe",
    owner="root",
    cwd="/work",
)
SEQUENCE = (Event.HOLD, Event.EXIT, Event.ENDED, Event.RESPAWN, Event.RESTORE, Event.BIND)


def at(step: Step) -> RestartRecord:
    record = RECORD
    for event in SEQUENCE:
        if record.step is step:
            return record
        record = record.advance(event)
    assert record.step is step
    return record


def test_the_sequence_runs_planned_to_closed_in_order_and_nothing_else_moves() -> None:
    record = RECORD
    seen = [record.step]
    for event in (*SEQUENCE, Event.CLOSE):
        record = record.advance(event)
        seen.append(record.step)
    assert seen == [
        Step.PLANNED,
        Step.HELD,
        Step.EXITING,
        Step.EXITED,
        Step.RESPAWNED,
        Step.RESTORED,
        Step.BOUND,
        Step.CLOSED,
    ]
    assert not record.open
    with pytest.raises(InvalidTransition):
        RECORD.advance(Event.RESPAWN)  # never respawn a pane whose agent was not asked to quit
    with pytest.raises(InvalidTransition):
        record.advance(Event.FAIL)  # a closed record stays closed


def test_every_open_step_can_fail_into_recovery_which_keeps_where_it_was() -> None:
    for step in (Step.PLANNED, Step.HELD, Step.EXITING, Step.EXITED, Step.RESPAWNED):
        failed = at(step).advance(Event.FAIL, outcome="timeout")
        assert failed.step is Step.RECOVERING and failed.reached is step
        assert failed.advance(Event.CLOSE).step is Step.CLOSED
    assert all(target in Step for target in MOVES.values())


def test_a_record_survives_its_json_round_trip_at_every_step() -> None:
    for step in (Step.PLANNED, Step.EXITED, Step.BOUND):
        record = at(step)
        assert RestartRecord.from_json(record.to_json()) == record
    failed = at(Step.EXITING).advance(Event.FAIL)
    assert RestartRecord.from_json(failed.to_json()) == failed


def test_recovery_respawns_a_dead_pane_at_whatever_step_it_died() -> None:
    for step in (Step.PLANNED, Step.HELD, Step.EXITING, Step.EXITED):
        plan = recover(at(step), PaneSeen(exists=True, dead=True))
        assert plan.respawn and plan.attach and plan.restore_option


def test_recovery_leaves_the_agent_it_was_restarting_alone_when_it_still_runs() -> None:
    running = PaneSeen(exists=True, pid=100, pid_start="555")
    for step in (Step.PLANNED, Step.HELD):
        plan = recover(at(step), running)
        assert not plan.respawn and not plan.attach and plan.restore_option
        assert "left running" in plan.outcome and not plan.await_exit


def test_recovery_waits_for_an_agent_already_told_to_quit_then_respawns_it() -> None:
    running = PaneSeen(exists=True, pid=100, pid_start="555")
    plan = recover(at(Step.EXITING).advance(Event.FAIL), running)
    assert plan.await_exit and plan.respawn and plan.restore_option


def test_recovery_attaches_a_respawned_process_only_after_the_exit_was_typed() -> None:
    other = PaneSeen(exists=True, pid=200, pid_start="777")
    assert recover(at(Step.EXITED), other).attach
    assert recover(at(Step.RESPAWNED).advance(Event.FAIL), other).attach
    held = recover(at(Step.HELD), other)  # someone else's process: nothing is attached to it
    assert not held.attach and not held.respawn and held.restore_option


def test_a_pane_that_is_gone_needs_nothing_but_closing() -> None:
    plan = recover(at(Step.EXITED), PaneSeen(exists=False))
    assert not plan.respawn and not plan.attach and not plan.restore_option
