"""The agent-user pool's rule: one uid per agent, back to the pool only when nothing of it runs."""

from __future__ import annotations

import pytest

from openbus.daemon.core.agent_pool import HOLD_SECONDS, AgentPool, PoolUser
from openbus.kernel.errors import Conflict

A, B, C = PoolUser(1001, "openbus-agent-1"), PoolUser(1002, "openbus-agent-2"), PoolUser(1003, "c")
NOBODY: frozenset[int] = frozenset()


def pool() -> AgentPool:
    return AgentPool([C, A, B], group="openbus-agents")


def test_users_are_handed_out_lowest_uid_first_and_never_twice_while_held() -> None:
    p = pool()
    assert [p.acquire(NOBODY, NOBODY, 0.0) for _ in range(3)] == [A, B, C]


def test_a_uid_that_runs_anything_is_busy_whoever_launched_it() -> None:
    assert pool().acquire(frozenset({1001, 1002}), NOBODY, 0.0) == C


def test_with_every_user_busy_the_launch_is_refused_naming_the_field() -> None:
    p = pool()
    with pytest.raises(Conflict) as err:
        p.acquire(frozenset({1001, 1002, 1003}), NOBODY, 0.0)
    assert err.value.field == "agent_user"
    assert "openbus-agents" in err.value.message


def test_a_refusal_names_the_users_busy_with_no_live_agent_but_not_one_being_launched() -> None:
    p = pool()
    assert p.acquire(NOBODY, NOBODY, 0.0) == A  # being launched: its uid runs, no record yet
    with pytest.raises(Conflict) as err:
        p.acquire(frozenset({1001, 1002, 1003}), NOBODY, 1.0, live={"c"})
    assert "(openbus-agent-2 runs no agent, only processes an ended agent left running" in (
        err.value.message
    )
    assert "openbus-agent-1" not in err.value.message
    with pytest.raises(Conflict) as err:
        every = {"c", "openbus-agent-1", "openbus-agent-2"}  # A's launch recorded by now
        p.acquire(frozenset({1001, 1002, 1003}), NOBODY, 2.0, live=every)
    assert "left running" not in err.value.message  # each busy user runs a live agent


def test_a_held_user_stays_busy_until_its_uid_runs_then_until_nothing_of_it_runs() -> None:
    p = pool()
    assert p.acquire(NOBODY, NOBODY, 0.0) == A
    p.started(A, 500)
    assert p.acquire(NOBODY, frozenset({500}), 1.0) == B  # sudo has not switched yet
    assert p.acquire(frozenset({1001}), frozenset({500}), 2.0) == C  # A runs
    p.release(B), p.release(C)
    assert p.acquire(frozenset({1001}), frozenset({500}), 3.0) == B  # A still runs
    assert p.acquire(NOBODY, NOBODY, 4.0) == A  # nothing of A runs any more


def test_a_hold_ends_when_the_panes_first_process_is_gone_without_the_uid_ever_running() -> None:
    p = pool()
    p.acquire(NOBODY, NOBODY, 0.0)
    p.started(A, 500)
    assert p.acquire(NOBODY, frozenset({500}), 1.0) == B
    assert p.acquire(NOBODY, NOBODY, 2.0) == A


def test_a_hold_whose_pane_is_never_seen_lapses_only_after_the_hold_time() -> None:
    p = pool()
    p.acquire(NOBODY, NOBODY, 0.0)
    assert p.acquire(NOBODY, NOBODY, HOLD_SECONDS) == B
    assert p.acquire(NOBODY, NOBODY, HOLD_SECONDS + 1) == A


def test_a_failed_launch_gives_its_user_back_at_once() -> None:
    p = pool()
    p.release(p.acquire(NOBODY, NOBODY, 0.0))
    assert p.acquire(NOBODY, NOBODY, 0.0) == A


def test_an_empty_pool_cannot_be_made() -> None:
    with pytest.raises(ValueError, match="openbus-agents"):
        AgentPool([], group="openbus-agents")


def test_a_session_resumes_under_the_user_it_ran_as_or_is_refused_while_that_user_is_busy() -> None:
    p = pool()
    assert p.acquire(NOBODY, NOBODY, 0.0, want="openbus-agent-2") == B  # A is free and lower
    with pytest.raises(Conflict) as held:
        p.acquire(NOBODY, NOBODY, 1.0, want="openbus-agent-2")  # held by the first one
    assert held.value.field == "agent_user" and "still runs" in held.value.message
    with pytest.raises(Conflict) as running:
        p.acquire(frozenset({1003}), NOBODY, 2.0, want="c")
    assert "still runs" in running.value.message
    with pytest.raises(Conflict) as gone:
        p.acquire(NOBODY, NOBODY, 3.0, want="openbus-agent-9")
    assert "no longer in the pool" in gone.value.message
    assert p.acquire(NOBODY, NOBODY, 4.0) == A  # a named one is no other launch's
