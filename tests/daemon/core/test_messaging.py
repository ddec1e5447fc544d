"""The message book: admission before storage, at-most-once ids, hops, consent, outcomes."""

from __future__ import annotations

import re

import pytest

from openbus.daemon.core import messaging
from openbus.daemon.core.messaging import (
    MOVES,
    CardNeed,
    HeldId,
    MessageBook,
    MessageLimits,
    Outcome,
    Phase,
    Recipient,
    Step,
    Target,
)
from openbus.kernel.errors import (
    BadRequest,
    Conflict,
    InvalidTransition,
    OpenbusError,
    Refused,
)
from openbus.kernel.limits import Limits
from openbus.kernel.testing import FixedClock
from tests.daemon.core.helpers import admit, due

A, B, C = "p_a", "p_b", "p_c"
PANE_B = Recipient("%2", "inc-b", B, "claude", "agent:claude:b")
PANE_C = Recipient("%3", "inc-c", C, "codex", "agent:codex:c")
PANE_A = Recipient("%1", "inc-a", A, "claude", "agent:claude:a")


def book(**limits: float) -> tuple[MessageBook, FixedClock]:
    clock = FixedClock()
    return MessageBook(clock, MessageLimits(**limits)), clock  # type: ignore[arg-type]


def send(
    b: MessageBook,
    mid: str,
    *,
    sender: str = A,
    to: Recipient = PANE_B,
    text: str = "hello",
    approved: bool = True,
    control: bool = False,
):  # type: ignore[no-untyped-def]
    return admit(
        b,
        sender=sender,
        sender_actor=f"agent:claude:{sender}",
        message_id=mid,
        text=text,
        target=Target(pane=to.pane, incarnation=to.incarnation),
        recipient=to,
        pair_approved=approved,
        control=control,
    )


# ---------------------------------------------------------------- ids


def test_a_malformed_message_id_is_a_bad_request_naming_the_field() -> None:
    b, _ = book()
    with pytest.raises(BadRequest) as err:
        send(b, "has space")
    assert err.value.field == "message_id"


# ---------------------------------------------------------------- refusals store nothing


def test_a_refusal_stores_nothing_and_consumes_no_id() -> None:
    b, _ = book()
    before = b.footprint()
    with pytest.raises(Refused):
        send(b, "m1", text="bad\x1b")
    assert b.footprint() == before
    assert b.get(A, "m1") is None
    admitted = send(b, "m1", text="good")  # judged afresh
    assert admitted.message.outcome is Outcome.QUEUED


def test_a_retried_id_is_refused_with_its_outcome_and_not_admitted_twice() -> None:
    b, _ = book()
    send(b, "m1")
    with pytest.raises(Conflict, match="queued") as err:
        send(b, "m1")
    assert err.value.field == "message_id"
    assert b.ids_held(A) == 1


def test_ids_are_scoped_to_the_sender_principal() -> None:
    b, _ = book()
    send(b, "m1", sender=A, to=PANE_B)
    send(b, "m1", sender=C, to=PANE_B)
    assert b.ids_held(A) == 1 and b.ids_held(C) == 1


def test_the_sender_rate_is_a_sliding_minute_of_admissions() -> None:
    b, clock = book(sender_per_minute=3, pair_per_minute=10)
    for i in range(3):
        send(b, f"m{i}", to=PANE_B if i % 2 else PANE_C)
    with pytest.raises(Refused, match="3 messages a minute") as err:
        send(b, "m9")
    assert err.value.field == "rate"
    clock.advance(60.0)
    send(b, "m9")


def test_the_pair_rate_limits_one_recipient_but_not_another() -> None:
    b, _ = book(pair_per_minute=2)
    send(b, "m1")
    send(b, "m2")
    with pytest.raises(Refused, match="to one recipient"):
        send(b, "m3")
    send(b, "m3", to=PANE_C)


def test_refusals_do_not_count_against_the_rate() -> None:
    b, _ = book(sender_per_minute=1)
    for i in range(50):
        with pytest.raises(Refused):
            send(b, f"x{i}", text="\x1b")
    send(b, "ok")


def test_the_recipient_queue_and_the_total_budget_are_enforced_before_storing() -> None:
    b, _ = book(recipient_queue_bytes=10, total_queue_bytes=15)
    send(b, "m1", text="a" * 10)
    with pytest.raises(Refused, match="recipient's queue is full"):
        send(b, "m2", text="a")
    send(b, "m2", text="a" * 5, to=PANE_C)
    with pytest.raises(Refused, match="daemon's message queue is full"):
        send(b, "m3", text="a", to=PANE_C)
    assert b.queued_bytes == 15


def test_at_the_id_cap_new_messages_are_refused_and_nothing_is_evicted() -> None:
    b, clock = book(ids_per_principal=2)
    first = send(b, "m1").message
    send(b, "m2", to=PANE_C)
    with pytest.raises(Refused, match="id cap"):
        send(b, "m3")
    clock.advance(3599)
    assert due(b) == []
    assert b.get(A, "m1") is first


