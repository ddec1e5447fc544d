"""Properties of the message book under random sends, retries, screens, consent and time.

A rule-based state machine drives the pure book the way the daemon does (sends and retries,
panes going idle and busy, approvals, declines, revocations, replaced panes, handles moving,
the clock) and checks after every step that no id is typed twice, that every admitted message
reaches exactly one final outcome, that the queue stays within its budgets, and that refusals
change nothing and consume no id.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from openbus.daemon.core.messaging import (
    FINAL_OUTCOMES,
    CardNeed,
    Message,
    MessageBook,
    MessageLimits,
    Outcome,
    Phase,
    Recipient,
    Target,
)
from openbus.kernel.errors import Conflict, OpenbusError, Refused
from openbus.kernel.testing import FixedClock
from tests.daemon.core.helpers import admit, due

PRINCIPALS = ["p_a", "p_b", "p_c"]
PANES = {"p_a": "%1", "p_b": "%2", "p_c": "%3"}
IDS = ["m1", "m2", "m3", "m4"]
TEXTS = st.one_of(
    st.sampled_from(["hi", "hello\nthere", "x" * 40, "caf\u00e9"]),
    st.sampled_from(["bad\x1b[0m", "tab\there", "cr\rhere", "rtl\u202eoverride", "\u2066iso"]),
    st.text(min_size=1, max_size=60),
)
LIMITS = MessageLimits(
    message_bytes=64,
    sender_per_minute=6,
    pair_per_minute=3,
    hop_limit=2,
    recipient_queue_bytes=120,
    ids_per_principal=3,
    total_queue_bytes=200,
)


@dataclass
class Admitted:
    serial: int
    message: Message
    admitted: float
    final: Outcome | None = None
    typed: int = 0


class MessagingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FixedClock()
        self.book = MessageBook(self.clock, LIMITS)
        self.incarnation = dict.fromkeys(PANES.values(), 0)
        self.approved: set[tuple[str, str]] = set()
        self.revoked: set[str] = set()
        self.admitted: list[Admitted] = []
        self.by_object: dict[int, Admitted] = {}
        self.typings: list[tuple[tuple[str, str], float]] = []  # (key, admission time)

    # ------------------------------------------------------------------ helpers

    def recipient(self, principal: str) -> Recipient:
        pane = PANES[principal]
        return Recipient(
            pane, f"i{self.incarnation[pane]}", principal, "claude", f"agent:claude:{principal}"
        )

    def record(self, message: Message) -> Admitted:
        return self.by_object[id(message)]

    # ------------------------------------------------------------------ rules

    @rule(
        sender=st.sampled_from(PRINCIPALS),
        to=st.sampled_from(PRINCIPALS),
        mid=st.sampled_from(IDS),
        text=TEXTS,
    )
    def send(self, sender: str, to: str, mid: str, text: str) -> None:
        if sender in self.revoked:
            return  # the gate refuses a revoked sender before the book sees it
        before = (self.book.footprint(), self.book.ids_held(sender), self.book.get(sender, mid))
        recipient = self.recipient(to)
        try:
            admission = admit(
                self.book,
                sender=sender,
                sender_actor=f"agent:claude:{sender}",
                message_id=mid,
                text=text,
                target=Target(pane=recipient.pane, incarnation=recipient.incarnation),
                recipient=recipient,
                pair_approved=(sender, to) in self.approved,
            )
        except (Refused, Conflict, OpenbusError):
            after = (self.book.footprint(), self.book.ids_held(sender), self.book.get(sender, mid))
            assert after[0] == before[0]
            assert after[1] == before[1]
            assert after[2] is before[2]
            return
        assert before[2] is None, "a held id was admitted a second time"
        message = admission.message
        entry = Admitted(len(self.admitted), message, self.clock.now())
        self.admitted.append(entry)
        self.by_object[id(message)] = entry
        if admission.card is not CardNeed.NONE:
            self.book.attach_card(message, f"c{entry.serial}")

    @rule(data=st.data())
    def decide_a_card(self, data: st.DataObject) -> None:
        waiting = [a.message for a in self.admitted if a.message.phase is Phase.CONSENT]
        if not waiting:
            return
        message = data.draw(st.sampled_from(waiting))
        decision = data.draw(st.sampled_from(["approve", "approve_pair", "decline", "expire"]))
        if decision == "decline":
            self.book.end_waiting(message, Outcome.DECLINED, "declined")
        elif decision == "expire":
            self.book.end_waiting(message, Outcome.EXPIRED, "card expired")
        else:
            if decision == "approve_pair" and message.recipient.principal:
                self.approved.add((message.sender, message.recipient.principal))
            self.book.consent_granted(message)

    @rule(pane=st.sampled_from(sorted(PANES.values())), landed=st.booleans())
    def pane_goes_idle(self, pane: str, landed: bool) -> None:
        for message in self.book.waiting_for(pane):
            if message.sender in self.revoked or message.recipient.principal in self.revoked:
                continue  # the engine rechecks both ends' scopes under the lock
            self.book.begin_typing(message)
            entry = self.record(message)
            entry.typed += 1
            self.typings.append((message.key, entry.admitted))
            self.book.end_typing(message, Outcome.DELIVERED if landed else Outcome.UNCONFIRMED)
            break  # one message per idle turn

    @rule(principal=st.sampled_from(PRINCIPALS))
    def revoke(self, principal: str) -> None:
        self.revoked.add(principal)
        self.approved = {p for p in self.approved if principal not in p}
        for message in self.book.involving(principal):
            self.book.end_waiting(message, Outcome.CANCELLED, "revoked")
        assert self.book.involving(principal) == []

    @rule(principal=st.sampled_from(PRINCIPALS))
    def reconnect(self, principal: str) -> None:
        self.revoked.discard(principal)

    @rule(principal=st.sampled_from(PRINCIPALS))
    def pane_replaced(self, principal: str) -> None:
        pane = PANES[principal]
        self.incarnation[pane] += 1
        for message in self.book.addressed_to(pane):
            if message.target.handle is None:
                self.book.end_waiting(message, Outcome.CANCELLED, "incarnation changed")

    @rule(data=st.data())
    def handle_moves(self, data: st.DataObject) -> None:
        movable = [
            a.message for a in self.admitted if a.message.phase in (Phase.QUEUED, Phase.CONSENT)
        ]
        if not movable:
            return
        message = data.draw(st.sampled_from(movable))
        to = data.draw(st.sampled_from(PRINCIPALS))
        try:
            need = self.book.retarget(
                message,
                self.recipient(to),
                pair_approved=(message.sender, to) in self.approved,
            )
        except Refused:
            self.book.end_waiting(message, Outcome.REFUSED, "new recipient's queue is full")
            return
        if need is not CardNeed.NONE:
            self.book.attach_card(message, f"c{self.record(message).serial}m{len(message.history)}")

    @rule(seconds=st.sampled_from([0.5, 5.0, 30.0, 61.0, 299.0, 1200.0, 3600.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @precondition(lambda self: bool(self.admitted))
    @rule()
    def sweep(self) -> None:
        for message in due(self.book):
            assert message.final
            self.observe()  # the outcome is recorded before the id is released
            assert self.record(message).final is not None
            self.book.release(message)
        self.book.prune()

    # ------------------------------------------------------------------ invariants

    @invariant()
    def observe(self) -> None:
        for entry in self.admitted:
            message = entry.message
            if message.final:
                assert message.outcome in FINAL_OUTCOMES
                if entry.final is None:
                    entry.final = message.outcome
                assert message.outcome is entry.final, "a final outcome changed"
            else:
                assert message.outcome is Outcome.QUEUED
                assert entry.final is None

    @invariant()
    def no_id_is_typed_twice(self) -> None:
        assert all(entry.typed <= 1 for entry in self.admitted)
        seen: dict[tuple[str, str], float] = {}
        for key, admitted in self.typings:
            if key in seen:
                assert admitted - seen[key] >= LIMITS.id_ttl, (
                    "an id was typed twice within its hour"
                )
            seen[key] = admitted

    @invariant()
    def the_queue_stays_within_its_budget(self) -> None:
        live = [a.message for a in self.admitted if not a.message.final]
        assert self.book.queued_bytes == sum(m.size for m in live)
        assert self.book.queued_bytes <= LIMITS.total_queue_bytes
        for pane in PANES.values():
            assert self.book.queued_bytes_for(pane) <= LIMITS.recipient_queue_bytes

    @invariant()
    def ids_held_match_unreleased_messages(self) -> None:
        for principal in PRINCIPALS:
            held = self.book.ids_held(principal)
            assert held <= LIMITS.ids_per_principal

    def teardown(self) -> None:
        # every admitted message reaches exactly one final outcome: let every hour run out
        for message in self.book.messages():
            if message.phase is Phase.TYPING:  # pragma: no cover - rules never leave one typing
                self.book.end_typing(message, Outcome.UNCONFIRMED)
        self.clock.advance(LIMITS.id_ttl + 1)
        for message in due(self.book):
            self.observe()
            self.book.release(message)
        self.observe()
        assert all(entry.final in FINAL_OUTCOMES for entry in self.admitted)
        assert self.book.footprint()["messages"] == 0
        assert self.book.queued_bytes == 0


MessagingMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMessagingProperties = MessagingMachine.TestCase
