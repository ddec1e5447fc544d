"""Consent: tiers, cards and approvals.

Theory of operation
-------------------
Every action has a *tier*:

* ``READ``: runs at once and is audited (directory, pane detail, history).
* ``CARD``: needs the human's consent unless an approval already covers it: a message to an
  idle agent pane, a session start, a restart-to-connect. The gate raises a *card*.
* ``NEVER_FOR_PEERS``: keys, windows, resumes, sends to shell panes: never offered to an
  ordinary agent; only the human and control (under its own tiers) may do them.
* ``HUMAN``: the human's own actions on the human API (decide a card, connect, launch).

A card is a small state machine::

    PENDING --approve--------> APPROVED        (this one action)
    PENDING --approve_pair---> APPROVED_PAIR   (and the pair, for the recipient's life)
    PENDING --decline--------> DECLINED
    PENDING --time passes----> EXPIRED         (resolved lazily: at the next look or sweep)
    PENDING --revocation-----> CANCELLED       (either end's grant went away)

Every state but PENDING is final; a decision on a final card is a ``Conflict``, a decision
by a human the card does not belong to is ``Forbidden``. An expired card is resolved as
expired *before* a late decision is judged, so a late tap never approves anything.

Approvals are facts the gate consults before raising a card: ``once`` (consumed by the
action a card approved), ``pair`` (sender principal -> recipient principal, for the
recipient's life: it dies with the recipient's grant), ``spawn`` (this principal may start
sessions).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any

from openbus.kernel.errors import BadRequest, Conflict, Forbidden

DEFAULT_CARD_TTL = 15 * 60.0


class Tier(enum.Enum):
    READ = "read"
    CARD = "card"
    NEVER_FOR_PEERS = "never_for_peers"
    HUMAN = "human"


class CardState(enum.StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    APPROVED_PAIR = "approved_pair"
    DECLINED = "declined"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self is not CardState.PENDING


class Decision(enum.StrEnum):
    APPROVE = "approve"
    APPROVE_PAIR = "approve_pair"
    DECLINE = "decline"


_DECISION_STATE = {
    Decision.APPROVE: CardState.APPROVED,
    Decision.APPROVE_PAIR: CardState.APPROVED_PAIR,
    Decision.DECLINE: CardState.DECLINED,
}

CARD_KINDS = frozenset(
    {
        "message",
        "start_session",
        "restart_to_connect",
        "hop_limit",
        "composer_left",
        "control_key",
        "control_window",
        "control_resume",
    }
)


def parse_decision(value: object) -> Decision:
    if not isinstance(value, str):
        raise BadRequest("must be one of approve, approve_pair, decline", field="decision")
    try:
        return Decision(value)
    except ValueError:
        raise BadRequest(
            f"must be one of approve, approve_pair, decline; got {value!r}", field="decision"
        ) from None


@dataclass(frozen=True)
class Card:
    id: str
    kind: str
    requester: str  # actor name
    owner: str  # the human user whose card this is
    summary: str
    created: float
    expires: float
    target: str | None = None
    requester_principal: str | None = None
    target_principal: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    state: CardState = CardState.PENDING
    decided_by: str | None = None
    decided: float | None = None

    def resolve_expiry(self, now: float) -> Card:
        """The same card, resolved as expired if its time has passed while pending."""
        if self.state is CardState.PENDING and now >= self.expires:
            return replace(self, state=CardState.EXPIRED, decided=self.expires, decided_by="system")
        return self

    def decide(self, decision: Decision, *, by_user: str, now: float) -> Card:
        current = self.resolve_expiry(now)
        if by_user != current.owner:
            raise Forbidden(f"card {self.id} belongs to another user")
        if current.state.final:
            raise Conflict(f"card {self.id} is already {current.state.value}")
        if decision is Decision.APPROVE_PAIR and current.kind not in ("message", "hop_limit"):
            raise BadRequest("approve_pair applies only to message cards", field="decision")
        return replace(
            current, state=_DECISION_STATE[decision], decided_by=f"human:{by_user}", decided=now
        )

    def cancel(self, now: float) -> Card:
        if self.state.final:
            return self
        return replace(self, state=CardState.CANCELLED, decided_by="system", decided=now)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "requester": self.requester,
            "owner": self.owner,
            "summary": self.summary,
            "target": self.target,
            "created": self.created,
            "expires": self.expires,
            "state": self.state.value,
            "decided_by": self.decided_by,
            "decided": self.decided,
        }


def new_card(
    *,
    card_id: str,
    kind: str,
    requester: str,
    owner: str,
    summary: str,
    now: float,
    ttl: float = DEFAULT_CARD_TTL,
    target: str | None = None,
    requester_principal: str | None = None,
    target_principal: str | None = None,
    payload: dict[str, Any] | None = None,
) -> Card:
    if kind not in CARD_KINDS:
        raise ValueError(f"unknown card kind {kind!r}")
    return Card(
        id=card_id,
        kind=kind,
        requester=requester,
        owner=owner,
        summary=summary,
        created=now,
        expires=now + ttl,
        target=target,
        requester_principal=requester_principal,
        target_principal=target_principal,
        payload=dict(payload or {}),
    )


class ApprovalKind(enum.StrEnum):
    PAIR = "pair"
    SPAWN = "spawn"
    OPEN_PANES = "open_panes"  # "control may open panes": subject control:<user>, object "*"


@dataclass(frozen=True)
class Approval:
    kind: ApprovalKind
    subject: str  # the principal acting (sender, spawner)
    object: str  # the recipient principal, or "*" for spawn
