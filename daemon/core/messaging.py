"""Peer messages: admission, at-most-once ids, consent, hops and outcomes, as a pure book.

Theory of operation
-------------------
A ``MessageBook`` holds every message the daemon knows about, in memory, and no I/O: the
clock is injected, and the adapters (``daemon.messaging``) do the typing, the cards and the
audit records around the decisions it returns.

**Admission** happens before anything is stored: ``check`` judges a message and returns an
``Admission`` without touching the book; ``commit`` stores it (the adapter commits right after
the call's audit record is written, so an action that could not be audited leaves nothing
behind); ``admit`` is both. In order ``check`` tests
the message id's form, that the id is not already held by this sender, the text (printable
characters and newlines only: ESC, CR, TAB, every other Cc/Cf character, bidirectional
overrides and isolates, line/paragraph separators, private-use and unassigned code points
are refused, see ``check_text``), the byte cap, the sender's and the pair's rate (a sliding
window of the admissions in the last minute), the recipient's and the daemon's queued-byte
budget and the sender's id cap. A refusal raises ``Refused`` (or ``Conflict`` for a held id)
naming the field; it stores nothing, consumes no id and adds nothing to any rate window, so
a flood of refusals holds no memory and a retry with the same id is judged afresh.

**Ids.** An admitted message holds its id, keyed by (sender principal, message id), for one
hour from admission. An unexpired id is never evicted: at the cap new messages are refused.
A message still waiting when its hour ends is finalized ``expired`` by ``due()``; the adapter
records that outcome and only then calls ``release()``, so no retry can queue a second copy
beside the original.

**Conversations and hops** are assigned here, never taken from the caller: a message from a
principal that received one within ``reply_window`` seconds joins that message's
conversation with the next hop; otherwise it opens a new conversation at hop 0. A message
whose hop exceeds ``hop_limit`` needs a card even for an approved pair.

**Consent.** Control needs no card below the hop limit; any other sender needs one for a
pair the human has not approved. The message waits in ``CONSENT`` until the card is decided.

**Message state machine** (``phase``; the answer a sender sees is ``outcome``)::

    admit --(card needed)--> CONSENT --approve--> QUEUED
      \\                         |--decline--> FINAL(declined)
       \\                        |--card expired/cancelled, revoked--> FINAL(expired/cancelled)
        \\--(covered)---------> QUEUED --begin_typing--> TYPING --finish--> FINAL(delivered
                                  |                                           | unconfirmed)
                                  |--retarget (handle moved)--> QUEUED or CONSENT
                                  |--incarnation changed, revoked--> FINAL(cancelled)
                                  |--new recipient refused--> FINAL(refused)
    CONSENT or QUEUED --hour over (due)--> FINAL(expired) --release--> (id free)
    FINAL --hour over (due)--> release

``queued`` is the only interim outcome (CONSENT, QUEUED and TYPING all answer ``queued``);
``delivered``, ``declined``, ``refused``, ``cancelled``, ``expired`` and ``unconfirmed`` are
final, and a message reaches exactly one of them. ``begin_typing`` is allowed once per
admitted message: no id is ever typed twice. A TYPING message is never cancelled or expired
from outside: the adapter types under the pane's send lock, which revocation also takes, so
the attempt finishes first and the cancellation sees a final message.

Limits default to the built-in maxima (``openbus.policy.limits``) and an org policy can only
tighten them; ``MessageLimits.from_limits`` maps the policy's limits onto the book's.
"""

from __future__ import annotations

import enum
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from openbus.daemon.core.clock import Clock
from openbus.daemon.core.errors import BadRequest, Conflict, Refused
from openbus.policy.limits import BUILTIN_LIMITS, Limits

ID_TTL_SECONDS = 3600.0
REPLY_WINDOW_SECONDS = 300.0
RATE_WINDOW_SECONDS = 60.0
TOTAL_QUEUE_BYTES = 8 * 1024 * 1024
EXPIRY_REASON = "its hour ran out before it could be delivered"

_MESSAGE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")

# Spaces other than U+0020 are printable text; everything else str.isprintable() rejects
# (Cc, Cf, Cs, Co, Cn, Zl, Zp) is refused, and the newline is the one control allowed.
_SPACES = "\u00a0\u1680" + "".join(chr(c) for c in range(0x2000, 0x200B)) + "\u202f\u205f\u3000"
_TO_PRINTABLE = str.maketrans(dict.fromkeys([*_SPACES, "\n"], " "))
_NAMED = {
    "\x1b": "escape",
    "\r": "carriage return",
    "\t": "tab",
    "\x00": "NUL",
    "\x7f": "delete",
    "\u2028": "line separator",
    "\u2029": "paragraph separator",
    "\u200e": "left-to-right mark",
    "\u200f": "right-to-left mark",
    "\u061c": "arabic letter mark",
}
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")


