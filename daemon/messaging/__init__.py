"""Peer messaging: the queue, delivery, consent and the tools and views over them.

``build`` assembles the feature on the directory's fleet: one ``MessageBook`` (the pure
rules), ``Addressing`` (target to recipient) and ``Outcomes`` (every ending recorded once),
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
from openbus.daemon.messaging.outcomes import Outcomes
from openbus.daemon.messaging.service import MessagingService
from openbus.daemon.policy_runtime import PolicyRuntime
from openbus.kernel.clock import Clock


def build(
    *,
    gate: Gate,
    grants: Grants,
    cards: Cards,
    connect: Connect,
    clock: Clock,
    policy: PolicyRuntime,
    fleet: Fleet,
    timeouts: DeliveryTimeouts = DEFAULT_TIMEOUTS,
) -> MessagingService:
    book = MessageBook(clock, MessageLimits.from_limits(policy.limits))
    addressing = Addressing(fleet, grants, cards)
    outcomes = Outcomes(book, gate, cards, clock)
    return MessagingService(
        gate=gate,
        grants=grants,
        cards=cards,
        connect=connect,
        clock=clock,
        policy=policy,
        book=book,
        addressing=addressing,
        outcomes=outcomes,
        delivery=DeliveryEngine(book, addressing, outcomes, timeouts),
    )
