"""The gunicorn worker: gunicorn's native ASGI worker plus the peer's credentials.

The human side listens on a unix socket, where identity is the connecting peer's uid
(SO_PEERCRED). gunicorn's ASGI scope carries no such thing, so this worker's protocol reads
the credentials once per connection and puts them in the scope as the extension
``openbus.peer`` = ``{"pid", "uid", "gid"}``, beside ``openbus.tunnel_connection``: the
connection's own ``TunnelConnection`` (the MAC key the tunnel established on it, if any),
the same object for every request on the connection and gone with it. A request without
those extensions came over TCP; there the local port the connection was accepted on is put in
``openbus.local_port``, which tells the agents' port from local mode's web address for the
human. The app trusts nothing else to tell the listeners apart.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from gunicorn.asgi.protocol import ASGIProtocol
from gunicorn.workers import gasgi

from openbus.kernel.tunnel_signature import TunnelConnection

PEER_EXTENSION = "openbus.peer"
CONNECTION_EXTENSION = "openbus.tunnel_connection"  # unix: this connection's TunnelConnection
PORT_EXTENSION = "openbus.local_port"  # TCP: the port the connection was accepted on


def peer_credentials(sock: socket.socket) -> dict[str, int] | None:
    if sock.family != socket.AF_UNIX:
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return {"pid": pid, "uid": uid, "gid": gid}


def local_port(scope: dict[str, Any]) -> int | None:
    """The TCP port a request arrived on (None on the unix socket)."""
    port = scope.get("extensions", {}).get(PORT_EXTENSION)
    return port if isinstance(port, int) else None


class PeerCredProtocol(ASGIProtocol):  # type: ignore[misc]
    _openbus_peer: dict[str, int] | None = None
    _openbus_port: int | None = None
    _openbus_connection: TunnelConnection | None = None

    def connection_made(self, transport: Any) -> None:
        sock = transport.get_extra_info("socket")
        self._openbus_peer = peer_credentials(sock) if sock is not None else None
        if self._openbus_peer is not None:
            self._openbus_connection = TunnelConnection()
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            self._openbus_port = int(sock.getsockname()[1])
        super().connection_made(transport)

    def _build_http_scope(self, request: Any, sockname: Any, peername: Any) -> dict[str, Any]:
        scope: dict[str, Any] = super()._build_http_scope(request, sockname, peername)
        if self._openbus_peer is not None:
            extensions = scope.setdefault("extensions", {})
            extensions[PEER_EXTENSION] = dict(self._openbus_peer)
            extensions[CONNECTION_EXTENSION] = self._openbus_connection
        elif self._openbus_port is not None:
            scope.setdefault("extensions", {})[PORT_EXTENSION] = self._openbus_port
        return scope


class Worker(gasgi.ASGIWorker):  # type: ignore[misc]
    """gunicorn's ASGI worker serving every listener with ``PeerCredProtocol``."""

    def init_process(self) -> None:
        # gasgi builds its protocol from this module-level name when it creates each server.
        gasgi.ASGIProtocol = PeerCredProtocol
        super().init_process()