def test_a_waiting_message_expires_before_its_id_is_released() -> None:
    b, clock = book()
    message = send(b, "m1").message
    clock.advance(3600)
    found = due(b)
    assert found == [message]
    assert message.outcome is Outcome.EXPIRED
    assert b.get(A, "m1") is message  # still held until the outcome is recorded
    with pytest.raises(Conflict, match="expired"):
        send(b, "m1")
    b.release(message)
    assert b.get(A, "m1") is None
    assert b.queued_bytes == 0
    send(b, "m1")


def test_a_delivered_message_keeps_its_id_for_the_hour() -> None:
    b, clock = book()
    message = send(b, "m1").message
    b.begin_typing(message)
    b.end_typing(message, Outcome.DELIVERED)
    clock.advance(1800)
    assert due(b) == []
    with pytest.raises(Conflict, match="delivered"):
        send(b, "m1")
    clock.advance(1800)
    assert due(b) == [message]
    assert message.outcome is Outcome.DELIVERED
    b.release(message)


def test_a_message_being_typed_is_neither_expired_nor_cancelled() -> None:
    b, clock = book()
    message = send(b, "m1").message
    b.begin_typing(message)
    clock.advance(4000)
    assert due(b) == []
    assert not b.end_waiting(message, Outcome.CANCELLED)
    b.end_typing(message, Outcome.UNCONFIRMED, "screen changed")
    assert due(b) == [message]


def held(mid: str, outcome: Outcome, expires: float, sender: str = A) -> HeldId:
    return HeldId(sender, mid, f"agent:claude:{sender}", "%2", outcome, expires)


def test_an_id_restored_from_an_earlier_lifetime_is_refused_until_its_hour_ends() -> None:
    b, clock = book()
    now = clock.now()
    kept = b.restore(
        [held("m1", Outcome.DELIVERED, now + 600), held("old", Outcome.DELIVERED, now)]
    )
    assert [e.message_id for e in kept] == ["m1"]  # one whose hour is over is not held
    with pytest.raises(Conflict, match="delivered"):
        send(b, "m1")
    send(b, "m1", sender=B, to=PANE_C)  # ids stay scoped to their sender
    send(b, "old")
    assert b.ids_held(A) == 2
    clock.advance(600)
    assert b.release_restored() == 1
    assert b.restored(A, "m1") is None and b.ids_held(A) == 1
    send(b, "m1")


def test_an_id_left_without_a_final_outcome_is_restored_unconfirmed() -> None:
    b, clock = book()
    [entry] = b.restore([held("m1", Outcome.QUEUED, clock.now() + 60)])
    assert entry.outcome is Outcome.UNCONFIRMED
    with pytest.raises(Conflict, match="unconfirmed"):
        send(b, "m1")


def test_restored_ids_count_toward_the_id_cap() -> None:
    b, clock = book(ids_per_principal=1)
    b.restore([held("m1", Outcome.DELIVERED, clock.now() + 60)])
    with pytest.raises(Refused, match="id cap"):
        send(b, "m2")


# ---------------------------------------------------------------- typing and outcomes


def test_a_message_is_typed_at_most_once() -> None:
    b, _ = book()
    message = send(b, "m1").message
    b.begin_typing(message)
    b.end_typing(message, Outcome.DELIVERED)
    with pytest.raises(ValueError):
        b.begin_typing(message)


def test_a_final_outcome_is_never_replaced() -> None:
    b, _ = book()
    message = send(b, "m1").message
    assert b.end_waiting(message, Outcome.CANCELLED, "incarnation changed")
    assert not b.end_waiting(message, Outcome.DECLINED)
    assert message.outcome is Outcome.CANCELLED
    assert message.text == ""
    assert b.queued_bytes == 0


def test_typing_ends_only_delivered_or_unconfirmed() -> None:
    b, _ = book()
    message = send(b, "m1").message
    b.begin_typing(message)
    with pytest.raises(ValueError):
        b.end_typing(message, Outcome.CANCELLED)


# ---------------------------------------------------------------- consent and hops


def test_a_new_pair_needs_a_card_and_an_approved_pair_does_not() -> None:
    b, _ = book()
    assert send(b, "m1", approved=False).card is CardNeed.PAIR
    assert send(b, "m2", approved=True).card is CardNeed.NONE
    assert send(b, "m3", sender="control", approved=False, control=True).card is CardNeed.NONE


def test_a_message_waiting_for_consent_is_not_offered_for_delivery_until_approved() -> None:
    b, _ = book()
    message = send(b, "m1", approved=False).message
    b.attach_card(message, "c_1")
    assert message.phase is Phase.CONSENT
    assert b.waiting_for("%2") == []
    assert b.by_card("c_1") is message
    assert b.consent_granted(message)
    assert b.waiting_for("%2") == [message]
    assert b.by_card("c_1") is None


def test_a_reply_within_the_window_continues_the_conversation_and_counts_a_hop() -> None:
    b, clock = book()
    first = send(b, "m1", sender=A, to=PANE_B).message
    b.begin_typing(first)
    b.end_typing(first, Outcome.DELIVERED)
    clock.advance(60)
    reply = send(b, "r1", sender=B, to=PANE_A).message
    assert reply.conversation == first.conversation
    assert reply.hop == first.hop + 1
    # a "new" message from B to C still counts as a reply: B received one recently
    other = send(b, "n1", sender=B, to=PANE_C).message
    assert other.conversation == first.conversation and other.hop == 1


