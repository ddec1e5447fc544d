"""Peer messaging: the queue, delivery, consent and the tools and views over them.

``build`` assembles the feature on the directory's fleet: one ``MessageBook`` (the pure
rules), ``Addressing`` (target to recipient), ``HeldIds`` (the ids in the state database) and
``Outcomes`` (every ending recorded once),
which the ``MessagingService`` (the gate actions ``message.send``, ``message.status``,
``messages.list``, consent and revocation) and the ``DeliveryEngine`` (typing at idle) share;
neither of those two calls the other except for the service waking delivery.
``mcp_tools.MESSAGING_TOOLS`` are its MCP tools.
"""

from __future__ import annotations

from openbus.daemon.cards import Cards
from openbus.daemon.connect import Connect
from openbus.daemon.core.messaging import MessageBook, MessageLimits
from openbus.daemon.gate import Gate
from openbus.daemon.grants import Grants
from openbus.daemon.messaging.addressing import Addressing
from openbus.daemon.messaging.delivery import DEFAULT_TIMEOUTS, DeliveryEngine, DeliveryTimeouts
from openbus.daemon.messaging.fleet import Fleet
from openbus.daemon.messaging.held_ids import HeldIds
from openbus.daemon.messaging.outcomes import Outcomes
from openbus.daemon.messaging.service import MessagingService
from openbus.daemon.pane_owners import PaneOwners
from openbus.daemon.policy_runtime import PolicyRuntime
from openbus.daemon.state import StateDB
from openbus.kernel.clock import Clock


class PolicyLimits:
    """The book's limits in force: the built-in maxima as the org policy tightens them now."""

    def __init__(self, policy: PolicyRuntime) -> None:
        self.policy = policy
        self._from: object = None
        self._now = MessageLimits()

    def __call__(self) -> MessageLimits:
        limits = self.policy.limits
        if limits is not self._from:
            self._from, self._now = limits, MessageLimits.from_limits(limits)
        return self._now


def build(
    *,
    gate: Gate,
    grants: Grants,
    cards: Cards,
    connect: Connect,
    clock: Clock,
    policy: PolicyRuntime,
    fleet: Fleet,
    db: StateDB,
    owners: PaneOwners,
    timeouts: DeliveryTimeouts = DEFAULT_TIMEOUTS,
) -> MessagingService:
    book = MessageBook(clock, PolicyLimits(policy))
    addressing = Addressing(fleet, grants, cards, owners)
    held_ids = HeldIds(db)
    outcomes = Outcomes(book, gate, cards, clock, held_ids, view=fleet.view)
    return MessagingService(
        gate=gate,
        grants=grants,
        cards=cards,
        connect=connect,
        clock=clock,
        book=book,
        addressing=addressing,
        outcomes=outcomes,
        delivery=DeliveryEngine(book, addressing, outcomes, timeouts),
        held_ids=held_ids,
    )