def _describe(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    if ch in _BIDI:
        return "bidirectional override"
    if ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0:
        return "control character"
    return "non-printable character"


def check_text(text: object, max_bytes: int) -> int:
    """The UTF-8 size of an admissible message text; raise ``Refused``/``BadRequest`` if not."""
    if not isinstance(text, str):
        raise BadRequest("text must be a string", field="text")
    if not text:
        raise BadRequest("text must not be empty", field="text")
    if len(text) > max_bytes:  # every character is at least one byte: refuse before encoding
        raise Refused(f"text is longer than the {max_bytes}-byte cap", field="text")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        size = -1
    if size > max_bytes:
        raise Refused(f"text is {size} bytes, above the {max_bytes}-byte cap", field="text")
    flat = text.translate(_TO_PRINTABLE)
    if not flat.isprintable():
        for offset, ch in enumerate(flat):
            if not ch.isprintable():
                raise Refused(
                    f"text holds U+{ord(ch):04X} ({_describe(ch)}) at offset {offset}: only "
                    "printable text and newlines are allowed",
                    field="text",
                )
    if size < 0:  # pragma: no cover - a lone surrogate is not printable, refused above
        raise Refused("text is not valid Unicode", field="text")
    return size


def check_message_id(message_id: object) -> str:
    if not isinstance(message_id, str) or not _MESSAGE_ID.fullmatch(message_id):
        raise BadRequest(
            "message_id must be 1-128 characters of letters, digits and . _ : - "
            "(starting with a letter or digit)",
            field="message_id",
        )
    return message_id


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
            "bytes": self.size,
            "admitted": self.admitted,
            "finalized": self.finalized,
        }


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

    def __init__(self, clock: Clock, limits: MessageLimits | None = None) -> None:
        self.clock = clock
        self.limits = limits or MessageLimits()
        self._messages: dict[tuple[str, str], Message] = {}
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

    def get(self, sender: str, message_id: str) -> Message | None:
        return self._messages.get((sender, message_id))

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
    ) -> Admission:
        """Judge a message: an ``Admission`` to ``commit``, or raise why not. Stores nothing."""
        mid = check_message_id(message_id)
        held = self._messages.get((sender, mid))
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
        if hop > limits.hop_limit:
            need = CardNeed.HOP
        elif control or pair_approved:
            need = CardNeed.NONE
        else:
            need = CardNeed.PAIR
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
        )
        message.history.append("queued" if need is CardNeed.NONE else f"card:{need.value}")
        return Admission(message, need, mono)

    def commit(self, admission: Admission) -> Message:
        """Store a checked message: from here on it holds its id, bytes and rate samples.
        Nothing may run between ``check`` and ``commit`` (the adapter commits right after the
        audit record is written, with no await in between)."""
        message = admission.message
        if message.key in self._messages:
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

    def admit(self, **fields: Any) -> Admission:
        """``check`` then ``commit``."""
        admission = self.check(**fields)
        self.commit(admission)
        return admission

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

    def attach_card(self, message: Message, card_id: str) -> None:
        if message.phase is not Phase.CONSENT:
            raise ValueError(f"message {message.message_id} is not waiting for consent")
        message.card_id = card_id
        self._cards[card_id] = message.key

    def consent_granted(self, message: Message) -> bool:
        """CONSENT -> QUEUED. False if the message had already moved on."""
        if message.phase is not Phase.CONSENT:
            return False
        message.phase = Phase.QUEUED
        message.history.append("approved")
        self._forget_card(message)
        return True

    def needs_consent(self, message: Message, need: CardNeed) -> None:
        """QUEUED -> CONSENT (a handle moved to a recipient whose pair is not approved)."""
        if message.phase is not Phase.QUEUED:
            raise ValueError(f"message {message.message_id} is not queued")
        message.phase = Phase.CONSENT
        message.history.append(f"card:{need.value}")

    def _forget_card(self, message: Message) -> None:
        if message.card_id is not None:
            self._cards.pop(message.card_id, None)

    # ------------------------------------------------------------------ delivery

    def begin_typing(self, message: Message) -> None:
        """QUEUED -> TYPING: the one typing attempt. Never twice for one admitted message."""
        if message.phase is not Phase.QUEUED or message.typed:
            raise ValueError(
                f"message {message.message_id} cannot be typed now ({message.phase.value})"
            )
        message.phase = Phase.TYPING
        message.typed = True

    def finish(self, message: Message, outcome: Outcome, reason: str | None = None) -> bool:
        """TYPING -> delivered or unconfirmed; the recipient has now received a message."""
        if message.phase is not Phase.TYPING:
            raise ValueError(f"message {message.message_id} is not being typed")
        if outcome not in (Outcome.DELIVERED, Outcome.UNCONFIRMED):
            raise ValueError(f"a typing attempt ends delivered or unconfirmed, not {outcome.value}")
        self._received[message.recipient.key] = _Received(
            message.conversation, message.hop, self.clock.now()
        )
        return self._final(message, outcome, reason)

    def retarget(
        self, message: Message, recipient: Recipient, *, pair_approved: bool, control: bool = False
    ) -> CardNeed:
        """A handle now resolves to another pane: a new recipient, so consent starts over."""
        if message.phase not in (Phase.QUEUED, Phase.CONSENT):
            raise ValueError(
                f"message {message.message_id} cannot move now ({message.phase.value})"
            )
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
        if message.hop > self.limits.hop_limit:
            need = CardNeed.HOP
        elif control or pair_approved:
            need = CardNeed.NONE
        else:
            need = CardNeed.PAIR
        if need is CardNeed.NONE:
            if message.phase is Phase.CONSENT:
                self._forget_card(message)
                message.card_id = None
                message.phase = Phase.QUEUED
        else:
            self._forget_card(message)
            message.card_id = None
            message.phase = Phase.CONSENT
            message.history.append(f"card:{need.value}")
        return need

    # ------------------------------------------------------------------ endings

    def finalize(self, message: Message, outcome: Outcome, reason: str | None = None) -> bool:
        """CONSENT or QUEUED -> a final outcome (declined, refused, cancelled, expired).

        False (and no change) if the message is already final or being typed.
        """
        if outcome in (Outcome.QUEUED, Outcome.DELIVERED, Outcome.UNCONFIRMED):
            raise ValueError(f"{outcome.value} is not an outcome reached without typing")
        if message.phase in (Phase.FINAL, Phase.TYPING):
            return False
        return self._final(message, outcome, reason)

    def _final(self, message: Message, outcome: Outcome, reason: str | None) -> bool:
        message.phase = Phase.FINAL
        message.outcome = outcome
        message.reason = reason
        message.finalized = self.clock.now()
        message.history.append(outcome.value)
        self._forget_card(message)
        self._free(message.recipient.pane, message)
        message.text = ""  # the text is not kept past its outcome
        return True

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

    def due(self) -> list[Message]:
        """``expire_due()`` then every final message whose hour is over (to ``release``)."""
        self.expire_due()
        return self.releasable()

    def expire_due(self) -> list[Message]:
        """Finalize ``expired`` every waiting message whose hour is over and return them:
        the adapter records each outcome, then calls ``release``. A message being typed is
        left until its attempt ends."""
        now = self.clock.now()
        out = []
        for message in list(self._messages.values()):
            if now >= message.expires and message.phase in (Phase.CONSENT, Phase.QUEUED):
                self._final(message, Outcome.EXPIRED, EXPIRY_REASON)
                out.append(message)
        return out

    def releasable(self) -> list[Message]:
        """Final messages whose hour is over: their ids may be released."""
        now = self.clock.now()
        return [m for m in list(self._messages.values()) if m.final and now >= m.expires]

    def release(self, message: Message) -> None:
        """Free a final message's id once its hour is over and its outcome is recorded."""
        if not message.final:
            raise ValueError(f"message {message.message_id} has no final outcome yet")
        if self.clock.now() < message.expires:
            raise ValueError(f"message {message.message_id} still holds its id")
        if self._messages.get(message.key) is not message:
            return
        del self._messages[message.key]
        left = self._ids_held.get(message.sender, 0) - 1
        if left > 0:
            self._ids_held[message.sender] = left
        else:
            self._ids_held.pop(message.sender, None)

    def prune(self) -> None:
        """Drop empty rate windows and stale hop memories (memory stays flat)."""
        mono = self.clock.monotonic()
        for table in (self._sender_rate, self._pair_rate):
            for key in [k for k, w in table.items() if self._window(w, mono) == 0]:
                del table[key]  # type: ignore[arg-type]
        now = self.clock.now()
        for key in [k for k, r in self._received.items() if now - r.at > self.limits.reply_window]:
            del self._received[key]

    def with_limits(self, limits: MessageLimits) -> None:
        self.limits = limits


__all__ = [
    "FINAL_OUTCOMES",
    "Admission",
    "CardNeed",
    "Message",
    "MessageBook",
    "MessageLimits",
    "Outcome",
    "Phase",
    "Recipient",
    "Target",
    "check_message_id",
    "check_text",
]
