"""TLS served straight from non-blocking ``ssl.SSLSocket``s, under uvicorn's HTTP protocol.

Theory of operation
-------------------
asyncio's own TLS (``sslproto``) runs OpenSSL over memory buffers and drives it from Python:
each record read passes a Python state machine, two copies and a ``SSLWantReadError`` raised
and caught, each write as many steps again. With the socket itself as OpenSSL's transport, one
``recv`` reads and decrypts what arrived and one ``send`` encrypts and sends: one C call each.

``TlsListener`` accepts connections and runs each handshake without blocking (bounded by
``HANDSHAKE_TIMEOUT``; a client that fails it is closed and forgotten), then hands the
connection to a new protocol over a ``TlsTransport``:

* reading: on readiness, ``recv`` and hand the bytes to the protocol, again while OpenSSL
  holds decrypted bytes not yet read (``pending``); what is still in the socket makes it
  ready again (level-triggered). End of stream (a close_notify or a plain FIN) is
  ``eof_received``; a TLS or socket error ends the connection. ``pause_reading`` stops
  watching the socket (and ``resume_reading`` looks at what OpenSSL holds first).
* writing: sent at once; what the socket does not take is kept in order and sent when it is
  writable. OpenSSL wants a write it could not finish retried with the same bytes, so the
  piece in flight is kept as it was and later writes queue behind it. Past ``HIGH_WATER``
  unsent bytes the protocol is asked to pause writing, and to resume below ``LOW_WATER``.
* closing: ``close`` waits for the unsent bytes, then sends a close_notify (best effort) and
  closes the socket; ``abort`` closes at once. The protocol's ``connection_lost`` comes once,
  in a later loop step.

Renegotiation is off (``OP_NO_RENEGOTIATION``): OpenSSL then never needs to read in the middle
of a write, nor to write in the middle of a read beyond what the socket takes at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Any

log = logging.getLogger("openbus.tunnel")

HANDSHAKE_TIMEOUT = 60.0
MAX_READ = 256 * 1024
HIGH_WATER = 64 * 1024
LOW_WATER = 16 * 1024
ACCEPTS_PER_WAKE = 64

ProtocolFactory = Callable[[], asyncio.Protocol]
_WOULD_BLOCK = (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError)


class TlsTransport(asyncio.Transport):
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: ssl.SSLSocket,
        protocol: asyncio.Protocol,
        on_lost: Callable[[TlsTransport], None],
    ) -> None:
        super().__init__()
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._on_lost = on_lost
        self._in_flight: bytes | None = None  # a send OpenSSL wants retried as it was
        self._queued = bytearray()
        self._closing = False
        self._lost = False
        self._reading = False
        self._writing = False
        self._protocol_paused = False
        self._read_after_write = False
        self._extra: dict[str, Any] = {
            "socket": sock,
            "sslcontext": sock.context,
            "ssl_object": sock,
            "cipher": sock.cipher(),
            "peercert": None,
        }
        with contextlib.suppress(OSError):
            self._extra["peername"] = sock.getpeername()
            self._extra["sockname"] = sock.getsockname()

    def start(self) -> None:
        try:
            self._protocol.connection_made(self)
        except Exception as exc:  # the protocol's bug ends its connection, not the server
            log.exception("the protocol failed on a new connection")
            self._lose(exc, notify=False)
            return
        if not self._lost:
            self._watch_reading()
            if self._sock.pending():
                self._loop.call_soon(self._read_ready)

    # ------------------------------------------------------------------ asyncio's interface

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def is_closing(self) -> bool:
        return self._closing or self._lost

    def is_reading(self) -> bool:
        return self._reading

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol  # type: ignore[assignment]

    def pause_reading(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._fd)
            self._reading = False

    def resume_reading(self) -> None:
        if self._closing or self._lost or self._reading:
            return
        self._watch_reading()
        if self._sock.pending():
            self._loop.call_soon(self._read_ready)

    def get_write_buffer_size(self) -> int:
        return len(self._in_flight or b"") + len(self._queued)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return LOW_WATER, HIGH_WATER

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass  # fixed limits

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        raise NotImplementedError("TLS has no half close here")

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self._lost or not data:
            return
        if self._in_flight is not None:
            self._queued += data
        else:
            self._send(bytes(data))
        self._check_water()

    def close(self) -> None:
        if self._closing or self._lost:
            return
        self._closing = True
        self.pause_reading()
        if self._in_flight is None:
            self._lose(None, notify=True)

    def abort(self) -> None:
        self._lose(None, notify=False)

    # ------------------------------------------------------------------ the socket

    def _watch_reading(self) -> None:
        self._loop.add_reader(self._fd, self._read_ready)
        self._reading = True

    def _read_ready(self) -> None:
        while not self._lost and self._reading:
            try:
                data = self._sock.recv(MAX_READ)
            except ssl.SSLWantWriteError:  # OpenSSL must answer the client first (rare)
                self._read_when_writable()
                return
            except _WOULD_BLOCK:
                return
            except (ssl.SSLError, OSError) as exc:
                self._lose(exc, notify=False)
                return
            try:
                if not data:
                    self.pause_reading()
                    if not self._protocol.eof_received():
                        self.close()
                    return
                self._protocol.data_received(data)
            except Exception as exc:  # the protocol's bug ends its connection, not the server
                log.exception("the protocol failed on what the client sent")
                self._lose(exc, notify=False)
                return
            if not self._sock.pending():
                return

    def _read_when_writable(self) -> None:
        if self._writing:  # _write_ready retries the read as it runs
            self._read_after_write = True
            return
        self._loop.add_writer(self._fd, self._write_ready)
        self._writing = self._read_after_write = True

    def _send(self, data: bytes) -> bool:
        """Send ``data`` now; False when not all of it went (the rest is then the piece in
        flight, or the connection is lost)."""
        try:
            sent = self._sock.send(data)
        except _WOULD_BLOCK:
            sent = 0
        except (ssl.SSLError, OSError) as exc:
            self._lose(exc, notify=False)
            return False
        if sent >= len(data):
            return True
        self._in_flight = data if sent == 0 else data[sent:]
        if not self._writing:
            self._loop.add_writer(self._fd, self._write_ready)
            self._writing = True
        return False

    def _write_ready(self) -> None:
        if self._read_after_write:
            self._read_after_write = False
            self._loop.call_soon(self._read_ready)
        while self._in_flight is not None and not self._lost:
            data, self._in_flight = self._in_flight, None
            if not self._send(data):
                return
            if self._queued:
                self._in_flight, self._queued = bytes(self._queued), bytearray()
        if self._writing and not self._lost:
            self._loop.remove_writer(self._fd)
            self._writing = False
        self._check_water()
        if self._closing and self._in_flight is None and not self._lost:
            self._lose(None, notify=True)

    def _check_water(self) -> None:
        size = self.get_write_buffer_size()
        if not self._protocol_paused and size > HIGH_WATER:
            self._protocol_paused = True
            self._protocol.pause_writing()
        elif self._protocol_paused and size <= LOW_WATER:
            self._protocol_paused = False
            self._protocol.resume_writing()

    def _lose(self, exc: Exception | None, *, notify: bool) -> None:
        """End the connection (a close_notify first when ``notify``); the protocol hears of it
        in the next loop step."""
        if self._lost:
            return
        self._lost = True
        self._closing = True
        if self._reading:
            self._loop.remove_reader(self._fd)
            self._reading = False
        if self._writing:
            self._loop.remove_writer(self._fd)
            self._writing = False
        if notify:
            with contextlib.suppress(ssl.SSLError, OSError, ValueError):
                self._sock.unwrap()  # sends ours; not waiting for the client's
        self._in_flight, self._queued = None, bytearray()
        self._loop.call_soon(self._connection_lost, exc)

    def _connection_lost(self, exc: Exception | None) -> None:
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._sock.close()
            self._on_lost(self)


class TlsListener:
    """Accepts TLS connections on ``sock`` for ``protocol_factory``; closed like asyncio's
    ``Server`` (``close``, then ``wait_closed``)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        context: ssl.SSLContext,
        protocol_factory: ProtocolFactory,
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._context = context
        self._factory = protocol_factory
        self._open: set[TlsTransport] = set()
        self._handshaking: set[_Handshake] = set()
        self._closed = False
        context.options |= ssl.OP_NO_RENEGOTIATION
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._accept)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return () if self._closed else (self._sock,)

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                conn, _address = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.error("cannot accept a connection: %s", exc.strerror)
                return  # ECONNABORTED and the like: that client is gone
            conn.setblocking(False)
            if conn.family in (socket.AF_INET, socket.AF_INET6):
                # no Nagle delay between one answer's records (asyncio sets this too)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                tls = self._context.wrap_socket(
                    conn, server_side=True, do_handshake_on_connect=False
                )
            except (ssl.SSLError, OSError):
                conn.close()
                continue
            handshake = _Handshake(self, tls)
            self._handshaking.add(handshake)
            handshake.step()

    def _established(self, handshake: _Handshake, tls: ssl.SSLSocket) -> None:
        self._handshaking.discard(handshake)
        transport = TlsTransport(self._loop, tls, self._factory(), self._open.discard)
        self._open.add(transport)
        transport.start()

    def _failed(self, handshake: _Handshake) -> None:
        self._handshaking.discard(handshake)

    def close(self) -> None:
        """Stop accepting (connections already open stay, for the server to end)."""
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self._sock.fileno())
        for handshake in list(self._handshaking):
            handshake.fail()
        self._sock.close()

    async def wait_closed(self) -> None:
        return None


class _Handshake:
    def __init__(self, listener: TlsListener, tls: ssl.SSLSocket) -> None:
        self._listener = listener
        self._tls = tls
        self._fd = tls.fileno()
        self._loop = listener._loop
        self._watching: str | None = None
        self._timer = self._loop.call_later(HANDSHAKE_TIMEOUT, self.fail)

    def _watch(self, what: str | None) -> None:
        if self._watching == what:
            return
        if self._watching == "read":
            self._loop.remove_reader(self._fd)
        elif self._watching == "write":
            self._loop.remove_writer(self._fd)
        if what == "read":
            self._loop.add_reader(self._fd, self.step)
        elif what == "write":
            self._loop.add_writer(self._fd, self.step)
        self._watching = what

    def step(self) -> None:
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            self._watch("read")
            return
        except ssl.SSLWantWriteError:
            self._watch("write")
            return
        except (ssl.SSLError, OSError, ValueError):
            self.fail()
            return
        self._watch(None)
        self._timer.cancel()
        self._listener._established(self, self._tls)

    def fail(self) -> None:
        self._watch(None)
        self._timer.cancel()
        self._tls.close()
        self._listener._failed(self)
