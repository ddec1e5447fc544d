"""The proxy's kept-alive connections to the daemon, against a real unix-socket server.

The server stands in for the daemon at the socket level (it answers each request with a
scripted reply and records what arrived on which connection); the proxy is driven through
its ASGI interface, as uvicorn drives it.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from openbus.kernel.clock import SystemClock, SystemRandom
from openbus.kernel.errors import Unauthenticated
from openbus.kernel.tunnel_signature import TunnelConnection, TunnelVerifier
from openbus.tunnel.proxy import TunnelApp
from openbus.tunnel.session import COOKIE_NAME, SessionSealer, new_key_ring_line, parse_key_ring
from openbus.tunnel.throttle import LoginThrottle
from openbus.tunnel.upstream import ResponseParser, UpstreamError, request_bytes

OK = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"ok":true}'
REFUSED = b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n"

# --------------------------------------------------------------------------- the wire format


def test_a_request_is_written_byte_for_byte_as_signed() -> None:
    wire = request_bytes("POST", "/api/launch?cwd=%2Ftmp", [(b"x-a", b"1")], b"{}")
    assert wire == b"POST /api/launch?cwd=%2Ftmp HTTP/1.1\r\nx-a: 1\r\n\r\n{}"


@pytest.mark.parametrize(
    ("method", "target", "headers"),
    [
        ("GET", "/a b", []),
        ("GET", "http://elsewhere/", []),
        ("get", "/", []),
        ("GET", "/", [(b"x-a", b"1\r\nx-tunnel-user: root")]),
        ("GET", "/", [(b"x-a", b"1\nx")]),
        ("GET", "/", [(b"x a", b"1")]),
        ("GET", "/", [(b"x-a:", b"1")]),
    ],
)
def test_nothing_outside_the_http_grammar_reaches_the_wire(
    method: str, target: str, headers: list[tuple[bytes, bytes]]
) -> None:
    with pytest.raises(ValueError, match=r"method|target|header"):
        request_bytes(method, target, headers, b"")


def test_a_chunked_answer_after_an_interim_one_is_read_whole_and_kept_alive() -> None:
    response = ResponseParser()
    response.feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n")
    assert (response.status, response.complete) == (None, False)
    response.feed(b"\r\n5\r\nhello\r\n")
    assert (response.status, response.complete) == (200, False)
    assert response.take_body() == b"hello"
    response.feed(b"6\r\n world\r\n0\r\n\r\n")
    assert response.complete
    assert response.keep_alive
    assert response.take_body() == b" world"


def test_an_answer_that_closes_the_connection_is_not_kept() -> None:
    response = ResponseParser()
    response.feed(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
    assert response.complete
    assert not response.keep_alive


def test_stray_bytes_after_an_answer_mean_the_connection_is_not_kept() -> None:
    response = ResponseParser()
    response.feed(OK + b"HTTP/1.1 200 OK\r\n")
    assert response.complete
    assert not response.keep_alive


def test_the_answer_to_head_ends_with_its_head_and_is_not_kept() -> None:
    response = ResponseParser(head_only=True)
    response.feed(b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n")
    assert response.complete
    assert response.status == 200
    assert not response.keep_alive


def test_an_answer_that_is_not_http_is_an_upstream_error() -> None:
    with pytest.raises(UpstreamError, match="does not parse"):
        ResponseParser().feed(b"SSH-2.0-OpenSSH\r\n\r\n")


# --------------------------------------------------------------------------- the pool


@dataclass
class Seen:
    connection: int
    head: bytes
    body: bytes

    def request(self) -> tuple[str, str, list[tuple[str | bytes, str | bytes]]]:
        lines = self.head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ")
        headers: list[tuple[str | bytes, str | bytes]] = []
        for line in lines[1:]:
            if line:
                name, value = line.split(": ", 1)
                headers.append((name, value))
        return method, target, headers

    def header(self, name: str) -> str | None:
        _, _, headers = self.request()
        values = [str(v) for k, v in headers if str(k).lower() == name]
        return values[0] if values else None

    def claim(self) -> tuple[str, str, str]:
        """(user, timestamp, nonce) as vouched for: in a MAC'd request's one header, or in a
        signed request's three."""
        compact = self.header("x-tunnel-mac")
        if compact is not None:
            user, timestamp, nonce, _ = compact.split(" ")
            return user, timestamp, nonce
        parts = [self.header(f"x-tunnel-{name}") for name in ("user", "timestamp", "nonce")]
        assert None not in parts
        return str(parts[0]), str(parts[1]), str(parts[2])


