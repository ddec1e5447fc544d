"""Peer messages: admission, at-most-once ids, hops, consent and outcomes, as a pure book.

Theory of operation
-------------------
A ``MessageBook`` holds every message of one daemon lifetime in memory, with no I/O (the
clock is injected); the adapters (``daemon.messaging``) type, raise cards and write audit
records around the decisions it returns.

**Admission.** ``check`` judges a message and stores nothing: the id's form
(``core.message_text``) and that this sender does not hold it (``Conflict``), the text, the
byte cap, the sender's and the pair's rate (admissions in a sliding minute), the recipient's
and the daemon's queued bytes, the sender's id cap. A refusal names the field and consumes no
id or rate sample, so a retry is judged afresh. ``commit`` stores the checked message; the
adapter calls it right after the call's audit record is written.

**Ids** are held per (sender principal, message id) for an hour from admission and never
evicted early. A message still waiting when its hour ends is ended ``expired``
(``expire_due``); the adapter records that outcome and only then ``release``s the id.
The adapter keeps every held id, with its outcome and expiry, in the state database in the
same transaction as the record that admitted or ended it; a new daemon lifetime ``restore``s
them as ``HeldId``s, so a retried (sender, id) is refused across a restart within its hour.
An id whose message had no final outcome when the daemon stopped is restored ``unconfirmed``
(``HeldId.after_restart``): the text is gone with the old process, and it may have been typed.

**Hops and cards.** A message from a principal that received one within ``reply_window``
joins that conversation at the next hop, else it opens one at hop 0. ``_card_need``: a hop
over the limit needs a card even for an approved pair (HOP); else control or an approved pair
needs none; else a new pair needs one (PAIR). A message is admitted QUEUED if it needs no
card, else CONSENT.

**Lifecycle.** ``phase`` changes only through ``_move``, along ``MOVES``; any other move is
an ``InvalidTransition`` (a bug in the caller). An event is a ``Step`` or the final
``Outcome`` a message ends with (``end_waiting``, ``end_typing``)::

    CONSENT --approve--> QUEUED    the human approved its card
    CONSENT --attach--> CONSENT    its card was raised
    CONSENT --covered--> QUEUED    its handle moved to a recipient consent covers
    CONSENT --card--> CONSENT      its handle moved to another new pair: a new card
    CONSENT --declined|refused|cancelled|expired--> FINAL
    QUEUED --type--> TYPING        the one typing attempt begins
    QUEUED --covered--> QUEUED     its handle moved to a recipient consent covers
    QUEUED --card--> CONSENT       its handle moved to a new pair
    QUEUED --refused|cancelled|expired--> FINAL
    TYPING --delivered|unconfirmed--> FINAL
    FINAL --release--> FINAL       its hour is over and its outcome recorded: the id is free

Nothing leads back out of TYPING, so no id is ever typed twice. ``queued`` is the one interim
outcome (CONSENT, QUEUED and TYPING all answer it); each message reaches exactly one final
outcome. ``end_waiting`` on a message that has moved on (being typed, already final, or
declined once it no longer waits for its card) changes nothing and returns False: the adapter
types under the pane's send lock, which revocation also takes, so an attempt finishes first.

Limits default to the built-in maxima (``openbus.kernel.limits``) and an org policy can only
tighten them; ``MessageLimits.from_limits`` maps the policy's limits onto the book's.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TypeAlias

from openbus.daemon.core.message_text import check_message_id, check_text
from openbus.kernel.clock import Clock
from openbus.kernel.errors import Conflict, InvalidTransition, Refused, along
from openbus.kernel.limits import BUILTIN_LIMITS, Limits

ID_TTL_SECONDS = 3600.0
REPLY_WINDOW_SECONDS = 300.0
RATE_WINDOW_SECONDS = 60.0
TOTAL_QUEUE_BYTES = 8 * 1024 * 1024
EXPIRY_REASON = "its hour ran out before it could be delivered"
RESTART_REASON = (
    "the daemon restarted before this message's outcome was known; it may have been typed"
)


class Outcome(enum.StrEnum):
    QUEUED = "queued"
    DELIVERED = "delivered"
    DECLINED = "declined"
    REFUSED = "refused"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    UNCONFIRMED = "unconfirmed"

    @property
    def final(self) -> bool:
        return self is not Outcome.QUEUED


FINAL_OUTCOMES = frozenset(o for o in Outcome if o.final)


class Phase(enum.StrEnum):
    CONSENT = "consent"  # waiting for the human's card
    QUEUED = "queued"  # covered by consent, waiting for an idle pane
    TYPING = "typing"  # the one typing attempt is under way
    FINAL = "final"


class Step(enum.StrEnum):
    """The events that are not endings (an ending's event is its final ``Outcome``)."""

    APPROVE = "approve"
    ATTACH = "attach"
    COVERED = "covered"
    CARD = "card"
    TYPE = "type"
    RELEASE = "release"


Event: TypeAlias = Step | Outcome

_C, _Q, _T, _F = Phase.CONSENT, Phase.QUEUED, Phase.TYPING, Phase.FINAL

MOVES: Mapping[tuple[Phase, Event], Phase] = MappingProxyType(
    {
        (_C, Step.APPROVE): _Q,
        (_C, Step.ATTACH): _C,
        (_C, Step.COVERED): _Q,
        (_C, Step.CARD): _C,
        (_C, Outcome.DECLINED): _F,
        (_C, Outcome.REFUSED): _F,
        (_C, Outcome.CANCELLED): _F,
        (_C, Outcome.EXPIRED): _F,
        (_Q, Step.TYPE): _T,
        (_Q, Step.COVERED): _Q,
        (_Q, Step.CARD): _C,
        (_Q, Outcome.REFUSED): _F,
        (_Q, Outcome.CANCELLED): _F,
        (_Q, Outcome.EXPIRED): _F,
        (_T, Outcome.DELIVERED): _F,
        (_T, Outcome.UNCONFIRMED): _F,
        (_F, Step.RELEASE): _F,
    }
)


def _ends(*phases: Phase) -> frozenset[Outcome]:
    return frozenset(e for p, e in MOVES if p in phases and isinstance(e, Outcome))


WAITING_ENDS = _ends(Phase.CONSENT, Phase.QUEUED)  # declined, refused, cancelled, expired
TYPING_ENDS = _ends(Phase.TYPING)  # delivered, unconfirmed


def _next(message: Message, event: Event) -> Phase:
    """The phase ``event`` takes ``message`` to, along ``MOVES``; else ``InvalidTransition``."""
    return along(MOVES, message.phase, event, f"message {message.message_id}")


def _move(message: Message, event: Event) -> None:
    """The one place a message's phase changes."""
    message.phase = _next(message, event)


@dataclass(frozen=True)
class MessageLimits:
    message_bytes: int = BUILTIN_LIMITS.message_bytes
    sender_per_minute: int = BUILTIN_LIMITS.sender_rate_per_minute
    pair_per_minute: int = BUILTIN_LIMITS.pair_rate_per_minute
    hop_limit: int = BUILTIN_LIMITS.hop_limit
    recipient_queue_bytes: int = BUILTIN_LIMITS.queue_bytes
    ids_per_principal: int = BUILTIN_LIMITS.ids_per_principal
    total_queue_bytes: int = TOTAL_QUEUE_BYTES
    id_ttl: float = ID_TTL_SECONDS
    reply_window: float = REPLY_WINDOW_SECONDS
    rate_window: float = RATE_WINDOW_SECONDS

    @classmethod
    def from_limits(cls, limits: Limits) -> MessageLimits:
        """The book's limits under a policy's (already validated, never above the maxima)."""
        return cls(
            message_bytes=limits.message_bytes,
            sender_per_minute=limits.sender_rate_per_minute,
            pair_per_minute=limits.pair_rate_per_minute,
            hop_limit=limits.hop_limit,
            recipient_queue_bytes=limits.queue_bytes,
            ids_per_principal=limits.ids_per_principal,
        )


@dataclass(frozen=True)
class Recipient:
    """Where a message goes right now: one live pane and, if it has one, its principal."""

    pane: str
    incarnation: str
    principal: str | None = None  # the recipient agent's principal (None: a pure agent)
    harness: str = "unknown"
    actor: str | None = None  # the recipient agent's actor name, for records

    @property
    def key(self) -> str:
        """What hops and pair approvals key on: the principal, else this pane incarnation."""
        return self.principal or f"pane:{self.pane}:{self.incarnation}"


@dataclass(frozen=True)
class Target:
    """How the sender addressed the message: a pane with its incarnation, or a handle."""

    pane: str | None = None
    incarnation: str | None = None
    handle: str | None = None

    def describe(self) -> str:
        return self.handle if self.handle is not None else f"{self.pane}"


@dataclass
class Message:
    sender: str  # the sender's principal
    sender_actor: str  # the sender's actor name
    message_id: str
    target: Target
    recipient: Recipient
    text: str
    size: int
    conversation: str
    hop: int
    admitted: float
    expires: float
    phase: Phase = Phase.QUEUED
    outcome: Outcome = Outcome.QUEUED
    reason: str | None = None
    card_id: str | None = None
    sender_pane: str | None = None
    origin: str | None = None  # the front-end request this input stems from (control's sends)
    typed: bool = False
    finalized: float | None = None
    history: list[str] = field(default_factory=list)  # outcomes and moves, for the human side

    @property
    def key(self) -> tuple[str, str]:
        return (self.sender, self.message_id)

    @property
    def final(self) -> bool:
        return self.phase is Phase.FINAL

    def to_dict(self) -> dict[str, object]:
        return {
            "message_id": self.message_id,
            "sender": self.sender_actor,
            "sender_pane": self.sender_pane,
            "target": self.target.describe(),
            "recipient_pane": self.recipient.pane,
            "recipient": self.recipient.actor,
            "outcome": self.outcome.value,
            "phase": self.phase.value,
            "reason": self.reason,
            "card": self.card_id,
            "conversation": self.conversation,
            "hop": self.hop,
            "origin": self.origin,
            "bytes": self.size,
            "admitted": self.admitted,
            "finalized": self.finalized,
        }


@dataclass(frozen=True)
class HeldId:
    """An id held from an earlier daemon lifetime: who sent it, its outcome, its hour's end."""

    sender: str
    message_id: str
    sender_actor: str
    recipient_pane: str | None
    outcome: Outcome
    expires: float

    @property
    def key(self) -> tuple[str, str]:
        return (self.sender, self.message_id)

    def after_restart(self) -> HeldId:
        """What a new lifetime holds: an outcome that was not final is ``unconfirmed``."""
        if self.outcome.final:
            return self
        return replace(self, outcome=Outcome.UNCONFIRMED)


class CardNeed(enum.StrEnum):
    NONE = "none"
    PAIR = "message"  # a new pair: the card kind "message"
    HOP = "hop_limit"  # past the hop limit: a card even for an approved pair


@dataclass(frozen=True)
class Admission:
    message: Message
    card: CardNeed
    at: float = 0.0  # the monotonic time of the check (its rate sample)


@dataclass(frozen=True)
class _Received:
    conversation: str
    hop: int
    at: float


class MessageBook:
    """Every message of one daemon lifetime, and the rules over them."""

    def __init__(
        self, clock: Clock, limits: MessageLimits | Callable[[], MessageLimits] | None = None
    ) -> None:
        self.clock = clock
        fixed = limits if isinstance(limits, MessageLimits) else MessageLimits()
        self._limits: Callable[[], MessageLimits] = limits if callable(limits) else lambda: fixed
        self._messages: dict[tuple[str, str], Message] = {}
        self._restored: dict[tuple[str, str], HeldId] = {}  # from an earlier lifetime
        self._ids_held: dict[str, int] = {}
        self._sender_rate: dict[str, deque[float]] = {}
        self._pair_rate: dict[tuple[str, str], deque[float]] = {}
        self._queued_bytes: dict[str, int] = {}  # by recipient pane
        self._total_bytes = 0
        self._live: dict[str, dict[tuple[str, str], Message]] = {}  # unfinished, by pane
        self._handles: dict[tuple[str, str], Message] = {}  # unfinished, addressed by handle
        self._received: dict[str, _Received] = {}
        self._cards: dict[str, tuple[str, str]] = {}
        self._conversations = 0

    # ------------------------------------------------------------------ reads

    @property
    def limits(self) -> MessageLimits:
        """The limits in force now (an org policy may tighten them between two calls)."""
        return self._limits()

    def get(self, sender: str, message_id: str) -> Message | None:
        return self._messages.get((sender, message_id))

    def restored(self, sender: str, message_id: str) -> HeldId | None:
        """An id this sender used in an earlier daemon lifetime, still within its hour."""
        return self._restored.get((sender, message_id))

    def by_card(self, card_id: str) -> Message | None:
        key = self._cards.get(card_id)
        return self._messages.get(key) if key else None

    def messages(self) -> Iterator[Message]:
        return iter(list(self._messages.values()))

    def waiting_for(self, pane: str) -> list[Message]:
        """Messages covered by consent and waiting for ``pane`` to be idle, oldest first."""
        live = self._live.get(pane, {})
        found = [m for m in live.values() if m.phase is Phase.QUEUED]
        return sorted(found, key=lambda m: m.admitted)

    def panes_waiting(self) -> set[str]:
        return set(self._live)

    def by_handle(self) -> list[Message]:
        """Unfinished messages addressed by a workstream handle."""
        return list(self._handles.values())

    @property
    def queued_bytes(self) -> int:
        return self._total_bytes

    def queued_bytes_for(self, pane: str) -> int:
        return self._queued_bytes.get(pane, 0)

    def ids_held(self, sender: str) -> int:
        return self._ids_held.get(sender, 0)

    def footprint(self) -> dict[str, int]:
        """Sizes of every structure, for the memory-flat checks."""
        return {
            "messages": len(self._messages),
            "restored_ids": len(self._restored),
            "senders": len(self._ids_held),
            "sender_rates": len(self._sender_rate),
            "pair_rates": len(self._pair_rate),
            "received": len(self._received),
            "cards": len(self._cards),
            "live_panes": len(self._live),
            "handles": len(self._handles),
            "queued_bytes": self._total_bytes,
        }

    # ------------------------------------------------------------------ admission

    def check(
        self,
        *,
        sender: str,
        sender_actor: str,
        message_id: object,
        text: object,
        target: Target,
        recipient: Recipient,
        pair_approved: bool,
        control: bool = False,
        sender_pane: str | None = None,
        origin: str | None = None,
    ) -> Admission:
        """Judge a message: an ``Admission`` to ``commit``, or raise why not. Stores nothing."""
        mid = check_message_id(message_id)
        held = self._messages.get((sender, mid)) or self._restored.get((sender, mid))
        if held is not None:
            raise Conflict(
                f"message id {mid} was already used by this sender "
                f"(outcome: {held.outcome.value}); it is never typed twice: ask message_status, "
                "or send with a new id",
                field="message_id",
            )
        limits = self.limits
        size = check_text(text, limits.message_bytes)
        assert isinstance(text, str)
        if recipient.key == sender:
            raise Refused("an agent cannot message itself", field="target")
        now = self.clock.now()
        mono = self.clock.monotonic()
        sender_window = self._window(self._sender_rate.get(sender), mono)
        if sender_window >= limits.sender_per_minute:
            raise Refused(
                f"rate limit: this sender may send {limits.sender_per_minute} messages a minute",
                field="rate",
            )
        pair = (sender, recipient.key)
        if self._window(self._pair_rate.get(pair), mono) >= limits.pair_per_minute:
            raise Refused(
                f"rate limit: this sender may send {limits.pair_per_minute} messages a minute "
                "to one recipient",
                field="rate",
            )
        if self._queued_bytes.get(recipient.pane, 0) + size > limits.recipient_queue_bytes:
            raise Refused(
                f"the recipient's queue is full ({limits.recipient_queue_bytes} bytes); "
                "try again after it has taken its messages",
                field="queue",
            )
        if self._total_bytes + size > limits.total_queue_bytes:
            raise Refused("the daemon's message queue is full; try again later", field="queue")
        if self._ids_held.get(sender, 0) >= limits.ids_per_principal:
            raise Refused(
                f"id cap: this sender already holds {limits.ids_per_principal} message ids of "
                "the last hour; ids are never evicted early",
                field="message_id",
            )
        conversation, hop = self._hop_for(sender, now)
        need = self._card_need(hop, pair_approved=pair_approved, control=control)
        message = Message(
            sender=sender,
            sender_actor=sender_actor,
            message_id=mid,
            target=target,
            recipient=recipient,
            text=text,
            size=size,
            conversation=conversation,
            hop=hop,
            admitted=now,
            expires=now + limits.id_ttl,
            phase=Phase.QUEUED if need is CardNeed.NONE else Phase.CONSENT,
            sender_pane=sender_pane,
            origin=origin if control else None,
        )
        message.history.append("queued" if need is CardNeed.NONE else f"card:{need.value}")
        return Admission(message, need, mono)

    def commit(self, admission: Admission) -> Message:
        """Store a checked message: from here on it holds its id, bytes and rate samples.
        Nothing may run between ``check`` and ``commit`` (the adapter commits right after the
        audit record is written, with no await in between)."""
        message = admission.message
        if message.key in self._messages or message.key in self._restored:
            raise Conflict(f"message id {message.message_id} was already used", field="message_id")
        if message.conversation == f"cv{self._conversations + 1}" and message.hop == 0:
            self._conversations += 1
        self._messages[message.key] = message
        self._ids_held[message.sender] = self._ids_held.get(message.sender, 0) + 1
        self._sender_rate.setdefault(message.sender, deque()).append(admission.at)
        self._pair_rate.setdefault((message.sender, message.recipient.key), deque()).append(
            admission.at
        )
        self._hold(message.recipient.pane, message)
        return message

    def _window(self, window: deque[float] | None, mono: float) -> int:
        if window is None:
            return 0
        horizon = mono - self.limits.rate_window
        while window and window[0] <= horizon:
            window.popleft()
        return len(window)

    def _hop_for(self, sender: str, now: float) -> tuple[str, int]:
        last = self._received.get(sender)
        if last is not None and now - last.at <= self.limits.reply_window:
            return last.conversation, last.hop + 1
        return f"cv{self._conversations + 1}", 0

    def _hold(self, pane: str, message: Message) -> None:
        self._queued_bytes[pane] = self._queued_bytes.get(pane, 0) + message.size
        self._total_bytes += message.size
        self._live.setdefault(pane, {})[message.key] = message
        if message.target.handle is not None:
            self._handles[message.key] = message

    def _free(self, pane: str, message: Message) -> None:
        left = self._queued_bytes.get(pane, 0) - message.size
        if left > 0:
            self._queued_bytes[pane] = left
        else:
            self._queued_bytes.pop(pane, None)
        self._total_bytes -= message.size
        live = self._live.get(pane)
        if live is not None:
            live.pop(message.key, None)
            if not live:
                del self._live[pane]
        self._handles.pop(message.key, None)

    # ------------------------------------------------------------------ consent

    def _card_need(self, hop: int, *, pair_approved: bool, control: bool) -> CardNeed:
        """The card rule: a hop over the limit needs a card even for an approved pair;
        otherwise control or an approved pair needs none; otherwise a new pair needs one."""
        if hop > self.limits.hop_limit:
            return CardNeed.HOP
        if control or pair_approved:
            return CardNeed.NONE
        return CardNeed.PAIR

    def attach_card(self, message: Message, card_id: str) -> None:
        _move(message, Step.ATTACH)
        message.card_id = card_id
        self._cards[card_id] = message.key

    def consent_granted(self, message: Message) -> bool:
        """CONSENT -> QUEUED. False if the message had already moved on."""
        if (message.phase, Step.APPROVE) not in MOVES:
            return False
        _move(message, Step.APPROVE)
        message.history.append("approved")
        self._forget_card(message)
        return True

    def _forget_card(self, message: Message) -> None:
        if message.card_id is not None:
            self._cards.pop(message.card_id, None)

    # ------------------------------------------------------------------ delivery

    def begin_typing(self, message: Message) -> None:
        """QUEUED -> TYPING: the one typing attempt (nothing leads back to QUEUED)."""
        _move(message, Step.TYPE)
        message.typed = True

    def retarget(
        self, message: Message, recipient: Recipient, *, pair_approved: bool, control: bool = False
    ) -> CardNeed:
        """A handle now resolves to another pane: a new recipient, so consent starts over."""
        need = self._card_need(message.hop, pair_approved=pair_approved, control=control)
        step = Step.COVERED if need is CardNeed.NONE else Step.CARD
        _next(message, step)  # a message being typed or final cannot move: raise, change nothing
        if recipient.pane != message.recipient.pane:
            if (
                self._queued_bytes.get(recipient.pane, 0) + message.size
                > self.limits.recipient_queue_bytes
            ):
                raise Refused("the new recipient's queue is full", field="queue")
            self._free(message.recipient.pane, message)
            self._hold(recipient.pane, message)
        message.recipient = recipient
        message.history.append(f"moved:{recipient.pane}")
        if message.phase is Phase.CONSENT or need is not CardNeed.NONE:
            self._forget_card(message)  # the old card was for the old recipient
            message.card_id = None
        _move(message, step)
        if need is not CardNeed.NONE:
            message.history.append(f"card:{need.value}")
        return need

    # ------------------------------------------------------------------ endings

    def end_typing(self, message: Message, outcome: Outcome, reason: str | None = None) -> None:
        """TYPING -> delivered or unconfirmed; the recipient has now received a message."""
        if outcome not in TYPING_ENDS:
            raise InvalidTransition(
                f"a typing attempt ends delivered or unconfirmed, not {outcome.value}"
            )
        self._end(message, outcome, reason)
        self._received[message.recipient.key] = _Received(
            message.conversation, message.hop, self.clock.now()
        )

    def end_waiting(self, message: Message, outcome: Outcome, reason: str | None = None) -> bool:
        """CONSENT or QUEUED -> a final outcome (declined, refused, cancelled, expired).

        False (and no change) if the message has moved on: being typed, already final, or
        declined once it no longer waits for its card.
        """
        if outcome not in WAITING_ENDS:
            raise InvalidTransition(f"{outcome.value} is not an outcome reached without typing")
        if (message.phase, outcome) not in MOVES:
            return False
        self._end(message, outcome, reason)
        return True

    def _end(self, message: Message, outcome: Outcome, reason: str | None) -> None:
        _move(message, outcome)
        message.outcome = outcome
        message.reason = reason
        message.finalized = self.clock.now()
        message.history.append(outcome.value)
        self._forget_card(message)
        self._free(message.recipient.pane, message)
        message.text = ""  # the text is not kept past its outcome

    def involving(self, principal: str) -> list[Message]:
        """Messages sent or received by ``principal`` that have not reached their outcome."""
        return [
            m
            for m in self._messages.values()
            if not m.final and principal in (m.sender, m.recipient.principal)
        ]

    def addressed_to(self, pane: str) -> list[Message]:
        """Unfinished messages whose recipient is now ``pane``."""
        return list(self._live.get(pane, {}).values())

    def forget_pair_history(self, principal: str) -> None:
        """A revoked principal's received-hop memory goes with its grant."""
        self._received.pop(principal, None)

    def expire_due(self) -> list[Message]:
        """End ``expired`` every waiting message whose hour is over and return them: the
        adapter records each outcome, then calls ``release``. A message being typed is left
        until its attempt ends."""
        now = self.clock.now()
        out = []
        for message in list(self._messages.values()):
            if now >= message.expires and (message.phase, Outcome.EXPIRED) in MOVES:
                self._end(message, Outcome.EXPIRED, EXPIRY_REASON)
                out.append(message)
        return out

    def releasable(self) -> list[Message]:
        """Final messages whose hour is over: their ids may be released."""
        now = self.clock.now()
        return [m for m in list(self._messages.values()) if m.final and now >= m.expires]

    def restore(self, held: Iterable[HeldId]) -> list[HeldId]:
        """Hold the ids of an earlier lifetime still within their hour (each after its
        restart: see ``HeldId.after_restart``) and return them."""
        now = self.clock.now()
        kept = []
        for earlier in held:
            key = earlier.key
            if now >= earlier.expires or key in self._messages or key in self._restored:
                continue
            entry = self._restored[key] = earlier.after_restart()
            self._ids_held[entry.sender] = self._ids_held.get(entry.sender, 0) + 1
            kept.append(entry)
        return kept

    def release_restored(self) -> int:
        """Free the restored ids whose hour is over; how many were freed."""
        now = self.clock.now()
        due = [k for k, e in self._restored.items() if now >= e.expires]
        for key in due:
            del self._restored[key]
            self._drop_id(key[0])
        return len(due)

    def _drop_id(self, sender: str) -> None:
        left = self._ids_held.get(sender, 0) - 1
        if left > 0:
            self._ids_held[sender] = left
        else:
            self._ids_held.pop(sender, None)

    def release(self, message: Message) -> None:
        """Free a final message's id once its hour is over and its outcome is recorded."""
        _move(message, Step.RELEASE)
        if self.clock.now() < message.expires:
            raise InvalidTransition(f"message {message.message_id} still holds its id")
        if self._messages.get(message.key) is not message:
            return
        del self._messages[message.key]
        self._drop_id(message.sender)

    def prune(self) -> None:
        """Drop empty rate windows and stale hop memories (memory stays flat)."""
        mono = self.clock.monotonic()
        for table in (self._sender_rate, self._pair_rate):
            for key in [k for k, w in table.items() if self._window(w, mono) == 0]:
                del table[key]  # type: ignore[arg-type]
        now = self.clock.now()
        for key in [k for k, r in self._received.items() if now - r.at > self.limits.reply_window]:
            del self._received[key]


__all__ = [
    "FINAL_OUTCOMES",
    "MOVES",
    "RESTART_REASON",
    "TYPING_ENDS",
    "WAITING_ENDS",
    "Admission",
    "CardNeed",
    "Event",
    "HeldId",
    "Message",
    "MessageBook",
    "MessageLimits",
    "Outcome",
    "Phase",
    "Recipient",
    "Step",
    "Target",
]
