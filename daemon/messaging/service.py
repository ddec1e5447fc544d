"""Peer messaging in the daemon: the gate actions, the queue, consent, revocation, expiry.

Theory of operation
-------------------
The rules live in ``core.messaging.MessageBook`` (pure); this adapter wires them to the rest
of the daemon:

* ``message.send`` (scope ``message``, tier card): resolve the target to exactly one live
  agent pane (a pane id with its incarnation, or a workstream handle; ambiguity refused with
  the candidates named), check the recipient is ``reachable`` (control excepted) and not a
  shell, then ``book.check``. A refusal raises before anything is stored; the gate audits it.
  An admitted message is audited ``queued`` with its message id; if consent is needed the
  card is written in the same transaction as that record.
* ``message.status``: the outcome, with a bounded wait (at most 50 s a call) that ends at once
  when the message reaches its outcome or the caller's grant is withdrawn.
* ``messages.list`` (human): every pane's sent and received messages with outcomes.
* Card decisions arrive through ``Cards.listeners``: approve queues the message for delivery,
  decline/expiry/cancellation finalizes it.
* Revocation (``Connect.on_revocation``): narrowing or revoking either end takes each
  affected pane's send lock, cancels the principal's open messages and message cards, sent
  or received, and forgets its pair approvals, before the human's toggle returns.
* The sweep (once a second): messages whose hour is over are recorded ``expired`` (the
  audit record is written first) and only then is the id released.
* Restart (``start``): the ids the last lifetime held within their hour (``HeldIds``, written
  with the records that admitted and ended them) are held again, so a retried id is refused;
  one whose outcome was not final gets its ``unconfirmed`` record now, and the message cards
  left pending (their messages died with the old process) are cancelled.

Every final outcome gets exactly one more audit record with the message id
(``record_outcome``). Delivery itself is in ``daemon.messaging.delivery``.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import sqlite3
from typing import Any

from openbus.daemon.cards import Cards
from openbus.daemon.connect import Connect
from openbus.daemon.core.actors import Actor
from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.core.consent import Card, CardState
from openbus.daemon.core.message_text import check_message_id, check_text
from openbus.daemon.core.messaging import (
    RESTART_REASON,
    CardNeed,
    Message,
    MessageBook,
    Outcome,
    Phase,
)
from openbus.daemon.core.names import hop_words
from openbus.daemon.feature import Feature
from openbus.daemon.gate import Call, Gate
from openbus.daemon.grants import Grants, Principal
from openbus.daemon.messaging.actions import LIST, SEND, STATUS
from openbus.daemon.messaging.addressing import Addressing
from openbus.daemon.messaging.delivery import DeliveryEngine
from openbus.daemon.messaging.held_ids import HeldIds
from openbus.daemon.messaging.outcomes import Outcomes, preview
from openbus.kernel.clock import Clock
from openbus.kernel.errors import BadRequest, NotConnected, Unavailable
from openbus.kernel.ids import is_pane_id
from openbus.kernel.scopes import Preset, Scope

log = logging.getLogger("openbus.messaging")

MAX_WAIT_SECONDS = 50.0
MESSAGE_CARD_KINDS = frozenset({"message", "hop_limit"})


class MessagingService(Feature):
    """The messaging feature: its gate actions, the queue and, on ``fleet``, delivery."""

    name = "messaging"

    def __init__(
        self,
        *,
        gate: Gate,
        grants: Grants,
        cards: Cards,
        connect: Connect,
        clock: Clock,
        book: MessageBook,
        addressing: Addressing,
        outcomes: Outcomes,
        delivery: DeliveryEngine,
        held_ids: HeldIds,
    ) -> None:
        self.gate = gate
        self.grants = grants
        self.cards = cards
        self.clock = clock
        self.book = book
        self.addressing = addressing
        self.outcomes = outcomes
        self.delivery = delivery
        self.held_ids = held_ids
        self.fleet = addressing.fleet
        self._delivering: asyncio.Task[None] | None = None
        self._revoked: dict[str, asyncio.Event] = {}
        self._preview: dict[tuple[str, str], str] = {}
        self.cards.listeners.append(self._on_card)
        gate.register(SEND, self.send)
        gate.register(STATUS, self.status)
        gate.register(LIST, self.list_messages)
        connect.on_revocation(self.on_revocation)

    # ------------------------------------------------------------------ feature

    async def start(self) -> None:
        self.restore()
        self._delivering = asyncio.get_running_loop().create_task(
            self.delivery.run(), name="message delivery"
        )

    async def stop(self) -> None:
        await self.delivery.close()
        task, self._delivering = self._delivering, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def restore(self) -> None:
        """Hold again the ids of the last lifetime; record the outcomes it left open."""
        loaded = self.held_ids.held(self.clock.now())
        was = {entry.key: entry.outcome for entry in loaded}
        for entry in self.book.restore(loaded):
            if was[entry.key].final:
                continue
            self.outcomes.record_restored(entry)
        for card in self.cards.listing(pending_only=True, limit=100_000):
            if card.kind in MESSAGE_CARD_KINDS:
                self.outcomes.cancel_card(card.id)

    def tick(self) -> None:
        self.sweep()

    def health(self) -> dict[str, Any]:
        return {"queued_bytes": self.book.queued_bytes, **self.book.footprint()}

    def pane_section(self, pane: str) -> dict[str, Any]:
        """The messages a pane sent and received, for a human's view of that pane."""
        return {"messages": self.for_pane(pane)}

    # ------------------------------------------------------------------ plumbing

    def _kick(self, pane: str) -> None:
        self.delivery.kick(pane)

    # ------------------------------------------------------------------ addressing

    # ------------------------------------------------------------------ send

    async def send(self, call: Call) -> Any:
        actor = call.actor
        sender = self._sender_key(actor)
        params = call.params
        mid = params.get("message_id")
        if isinstance(mid, str):
            call.details["offered_id"] = mid[:128]
        # the cheap refusals first: a flood costs no directory or grant lookups
        check_message_id(mid)
        check_text(params.get("text"), self.book.limits.message_bytes)
        control = actor.kind == "control"
        revision = params.get("revision")
        if revision is not None and (
            not control or isinstance(revision, bool) or not isinstance(revision, int)
        ):
            raise BadRequest(
                "revision is a screen revision, given by control only", field="revision"
            )
        target, view = self.addressing.resolve_target(params, sender)
        call.target = view.pane
        recipient = self.addressing.recipient_for(view, control_sender=control)
        sender_pane = None
        owner = actor.user
        if actor.principal and actor.kind == "agent":
            principal = self.grants.get(actor.principal)
            sender_pane = principal.pane_id
            owner = principal.owner
        if owner is None and recipient.principal:
            owner = self.grants.get(recipient.principal).owner
        admission = self.book.check(
            sender=sender,
            sender_actor=actor.name,
            message_id=mid,
            text=params.get("text"),
            target=target,
            recipient=recipient,
            pair_approved=self.addressing.pair_approved(sender, recipient),
            control=control,
            sender_pane=sender_pane,
            origin=_origin(params.get("origin")) if control else None,
        )
        message = admission.message
        owner = owner or _local_user()
        call.message_id = message.message_id
        call.outcome = "queued"
        call.details.pop("offered_id", None)
        call.details.update(
            {
                "recipient": recipient.actor or recipient.pane,
                "conversation": message.conversation,
                "hop": message.hop,
                "bytes": message.size,
            }
        )
        call.write(self.held_ids.admitted(message))
        card: Card | None = None
        if admission.card is not CardNeed.NONE:
            card, write = self.outcomes.new_card(message, admission.card, owner)
            call.write(write)
            call.details["card"] = card.id
            call.details["consent"] = admission.card.value
        else:
            call.details["consent"] = "control" if control else "pair approved"

        def admitted() -> None:
            # runs right after the audit record is committed, with no await since the check
            self.book.commit(admission)
            self.outcomes.owners[message.key] = owner
            self._preview[message.key] = preview(message.text)
            if card is not None:
                self.book.attach_card(message, card.id)
                self.cards.notify(card)
            else:
                self._kick(recipient.pane)

        call.after_commit.append(admitted)
        return self._answer(message)

    def _sender_key(self, actor: Actor) -> str:
        if actor.kind == "control":
            return "control"
        if actor.principal is None:
            raise NotConnected("not connected: this agent has no openbus grant")
        return actor.principal

    def _answer(self, message: Message) -> dict[str, Any]:
        body: dict[str, Any] = {
            "message_id": message.message_id,
            "outcome": message.outcome.value,
            "final": message.final,
            "recipient_pane": message.recipient.pane,
            "conversation": message.conversation,
            "hop": message.hop,
        }
        if message.phase is Phase.CONSENT:
            body["waiting_for"] = "the human's consent (a card in Needs you)"
        elif message.phase is Phase.QUEUED:
            body["waiting_for"] = "the recipient to be idle with an empty composer"
        if message.reason:
            body["reason"] = message.reason
        return body

    # ------------------------------------------------------------------ status

    async def status(self, call: Call) -> Any:
        sender = self._sender_key(call.actor)
        mid = call.params.get("message_id")
        if not isinstance(mid, str) or not mid:
            raise BadRequest("message_id is required", field="message_id")
        wait = call.params.get("wait_seconds", 0)
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or wait < 0:
            raise BadRequest(
                "wait_seconds must be a number of seconds (0 to 50)", field="wait_seconds"
            )
        wait = min(float(wait), MAX_WAIT_SECONDS)
        call.target = mid
        message = self.book.get(sender, mid)
        restored = self.book.restored(sender, mid) if message is None else None
        if restored is not None:
            call.details["outcome"] = restored.outcome.value
            return {
                "message_id": mid,
                "outcome": restored.outcome.value,
                "final": True,
                "reason": RESTART_REASON
                if restored.outcome is Outcome.UNCONFIRMED
                else "sent before the daemon restarted; this was its recorded outcome",
            }
        if message is None:
            return {
                "message_id": mid,
                "outcome": "unconfirmed",
                "final": True,
                "reason": "the daemon does not know this id (never sent, or older than an hour): "
                "treat it as unconfirmed",
            }
        if not message.final and wait > 0:
            await self._wait(message, sender, wait)
        call.details["outcome"] = message.outcome.value
        return self._answer(message)

    async def _wait(self, message: Message, sender: str, seconds: float) -> None:
        done = self.outcomes.done(message)
        revoked = self._revoked.setdefault(sender, asyncio.Event())
        waits = [asyncio.ensure_future(done.wait()), asyncio.ensure_future(revoked.wait())]
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
        if revoked.is_set():
            raise NotConnected("not connected: the grant was withdrawn while waiting")

    # ------------------------------------------------------------------ outcomes

    # ------------------------------------------------------------------ consent

    def _on_card(self, card: Card) -> None:
        if card.kind not in MESSAGE_CARD_KINDS:
            return
        message = self.book.by_card(card.id)
        if message is None or message.phase is not Phase.CONSENT:
            return
        if card.state in (CardState.APPROVED, CardState.APPROVED_PAIR):
            if self.book.consent_granted(message):
                self._kick(message.recipient.pane)
        elif card.state is CardState.DECLINED:
            self.outcomes.end_waiting(message, Outcome.DECLINED, "the human declined")
        elif card.state is CardState.EXPIRED:
            self.outcomes.end_waiting(
                message, Outcome.EXPIRED, "the consent card expired unanswered"
            )
        elif card.state is CardState.CANCELLED:
            self.outcomes.end_waiting(message, Outcome.CANCELLED, "the consent card was cancelled")

    # ------------------------------------------------------------------ revocation

    async def on_revocation(self, principal: Principal, preset: Preset) -> None:
        """Narrowing below Collaborate cancels the principal's open messages and cards, sent
        or received, linearized with delivery on each affected pane's send lock."""
        if Scope.MESSAGE in preset.scopes and Scope.REACHABLE in preset.scopes:
            return
        event = self._revoked.pop(principal.id, None)
        if event is not None:
            event.set()
        panes = {m.recipient.pane for m in self.book.involving(principal.id)}
        if principal.pane_id:
            panes.add(principal.pane_id)
        locks = [self.fleet.send_lock(p) for p in sorted(panes)]
        for lock in locks:
            await lock.acquire()
        try:
            for message in self.book.involving(principal.id):
                self.outcomes.end_waiting(
                    message, Outcome.CANCELLED, f"Connect was narrowed to {preset.value}"
                )
            open_cards = self.cards.open_for_principal(principal.id)
            for card in open_cards:
                if card.kind in MESSAGE_CARD_KINDS:
                    cancelled = card.cancel(self.clock.now())
                    draft, writes = self.cards.resolution_record(cancelled)
                    self.gate.record(draft, writes)
                    self.cards.notify(cancelled)
            self.gate.record(
                AuditDraft(
                    actor="system",
                    action="messages.forget_pairs",
                    outcome="ok",
                    scope=Scope.MESSAGE.value,
                    details={"principal": principal.id, "preset": preset.value},
                ),
                [self.cards.forget_principal(principal.id)],
            )
            self.book.forget_pair_history(principal.id)
        finally:
            for lock in reversed(locks):
                lock.release()

    # ------------------------------------------------------------------ expiry

    def sweep(self) -> int:
        """Record every message whose hour ran out while waiting, then release every id
        whose hour is over. An outcome whose record could not be written keeps its id held
        and is tried again at the next sweep."""
        expired = 0
        for message in self.book.expire_due():
            self.outcomes.close_card(message)
            self.outcomes.record_outcome(message)
            expired += 1
        for message in self.book.releasable():
            outcomes = self.outcomes
            if message.key in outcomes.unrecorded and not outcomes.record_outcome(message):
                continue
            self.book.release(message)
            outcomes.forget(message)
            self._preview.pop(message.key, None)
        self.book.release_restored()
        try:
            self.held_ids.release_due(self.clock.now())
        except sqlite3.Error as exc:  # the rows stay: a later sweep deletes them
            log.error("message ids past their hour could not be deleted: %s", exc)
        self.book.prune()
        for key in [
            k for k, e in self._revoked.items() if not e.is_set() and not self.book.ids_held(k)
        ]:
            del self._revoked[key]
        return expired

    # ------------------------------------------------------------------ human side

    async def list_messages(self, call: Call) -> Any:
        user = call.actor.user
        pane = call.params.get("pane")
        if pane is not None and (not isinstance(pane, str) or not is_pane_id(pane)):
            raise BadRequest("pane must be a pane id like %3", field="pane")
        visible = [
            m
            for m in self.book.messages()
            if call.actor.kind != "human" or self.outcomes.owners.get(m.key) == user
        ]
        if pane is None:
            panes = sorted(
                {m.sender_pane for m in visible if m.sender_pane}
                | {m.recipient.pane for m in visible}
            )
            return {
                "panes": {p: self.for_pane(p, visible) for p in panes},
                "messages": [self._row(m) for m in visible],
            }
        call.target = pane
        return {"pane": pane, **self.for_pane(pane, visible)}

    def for_pane(self, pane: str, messages: list[Message] | None = None) -> dict[str, Any]:
        """A pane's sent and received messages, newest first (the pane detail's section)."""
        pool = list(self.book.messages()) if messages is None else messages
        sent = [self._row(m) for m in pool if m.sender_pane == pane]
        received = [self._row(m) for m in pool if m.recipient.pane == pane]
        sent.sort(key=lambda r: -float(r["admitted"]))
        received.sort(key=lambda r: -float(r["admitted"]))
        return {"sent": sent, "received": received}

    def _row(self, message: Message) -> dict[str, Any]:
        row = message.to_dict()
        row["preview"] = self._preview.get(message.key, "")
        # what a person reads: the agents by title, harness, pane and branch; the hop in words
        row["sender_name"] = self.outcomes.name(message.sender_pane, message.sender_actor)
        row["recipient_name"] = self.outcomes.name(message.recipient.pane, message.recipient.actor)
        row["hop_words"] = hop_words(message.hop)
        return row


def _origin(value: object) -> str | None:
    """The request a control send stems from (``r12``), named in the recipient's stamp."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("r") or not value[1:].isdigit():
        raise BadRequest("origin must be a request id like r12", field="origin")
    return value


def _local_user() -> str:
    """The daemon's own user: the human a card is for when no grant names one (local mode).
    Never a guess: if the account cannot be named, the message is refused."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        raise Unavailable("cannot tell which user this daemon runs as") from None