@dataclass
class ScriptedDaemon:
    """A unix-socket HTTP/1.1 server: ``replies`` are used in order, then ``OK`` forever.

    A reply of ``None`` closes the connection without answering (a kept-alive connection
    the daemon dropped); ``b"stream"`` sends a chunked head and one event, then waits.
    """

    path: Path
    replies: list[bytes | None] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    connections: int = 0
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    handlers: set[asyncio.Task[Any]] = field(default_factory=set)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        self.connections += 1
        number = self.connections
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                self.seen.append(Seen(number, head, body))
                reply = self.replies.pop(0) if self.replies else OK
                if reply is None:
                    return
                if reply == b"stream":
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                        b"transfer-encoding: chunked\r\n\r\nb\r\ndata: one\n\n\r\n"
                    )
                    await reader.read()  # until the proxy hangs up
                    return
                writer.write(reply)
                await writer.drain()
        finally:
            self.closed.set()
            writer.close()


class Exchange:
    """One request through the app, recorded as uvicorn would pass it on."""

    def __init__(self, leave_after_first_chunk: bool = False) -> None:
        self.messages: list[MutableMapping[str, Any]] = []
        self._leave = leave_after_first_chunk
        self._left = asyncio.Event()
        self._body_sent = False

    async def receive(self) -> dict[str, Any]:
        if not self._body_sent:
            self._body_sent = True
            return {"type": "http.request", "body": b"{}", "more_body": False}
        await self._left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        self.messages.append(message)
        if self._leave and message.get("more_body"):
            self._left.set()

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages[1:])


@dataclass
class Rig:
    app: TunnelApp
    daemon: ScriptedDaemon
    cookie: str
    verifier: TunnelVerifier
    connections: dict[int, TunnelConnection] = field(default_factory=dict)

    def vouched(self, seen: Seen) -> str:
        """The user the daemon would accept ``seen`` for, on the connection it came on."""
        method, target, headers = seen.request()
        connection = self.connections.setdefault(seen.connection, TunnelConnection())
        return self.verifier.verify(method, target, headers, seen.body, connection)

    async def request(self, method: str = "GET", **kw: Any) -> Exchange:
        exchange = Exchange(**kw)
        scope = {
            "type": "http",
            "method": method,
            "path": "/api/directory",
            "raw_path": b"/api/directory",
            "query_string": b"",
            "headers": [
                (b"host", b"box.example"),
                (b"origin", b"https://box.example"),
                (b"cookie", f"{COOKIE_NAME}={self.cookie}".encode()),
            ],
            "client": ("127.0.0.1", 50000),
        }
        await self.app(scope, exchange.receive, exchange.send)
        return exchange


@asynccontextmanager
async def rig() -> AsyncIterator[Rig]:
    with tempfile.TemporaryDirectory() as tmp:
        daemon = ScriptedDaemon(Path(tmp) / "daemon.sock")
        server = await asyncio.start_unix_server(daemon.handle, str(daemon.path))
        clock, random = SystemClock(), SystemRandom()
        key = Ed25519PrivateKey.generate()
        sealer = SessionSealer(
            parse_key_ring(new_key_ring_line(random)), clock=clock, random=random, ttl=600
        )

        async def no_logins(user: str, password: str) -> Any:
            raise AssertionError("no logins here")

        app = TunnelApp(
            sealer=sealer,
            throttle=LoginThrottle(clock),
            authenticate=no_logins,
            signing_key=key,
            daemon_socket=daemon.path,
            clock=clock,
            random=random,
        )
        try:
            verifier = TunnelVerifier([key.public_key()], clock=clock)
            yield Rig(app, daemon, sealer.seal("alice")[0], verifier)
        finally:
            app._pool.close()
            server.close()
            await server.wait_closed()
            await asyncio.wait_for(asyncio.gather(*daemon.handlers), timeout=10)


def run(test: Callable[[Rig], Awaitable[None]]) -> None:
    async def main() -> None:
        async with rig() as r:
            await asyncio.wait_for(test(r), timeout=20)

    asyncio.run(main())


