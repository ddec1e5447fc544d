"""The human's consent actions: list cards, decide one; and the expiry sweep."""

from __future__ import annotations

from typing import Any

from openbus.daemon.cards import Cards
from openbus.daemon.core.actions import Action
from openbus.daemon.core.consent import CardState, Tier, parse_decision
from openbus.daemon.gate import Call, Gate
from openbus.kernel.errors import BadRequest, Conflict, Forbidden

LIST = Action("cards.list", tier=Tier.HUMAN)
DECIDE = Action("cards.decide", tier=Tier.HUMAN, outside_effects=True)


def card_list(cards: Cards, user: str, *, pending: bool = True) -> list[dict[str, Any]]:
    """``user``'s cards (what ``cards.list`` answers)."""
    return [card.to_dict() for card in cards.listing(user, pending_only=pending)]


def register(gate: Gate, cards: Cards) -> None:
    async def list_cards(call: Call) -> Any:
        assert call.actor.user is not None
        return card_list(cards, call.actor.user, pending=bool(call.params.get("pending", True)))

    async def decide(call: Call) -> Any:
        assert call.actor.user is not None
        card_id = call.params.get("card")
        if not isinstance(card_id, str) or not card_id:
            raise BadRequest("a card id is required", field="card")
        decision = parse_decision(call.params.get("decision"))
        call.target = card_id
        call.details["decision"] = decision.value
        current = cards.get(card_id)
        if current.owner != call.actor.user:
            raise Forbidden(f"card {card_id} belongs to another user")
        resolved = current.resolve_expiry(cards.clock.now())
        if resolved.state is CardState.EXPIRED and current.state is CardState.PENDING:
            draft, writes = cards.resolution_record(resolved)
            gate.record(draft, writes)
            cards.notify(resolved)
            raise Conflict(f"card {card_id} expired before the decision")
        decided, writes = cards.decide(card_id, decision, call.actor.user)
        for write in writes:
            call.write(write)
        call.outcome = "declined" if decided.state is CardState.DECLINED else "approved"
        call.details["kind"] = decided.kind
        call.after_commit.append(lambda: cards.notify(decided))
        return decided.to_dict()

    gate.register(LIST, list_cards)
    gate.register(DECIDE, decide)


def sweep_expired(gate: Gate, cards: Cards) -> int:
    """Resolve every pending card whose time has passed; one system record each."""
    count = 0
    for card in cards.expired_unresolved():
        draft, writes = cards.resolution_record(card)
        gate.record(draft, writes)
        cards.notify(card)
        count += 1
    return count
