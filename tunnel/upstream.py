"""Kept-alive HTTP/1.1 connections from the tunnel to the daemon's unix socket.

Theory of operation
-------------------
Opening a unix connection per forwarded request costs both processes a connect/accept and
a new protocol object each time (measured: about a quarter of a millisecond at the daemon
alone). So the tunnel keeps a few idle connections open and reuses them, one request at a
time each, the way any HTTP/1.1 client does.

An ``Upstream`` is one connection: an asyncio protocol that buffers what the daemon sends
(pausing the socket past ``HIGH_WATER`` until it is read). ``request_bytes`` writes a request
exactly as it was signed (method, target and headers checked against HTTP's grammar, so
nothing smuggles a line break) and ``ResponseParser`` reads the answer with llhttp
(``httptools``, the parser uvicorn uses too): status, headers, body chunks as they come,
chunked or sized or up to the close, and whether the daemon will keep the connection. (h11
did both before; it cost about 0.15 ms of CPU per request, a third of the tunnel's share.)
A connection whose exchange ended with a complete response the daemon will keep alive goes
back to the ``UpstreamPool``; anything else (``Connection: close``, a HEAD answer, the client
left in the middle of a stream, a parse error, stray bytes) is closed.

The pool is a stack: the most recently used connection is reused first, and one that has
been idle for ``idle_timeout`` seconds (shorter than the daemon's own keep-alive timeout, so
the daemon rarely closes one we are about to use) or that the daemon has closed is dropped
instead. At most ``max_idle`` are kept. Only unix sockets, only to the configured path: the
pool has no other address to go to.

A reused connection can still lose the race with the daemon closing it. ``Upstream.fresh``
tells the caller whether the connection was new, so the caller can retry a safe request once
on a new connection when a reused one closed before answering a single byte.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import cast

import httptools

HIGH_WATER = 256 * 1024
DEFAULT_MAX_IDLE = 8
DEFAULT_IDLE_TIMEOUT = 1.0  # gunicorn's keep-alive default is 2 s

_METHOD_RE = re.compile(r"[A-Z]{1,16}")
_TARGET_RE = re.compile(r"/[\x21-\x7e]*")
_NAME_RE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VALUE_RE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")


class UpstreamError(Exception):
    """The daemon's answer is not HTTP/1.1 we can relay."""


def request_head(method: str, target: str, headers: list[tuple[bytes, bytes]]) -> bytes:
    """A request line and header lines (no blank line yet); ``ValueError`` for anything
    outside the grammar."""
    if not _METHOD_RE.fullmatch(method):
        raise ValueError("method is not an upper-case token")
    if not _TARGET_RE.fullmatch(target):
        raise ValueError("target is not an origin-form request target")
    lines = [f"{method} {target} HTTP/1.1\r\n".encode("latin-1")]
    for name, value in headers:
        if not _NAME_RE.fullmatch(name) or not _VALUE_RE.fullmatch(value):
            raise ValueError(f"header {name[:40]!r} is not a valid field")
        lines.append(b"%s: %s\r\n" % (name, value))
    return b"".join(lines)


def request_bytes(
    method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes
) -> bytes:
    """One HTTP/1.1 request, byte for byte; ``ValueError`` for anything outside the grammar."""
    return request_head(method, target, headers) + b"\r\n" + body


