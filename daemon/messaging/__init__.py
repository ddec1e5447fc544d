"""Peer messaging: the queue, delivery, consent and the tools and views over them.

``install(services)`` builds the ``MessagingService`` on the daemon's directory and tmux
adapter, registers its gate actions (``message.send``, ``message.status``,
``messages.list``), its MCP tools, its revocation hook and its start/stop tasks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openbus.daemon.messaging.service import MessagingService
    from openbus.daemon.services import Services

EXTRAS_KEY = "messaging"
PANE_DETAIL_HOOKS = "pane_detail_hooks"


def install(services: Services) -> MessagingService:
    from openbus.daemon.messaging import mcp_tools
    from openbus.daemon.messaging.delivery import DeliveryEngine
    from openbus.daemon.messaging.fleet import DirectoryFleet
    from openbus.daemon.messaging.service import LIST, SEND, STATUS, MessagingService

    directory = services.extras.get("directory")
    tmux = services.extras.get("tmux")
    fleet = DirectoryFleet(directory, tmux) if directory is not None and tmux is not None else None
    service = MessagingService(services, fleet)
    services.extras[EXTRAS_KEY] = service
    services.gate.register(SEND, service.send)
    services.gate.register(STATUS, service.status)
    services.gate.register(LIST, service.list_messages)
    services.connect.revocation_hooks.append(service.on_revocation)
    services.extras.setdefault(PANE_DETAIL_HOOKS, []).append(
        lambda pane: {"messages": service.for_pane(pane)}
    )
    mcp_tools.install(services)
    if fleet is not None:
        engine = DeliveryEngine(service, fleet)
        service.delivery = engine

        async def start() -> None:
            services.spawn(engine.run())

        async def stop() -> None:
            await engine.close()

        services.started.append(start)
        services.stopping.append(stop)

    services.every_second("message sweep", service.sweep)
    services.health["messaging"] = lambda: {
        "queued_bytes": service.book.queued_bytes,
        **service.book.footprint(),
    }
    return service
