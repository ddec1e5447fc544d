"""Outcomes: every ending of a message recorded exactly once, its card closed with it.

Shared by the service (declines, expiry, revocation) and the delivery engine (delivered,
unconfirmed, a handle that moved). An admitted message has two audit records: ``queued`` at
admission and its final outcome here (``record_outcome``), which commits with the held id's
outcome (``HeldIds.ended``). An outcome whose record could not
be written is logged, its id stays held, and the sweep tries it again before releasing the id;
waiters on the message (``message_status`` with a wait) wake either way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from openbus.daemon.cards import Cards
from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.core.consent import Card, CardState
from openbus.daemon.core.messaging import (
    RESTART_REASON,
    CardNeed,
    HeldId,
    Message,
    MessageBook,
    Outcome,
)
from openbus.daemon.core.names import actor_harness, agent_name, hop_words
from openbus.daemon.gate import Gate
from openbus.daemon.messaging.actions import SEND
from openbus.daemon.messaging.fleet import PaneView
from openbus.daemon.messaging.held_ids import HeldIds
from openbus.kernel.clock import Clock
from openbus.kernel.errors import NotFound
from openbus.kernel.scopes import Scope

log = logging.getLogger("openbus.messaging")

PREVIEW_CHARS = 200


PaneLookup = Callable[[str], PaneView | None]


class Outcomes:
    def __init__(
        self,
        book: MessageBook,
        gate: Gate,
        cards: Cards,
        clock: Clock,
        held_ids: HeldIds,
        *,
        view: PaneLookup | None = None,
    ) -> None:
        self.view = view
        self.book = book
        self.held_ids = held_ids
        self.gate = gate
        self.cards = cards
        self.clock = clock
        self.owners: dict[tuple[str, str], str] = {}  # message key -> the human it is for
        self.unrecorded: set[tuple[str, str]] = set()  # outcomes whose record failed
        self._done: dict[tuple[str, str], asyncio.Event] = {}

    def done(self, message: Message) -> asyncio.Event:
        """Set when ``message`` reaches its outcome."""
        return self._done.setdefault(message.key, asyncio.Event())

    def name(self, pane: str | None, actor: str | None) -> str:
        """An agent as a person reads it (``claude "auth review" %10 on fix/login``), from the
        pane's directory entry; never its session UUID."""
        found = self.view(pane) if pane and self.view is not None else None
        if found is not None:
            return agent_name(found.harness, found.title, found.pane, found.branch)
        return agent_name(actor_harness(actor or ""), None, pane, None)

    def forget(self, message: Message) -> None:
        """Drop what is kept of a message whose id was released."""
        self.owners.pop(message.key, None)
        self._done.pop(message.key, None)

    def record_outcome(self, message: Message) -> bool:
        """The second audit record of an admitted message: its final outcome. True once it is
        written; one that could not be is logged and its id stays held, and ``sweep`` tries it
        again before releasing the id. Waiters on the message wake either way."""
        retry = message.key in self.unrecorded
        try:
            self._write_outcome(message)
        except Exception as exc:
            if retry:
                log.error("message %s: outcome still not recorded: %s", message.message_id, exc)
            else:
                log.exception("could not record the outcome of message %s", message.message_id)
                self.unrecorded.add(message.key)
            recorded = False
        else:
            self.unrecorded.discard(message.key)
            recorded = True
        self._wake_waiters(message)
        return recorded

    def _write_outcome(self, message: Message) -> None:
        details: dict[str, Any] = {
            "recipient": message.recipient.actor or message.recipient.pane,
            "conversation": message.conversation,
            "hop": message.hop,
            "by": "system",
        }
        if message.reason:
            details["reason"] = message.reason
        held = HeldId(
            message.sender,
            message.message_id,
            message.sender_actor,
            message.recipient.pane,
            message.outcome,
            message.expires,
        )
        self._write_final(held, details)

    def record_restored(self, entry: HeldId) -> None:
        """The outcome of an id an earlier lifetime left open (``HeldId.after_restart``)."""
        self._write_final(entry, {"reason": RESTART_REASON, "by": "system"})

    def _write_final(self, held: HeldId, details: dict[str, Any]) -> None:
        """A final outcome's record, committed with the held id's outcome."""
        self.gate.record(
            AuditDraft(
                actor=held.sender_actor,
                action=SEND.name,
                outcome=held.outcome.value,
                scope=Scope.MESSAGE.value,
                target=held.recipient_pane,
                message_id=held.message_id,
                details=details,
            ),
            [self.held_ids.ended(held)],
        )

    def _wake_waiters(self, message: Message) -> None:
        event = self._done.pop(message.key, None)
        if event is not None:
            event.set()

    def end_waiting(self, message: Message, outcome: Outcome, reason: str) -> bool:
        """End a waiting message and record its outcome (False: it had moved on)."""
        if not self.book.end_waiting(message, outcome, reason):
            return False
        self.close_card(message)
        self.record_outcome(message)
        return True

    def close_card(self, message: Message) -> None:
        if message.card_id is not None:
            self.cancel_card(message.card_id)

    def cancel_card(self, card_id: str) -> None:
        """Resolve a still-pending card as cancelled (one system record)."""
        try:
            card = self.cards.get(card_id)
        except NotFound:
            return
        if card.state is CardState.PENDING:
            cancelled = card.cancel(self.clock.now())
            draft, writes = self.cards.resolution_record(cancelled)
            self.gate.record(draft, writes)
            self.cards.notify(cancelled)

    def raise_card(self, message: Message, need: CardNeed) -> None:
        """A card for a message that moved to a new recipient (a handle now resolving
        elsewhere), written with a system record of the move."""
        card, write = self.new_card(message, need, self.owners[message.key])
        self.record_move(message, card.id, [write])
        self.book.attach_card(message, card.id)
        self.cards.notify(card)

    def composer_left(self, message: Message) -> None:
        """The pane needs the human: an unconfirmed attempt left text in its composer that
        could not be cleared, and a pane holding a draft is offered no message. A card says
        so, written with a system record naming the pane and the message."""
        pane = message.recipient.pane
        who = self.name(pane, message.recipient.actor)
        sender = self.name(message.sender_pane, message.sender_actor)
        card, write = self.cards.new(
            kind="composer_left",
            requester="system",
            owner=self.owners[message.key],
            summary=(
                f"Message {message.message_id} from {sender} to {who} "
                "could not be confirmed, and its text could not be cleared from the composer: "
                "clear or send it by hand; the pane gets no further messages while its "
                "composer holds text."
            ),
            target=pane,
            target_principal=message.recipient.key,
            payload={"message_id": message.message_id, "pane": pane},
        )
        self.gate.record(
            AuditDraft(
                actor="system",
                action="message.composer_left",
                outcome="card",
                scope=Scope.MESSAGE.value,
                target=pane,
                message_id=message.message_id,
                details={"card": card.id, "sender": message.sender_actor},
            ),
            [write],
        )
        self.cards.notify(card)

    def record_move(
        self, message: Message, card_id: str | None, writes: list[Any] | None = None
    ) -> None:
        details: dict[str, Any] = {
            "message_id": message.message_id,
            "sender": message.sender_actor,
            "handle": message.target.handle,
            "moved_to": message.recipient.pane,
        }
        if card_id is not None:
            details["card"] = card_id
        self.gate.record(
            AuditDraft(
                actor="system",
                action="message.move",
                outcome="card" if card_id else "ok",
                scope=Scope.MESSAGE.value,
                target=message.recipient.pane,
                details=details,
            ),
            writes,
        )

    def new_card(self, message: Message, need: CardNeed, owner: str) -> tuple[Card, Any]:
        """A consent card for ``message`` (not yet written: the write commits with a record)."""
        who = self.name(message.recipient.pane, message.recipient.actor)
        sender = self.name(message.sender_pane, message.sender_actor)
        if need is CardNeed.HOP:
            why = f"{hop_words(message.hop)}, past the limit on replies"
        else:
            why = "the first message between these two"
        summary = (
            f"{sender} wants to message {who}: {why}. \u201c{preview(message.text, 160)}\u201d"
        )
        return self.cards.new(
            kind=need.value,
            requester=message.sender_actor,
            owner=owner,
            summary=summary,
            target=message.recipient.pane,
            requester_principal=message.sender,
            target_principal=message.recipient.key,
            payload={
                "message_id": message.message_id,
                "pane": message.recipient.pane,
                "bytes": message.size,
                "hop": message.hop,
                "conversation": message.conversation,
            },
        )


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "\u2026"