class ResponseParser:
    """One response from the daemon, fed as it arrives.

    ``status``/``headers`` are set once the final (non-1xx) head is complete; ``take_body``
    hands over the body bytes parsed so far; ``complete`` is set at the end of the message
    (for a HEAD answer: at the end of its head), and ``keep_alive`` then says whether the
    connection may carry another request.
    """

    def __init__(self, *, head_only: bool = False) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self.head_only = head_only
        self.status: int | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.complete = False
        self.keep_alive = False
        self._pending: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._informational = False

    # llhttp's callbacks
    def on_message_begin(self) -> None:
        if self.complete:  # a second response nobody asked for
            self.keep_alive = False
        self._pending = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self._pending.append((name, value))

    def on_headers_complete(self) -> None:
        if self.complete:
            return
        status = self._parser.get_status_code()
        self._informational = 100 <= status < 200
        if self._informational:
            return
        self.status, self.headers = status, self._pending
        if self.head_only:
            self.complete = True  # llhttp cannot be told the answer to HEAD has no body

    def on_body(self, body: bytes) -> None:
        if not self.complete:
            self._body.append(body)

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
        elif not self.complete:
            self.complete = True
            self.keep_alive = self._parser.should_keep_alive()

    def feed(self, data: bytes) -> None:
        if self.complete and self.head_only:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if not self.complete:
                raise UpstreamError("the daemon switched protocols") from None
            self.keep_alive = False
        except httptools.HttpParserError as exc:
            if not self.complete:
                raise UpstreamError(f"the daemon's answer does not parse: {exc}") from None
            self.keep_alive = False

    def take_body(self) -> bytes:
        if not self._body:
            return b""
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self._body.clear()
        return body


class _Buffered(asyncio.Protocol):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.closed = False
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > HIGH_WATER and self.transport is not None and not self._paused:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read(self) -> bytes:
        """What has arrived (waiting for something); ``b""`` once the daemon has closed."""
        if not self.buffer and not self.closed:
            self._waiter = self._loop.create_future()
            await self._waiter
        data = bytes(self.buffer)
        self.buffer.clear()
        if self._paused and self.transport is not None and not self.closed:
            self._paused = False
            self.transport.resume_reading()
        return data


class Upstream:
    """One connection to the daemon; ``keep`` is set by an exchange that ended cleanly.

    ``mac_key`` is the key the daemon holds for this connection (None until it has taken
    one). A request offering a key names it in ``offered_key``; ``answered`` with the
    status of the daemon's answer then settles it: the daemon answers a request from the
    tunnel below 400 only once its identity was accepted, and with it the key. A 401 drops
    the key, so the next request on the connection offers a new one.
    """

    def __init__(self, protocol: _Buffered, transport: asyncio.Transport) -> None:
        self._protocol = protocol
        self._transport = transport
        self.fresh = True
        self.keep = False
        self.idle_since = 0.0
        self.mac_key: bytes | None = None
        self.offered_key: bytes | None = None

    def answered(self, status: int) -> None:
        offered, self.offered_key = self.offered_key, None
        if status == 401:
            self.mac_key = None
        elif offered is not None and status < 400:
            self.mac_key = offered

    @property
    def alive(self) -> bool:
        return not self._protocol.closed and not self._transport.is_closing()

    def write(self, data: bytes) -> None:
        self._transport.write(data)

    async def read(self) -> bytes:
        return await self._protocol.read()

    def close(self) -> None:
        self._transport.abort()

    def reusable(self) -> bool:
        return self.keep and self.alive and not self._protocol.buffer


class UpstreamPool:
    def __init__(
        self,
        socket_path: Path,
        *,
        max_idle: int = DEFAULT_MAX_IDLE,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    ) -> None:
        self.socket_path = socket_path
        self.max_idle = max_idle
        self.idle_timeout = idle_timeout
        self._idle: list[Upstream] = []

    def __len__(self) -> int:
        return len(self._idle)

    async def get(self) -> Upstream:
        """An idle live connection, or a new one (``OSError`` when the daemon is not there)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        while self._idle:
            upstream = self._idle.pop()
            if upstream.alive and now - upstream.idle_since < self.idle_timeout:
                upstream.fresh = upstream.keep = False
                return upstream
            upstream.close()
        transport, protocol = await loop.create_unix_connection(
            lambda: _Buffered(loop), str(self.socket_path)
        )
        return Upstream(protocol, transport)

    def put(self, upstream: Upstream) -> None:
        """Keep ``upstream`` for the next request if its exchange ended cleanly, else close it."""
        if not upstream.reusable() or len(self._idle) >= self.max_idle:
            upstream.close()
            return
        upstream.idle_since = asyncio.get_running_loop().time()
        self._idle.append(upstream)

    def close(self) -> None:
        for upstream in self._idle:
            upstream.close()
        self._idle.clear()
