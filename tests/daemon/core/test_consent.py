"""Cards: a small state machine where every state but pending is final."""

from __future__ import annotations

import pytest

from openbus.daemon.core.consent import CardState, Decision, new_card, parse_decision
from openbus.kernel.errors import BadRequest, Conflict, Forbidden


def card(now: float = 100.0, ttl: float = 60.0, kind: str = "message"):  # type: ignore[no-untyped-def]
    return new_card(
        card_id="c1",
        kind=kind,
        requester="agent:claude:s1",
        owner="alice",
        summary="hi",
        now=now,
        ttl=ttl,
    )


def test_a_pending_card_is_approved_by_its_owner() -> None:
    decided = card().decide(Decision.APPROVE, by_user="alice", now=110)
    assert decided.state is CardState.APPROVED
    assert decided.decided_by == "human:alice"


def test_a_decision_by_another_human_is_forbidden() -> None:
    with pytest.raises(Forbidden):
        card().decide(Decision.APPROVE, by_user="mallory", now=110)


def test_a_decision_on_a_resolved_card_is_a_conflict() -> None:
    declined = card().decide(Decision.DECLINE, by_user="alice", now=110)
    with pytest.raises(Conflict):
        declined.decide(Decision.APPROVE, by_user="alice", now=111)


def test_a_late_decision_finds_the_card_expired_and_approves_nothing() -> None:
    with pytest.raises(Conflict, match="expired"):
        card(now=100, ttl=60).decide(Decision.APPROVE, by_user="alice", now=160)


def test_expiry_is_exact_to_the_second() -> None:
    c = card(now=100, ttl=60)
    assert c.resolve_expiry(159.999).state is CardState.PENDING
    assert c.resolve_expiry(160).state is CardState.EXPIRED


def test_approving_the_pair_is_only_for_message_cards() -> None:
    with pytest.raises(BadRequest):
        card(kind="start_session").decide(Decision.APPROVE_PAIR, by_user="alice", now=110)
    assert (
        card().decide(Decision.APPROVE_PAIR, by_user="alice", now=110).state
        is CardState.APPROVED_PAIR
    )


def test_cancelling_a_final_card_changes_nothing() -> None:
    approved = card().decide(Decision.APPROVE, by_user="alice", now=110)
    assert approved.cancel(120) == approved
    assert card().cancel(120).state is CardState.CANCELLED


@pytest.mark.parametrize("bad", [None, 3, "yes", "APPROVE"])
def test_a_malformed_decision_names_the_field(bad: object) -> None:
    with pytest.raises(BadRequest) as err:
        parse_decision(bad)
    assert err.value.field == "decision"