def test_a_message_after_the_reply_window_opens_a_new_conversation() -> None:
    b, clock = book()
    first = send(b, "m1", sender=A, to=PANE_B).message
    b.begin_typing(first)
    b.end_typing(first, Outcome.DELIVERED)
    clock.advance(301)
    later = send(b, "r1", sender=B, to=PANE_A).message
    assert later.conversation != first.conversation and later.hop == 0


def test_a_ping_pong_past_the_hop_limit_needs_a_card_even_for_an_approved_pair() -> None:
    b, clock = book(hop_limit=2, pair_per_minute=10)
    needs = []
    for i in range(5):
        sender, to = (A, PANE_B) if i % 2 == 0 else (B, PANE_A)
        admission = send(b, f"m{i}", sender=sender, to=to, approved=True)
        needs.append(admission.card)
        if admission.card is CardNeed.NONE:
            b.begin_typing(admission.message)
            b.end_typing(admission.message, Outcome.DELIVERED)
        clock.advance(5)
    assert needs == [CardNeed.NONE, CardNeed.NONE, CardNeed.NONE, CardNeed.HOP, CardNeed.NONE]


def test_a_handle_moving_to_another_pane_is_a_new_recipient_needing_consent() -> None:
    b, _ = book()
    message = send(b, "m1", approved=True).message
    assert b.queued_bytes_for("%2") == 5
    need = b.retarget(message, PANE_C, pair_approved=False)
    assert need is CardNeed.PAIR
    assert message.phase is Phase.CONSENT
    assert b.queued_bytes_for("%2") == 0 and b.queued_bytes_for("%3") == 5
    assert b.retarget(message, PANE_C, pair_approved=True) is CardNeed.NONE
    assert message.phase is Phase.QUEUED


def test_revocation_finds_messages_sent_and_received() -> None:
    b, _ = book()
    sent = send(b, "m1", sender=A, to=PANE_B).message
    received = send(b, "m2", sender=C, to=PANE_A).message
    unrelated = send(b, "m3", sender=C, to=PANE_B).message
    assert set(map(id, b.involving(A))) == {id(sent), id(received)}
    assert unrelated not in b.involving(A)


def test_policy_limits_map_onto_the_book_and_can_only_tighten() -> None:
    limits = MessageLimits.from_limits(Limits(message_bytes=100, hop_limit=1))
    assert limits.message_bytes == 100 and limits.hop_limit == 1
    assert limits.sender_per_minute == MessageLimits().sender_per_minute
    with pytest.raises(ValueError):
        Limits(message_bytes=10**9)


def test_prune_drops_idle_rate_windows_and_old_hop_memories() -> None:
    b, clock = book()
    message = send(b, "m1").message
    b.begin_typing(message)
    b.end_typing(message, Outcome.DELIVERED)
    clock.advance(3600)
    for m in due(b):
        b.release(m)
    b.prune()
    fp = b.footprint()
    assert fp["sender_rates"] == fp["pair_rates"] == fp["received"] == fp["messages"] == 0


# ---------------------------------------------------------------- the lifecycle table

ARROW = re.compile(r"^ +([A-Z]+) --([a-z|]+)--> ([A-Z]+)\b", re.MULTILINE)


def test_the_diagram_in_the_docstring_is_the_transition_table() -> None:
    drawn = [
        (Phase[src], event, Phase[dst])
        for src, events, dst in ARROW.findall(messaging.__doc__ or "")
        for event in events.split("|")
    ]
    assert len(drawn) == len(set(drawn))
    assert set(drawn) == {(src, event.value, dst) for (src, event), dst in MOVES.items()}


def test_step_and_outcome_names_never_collide_as_table_keys() -> None:
    assert not {s.value for s in Step} & {o.value for o in Outcome}


def test_nothing_leads_back_out_of_typing_so_no_id_is_typed_twice() -> None:
    reached, frontier = set(), {Phase.TYPING}
    while frontier:
        phase = frontier.pop()
        for (src, _), dst in MOVES.items():
            if src is phase and dst not in reached:
                reached.add(dst)
                frontier.add(dst)
    assert reached == {Phase.FINAL}


def test_a_move_the_table_lacks_is_an_invalid_transition_and_changes_nothing() -> None:
    b, _ = book()
    message = send(b, "m1").message
    with pytest.raises(InvalidTransition):
        b.attach_card(message, "c_1")  # a queued message has no card to wait for
    assert message.phase is Phase.QUEUED and b.by_card("c_1") is None
    b.begin_typing(message)
    with pytest.raises(InvalidTransition):
        b.retarget(message, PANE_C, pair_approved=True)
    assert message.recipient is PANE_B and b.queued_bytes_for("%2") == 5


def test_an_invalid_transition_is_a_bug_never_a_client_facing_error() -> None:
    assert not issubclass(InvalidTransition, OpenbusError)