def test_consecutive_requests_share_one_kept_alive_connection_to_the_daemon() -> None:
    async def test(r: Rig) -> None:
        for _ in range(3):
            exchange = await r.request()
            assert exchange.status == 200
            assert exchange.body == b'{"ok":true}'
        assert [s.connection for s in r.daemon.seen] == [1, 1, 1]
        nonces = {s.claim()[2] for s in r.daemon.seen}
        assert len(nonces) == 3  # each request signed afresh

    run(test)


def test_a_get_the_daemon_dropped_on_a_kept_alive_connection_goes_again_on_a_new_one() -> None:
    async def test(r: Rig) -> None:
        assert (await r.request()).status == 200
        r.daemon.replies = [None]
        again = await r.request()
        assert again.status == 200
        first, dropped, retried = r.daemon.seen
        assert (dropped.connection, retried.connection) == (1, 2)
        assert dropped.claim() == retried.claim()  # a MAC'd request, then signed anew
        # Had the daemon taken the dropped request, it would refuse the retry as a replay.
        assert r.vouched(first) == r.vouched(dropped) == "alice"
        with pytest.raises(Unauthenticated):
            r.vouched(retried)

    run(test)


def test_a_post_the_daemon_dropped_is_not_sent_again() -> None:
    async def test(r: Rig) -> None:
        assert (await r.request()).status == 200
        r.daemon.replies = [None]
        dropped = await r.request("POST")
        assert dropped.status == 502
        assert [s.head.split(b" ")[0] for s in r.daemon.seen] == [b"GET", b"POST"]

    run(test)


def test_an_answer_with_connection_close_is_relayed_and_its_connection_not_reused() -> None:
    async def test(r: Rig) -> None:
        r.daemon.replies = [
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        ]
        assert (await r.request()).status == 404
        assert (await r.request()).status == 200
        assert [s.connection for s in r.daemon.seen] == [1, 2]

    run(test)


def test_a_client_leaving_an_event_stream_hangs_up_on_the_daemon() -> None:
    async def test(r: Rig) -> None:
        r.daemon.replies = [b"stream"]
        exchange = await r.request(leave_after_first_chunk=True)
        assert exchange.status == 200
        assert exchange.messages[1]["body"] == b"data: one\n\n"
        await r.daemon.closed.wait()
        assert len(r.app._pool) == 0

    run(test)


def test_every_forwarded_request_carries_a_valid_fresh_signature() -> None:
    async def test(r: Rig) -> None:
        await r.request("POST")
        await r.request()
        for seen in r.daemon.seen:
            assert r.vouched(seen) == "alice"

    run(test)


def test_a_connections_first_request_is_signed_with_a_key_and_the_next_are_macd_under_it() -> None:
    async def test(r: Rig) -> None:
        for _ in range(3):
            assert (await r.request()).status == 200
        first, *later = r.daemon.seen
        assert first.header("x-tunnel-signature") is not None
        assert first.header("x-tunnel-key") is not None
        for seen in later:  # the whole claim in one header
            _, _, headers = seen.request()
            assert [k for k, _ in headers if str(k).lower().startswith("x-tunnel-")] == [
                "X-Tunnel-Mac"
            ]
            assert seen.claim()[0] == "alice"
        assert [r.vouched(seen) for seen in r.daemon.seen] == ["alice"] * 3
        # Without the key the first request installed, the later ones vouch for nobody.
        method, target, headers = later[0].request()
        with pytest.raises(Unauthenticated):
            r.verifier.verify(method, target, headers, later[0].body, TunnelConnection())

    run(test)


def test_a_key_offered_on_a_refused_request_is_not_used_and_a_401_drops_a_taken_key() -> None:
    async def test(r: Rig) -> None:
        r.daemon.replies = [REFUSED, OK, REFUSED, OK]
        for status in (401, 200, 401, 200):
            assert (await r.request()).status == status
        keys = [seen.header("x-tunnel-key") for seen in r.daemon.seen]
        macs = [seen.header("x-tunnel-mac") for seen in r.daemon.seen]
        # refused: offered again (anew); taken: MAC'd; MAC refused: a new key offered
        assert [k is not None for k in keys] == [True, True, False, True]
        assert [m is not None for m in macs] == [False, False, True, False]
        assert len({keys[0], keys[1], keys[3]}) == 3
        assert {seen.connection for seen in r.daemon.seen} == {1}

    run(test)
