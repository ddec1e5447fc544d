"""TLS served straight from the socket: real TLS clients (asyncio's) against a ``TlsListener``
on a loopback port, with a small protocol in place of uvicorn's."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

from openbus.tunnel.cli import self_signed
from openbus.tunnel.tls import HIGH_WATER, TlsListener

BIG = 16 * 1024 * 1024  # far more than the socket buffers hold
TIMEOUT = 30.0


class Recorder(asyncio.Protocol):
    """Answers ``big`` with BIG bytes, ``bye`` with a word and a close, ``boom`` with an
    exception, anything else with an echo; records what happened to it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.paused = 0
        self.resumed = 0
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if data == b"big":
            self.transport.write(b"x" * BIG)
        elif data == b"boom":
            raise RuntimeError("a bug in the protocol")
        elif data == b"bye":
            self.transport.write(b"so long")
            self.transport.close()
        else:
            self.transport.write(data)

    def pause_writing(self) -> None:
        self.paused += 1

    def resume_writing(self) -> None:
        self.resumed += 1

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


def _contexts(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    cert, key = self_signed("localhost")
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    client = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))
    return server, client


def _serve(
    tmp_path: Path,
    scenario: Callable[[int, ssl.SSLContext, list[Recorder]], Awaitable[None]],
) -> list[Recorder]:
    async def run() -> list[Recorder]:
        server_context, client_context = _contexts(tmp_path)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        port = sock.getsockname()[1]
        made: list[Recorder] = []

        def factory() -> Recorder:
            protocol = Recorder()
            made.append(protocol)
            return protocol

        listener = TlsListener(asyncio.get_running_loop(), sock, server_context, factory)
        try:
            await asyncio.wait_for(scenario(port, client_context, made), TIMEOUT)
        finally:
            listener.close()
            await listener.wait_closed()
        return made

    return asyncio.run(run())


async def _connect(
    port: int, context: ssl.SSLContext
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="localhost"
    )


async def _still_served(port: int, context: ssl.SSLContext, made: list[Recorder]) -> None:
    """A new connection is answered, and ends cleanly."""
    reader, writer = await _connect(port, context)
    writer.write(b"ping")
    assert await reader.readexactly(4) == b"ping"
    writer.close()
    assert await made[-1].lost is None


def test_what_is_written_comes_back_over_tls(tmp_path: Path) -> None:
    async def scenario(port: int, context: ssl.SSLContext, made: list[Recorder]) -> None:
        reader, writer = await _connect(port, context)
        for word in (b"one", b"two"):
            writer.write(word)
            assert await reader.readexactly(len(word)) == word
        writer.close()
        await made[0].lost

    (protocol,) = _serve(tmp_path, scenario)
    assert protocol.lost.result() is None


def test_a_large_answer_reaches_a_slow_reader_whole_with_the_writer_paused_meanwhile(
    tmp_path: Path,
) -> None:
    async def scenario(port: int, context: ssl.SSLContext, made: list[Recorder]) -> None:
        reader, writer = await _connect(port, context)
        writer.write(b"big")
        await writer.drain()
        received = 0
        while received < BIG:
            received += len(await reader.read(65536))
        assert received == BIG
        writer.close()
        await made[0].lost

    (protocol,) = _serve(tmp_path, scenario)
    assert protocol.paused == protocol.resumed >= 1
    assert BIG > HIGH_WATER


def test_closing_sends_what_was_written_and_then_the_end(tmp_path: Path) -> None:
    async def scenario(port: int, context: ssl.SSLContext, made: list[Recorder]) -> None:
        reader, writer = await _connect(port, context)
        writer.write(b"bye")
        assert await reader.read() == b"so long"  # then the end of the stream
        await made[0].lost
        writer.close()

    (protocol,) = _serve(tmp_path, scenario)
    assert protocol.lost.result() is None


def test_a_client_that_does_not_speak_tls_is_dropped_and_others_are_served(
    tmp_path: Path,
) -> None:
    async def scenario(port: int, context: ssl.SSLContext, made: list[Recorder]) -> None:
        plain_reader, plain_writer = await asyncio.open_connection("127.0.0.1", port)
        plain_writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            answer = await plain_reader.read()
        except ConnectionResetError:  # closed with the request unread
            answer = b""
        assert not answer.startswith(b"HTTP")  # an alert or nothing, then the end
        plain_writer.close()
        await _still_served(port, context, made)

    made = _serve(tmp_path, scenario)
    assert len(made) == 1  # no protocol for the failed handshake


def test_a_client_that_leaves_is_a_lost_connection_once(tmp_path: Path) -> None:
    async def scenario(port: int, context: ssl.SSLContext, made: list[Recorder]) -> None:
        reader, writer = await _connect(port, context)
        writer.write(b"hello")
        assert await reader.readexactly(5) == b"hello"
        writer.transport.abort()
        await made[0].lost

    (protocol,) = _serve(tmp_path, scenario)
    assert protocol.lost.done()


def test_a_protocol_that_fails_ends_its_own_connection_and_others_are_served(
    tmp_path: Path,
) -> None:
    async def scenario(port: int, context: ssl.SSLContext, made: list[Recorder]) -> None:
        reader, writer = await _connect(port, context)
        writer.write(b"boom")
        with contextlib.suppress(ConnectionResetError, ssl.SSLError):
            assert await reader.read() == b""  # the connection ends
        assert isinstance(await made[0].lost, RuntimeError)
        writer.close()
        await _still_served(port, context, made)

    assert len(_serve(tmp_path, scenario)) == 2
