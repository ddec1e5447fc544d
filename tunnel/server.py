"""``openbus-tunnel serve``: start the PAM helper, drop privileges, serve HTTPS.

Order matters (OpenSSH's privsep model):

1. As the starting user (root on a hosted box): read the config, start the PAM helper on a
   socketpair, and take the listening socket: from systemd (``openbus-tunnel.socket``,
   ``LISTEN_FDS``) or by binding ``listen`` ourselves.
2. Drop to ``run_as`` (``openbus-tunnel``): supplementary groups, gid, uid, then no new
   privileges; check that uid 0 cannot be regained.
3. Only now read the secrets (the Ed25519 credential, the cookie key ring, the TLS key: files
   the tunnel user alone can read) and serve, with uvicorn (already a dependency, via mcp) as
   the HTTP/1.1 + TLS server for one plain ASGI app (llhttp via httptools as its parser), on
   uvloop's event loop: its transports, TLS among them (the same ``ssl`` context, OpenSSL's
   ``SSLObject`` over memory buffers as in asyncio, driven from compiled code), cost the
   tunnel about a fifth less CPU a request than asyncio's pure-Python ones (measured: 0.87
   against 0.91-1.15 ms a request at load average 5-7). The daemon keeps asyncio's loop
   (``daemon.serve``); the tunnel starts no subprocess from its loop.

Started as a non-root user, step 2 is skipped and the helper runs as that user, which
``pam_unix`` will not serve; logins then say "unavailable", never "wrong password".
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib
import logging
import os
import pwd
import socket
import ssl
import sys
from pathlib import Path
from typing import Any, cast

import uvicorn
import uvloop
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from openbus.kernel.clock import SystemClock, SystemRandom
from openbus.kernel.errors import ConfigError, Unavailable
from openbus.tunnel.config import TunnelConfig
from openbus.tunnel.pam_helper import PamClient, spawn_helper
from openbus.tunnel.proxy import TunnelApp, login_page
from openbus.tunnel.session import SessionSealer, parse_key_ring
from openbus.tunnel.throttle import LoginThrottle

log = logging.getLogger("openbus.tunnel")
SD_LISTEN_FDS_START = 3
PR_SET_NO_NEW_PRIVS = 38


def listening_socket(config: TunnelConfig) -> socket.socket:
    """systemd's socket when we were socket-activated, else our own bound to ``listen``."""
    if os.environ.get("LISTEN_PID") == str(os.getpid()) and os.environ.get("LISTEN_FDS") == "1":
        for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            os.environ.pop(name, None)
        sock = socket.socket(fileno=SD_LISTEN_FDS_START)
        sock.setblocking(False)
        return sock
    family = socket.AF_INET6 if ":" in config.listen_host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((config.listen_host, config.listen_port))
    except OSError as exc:
        sock.close()
        raise Unavailable(
            f"cannot listen on {config.listen_host}:{config.listen_port}: {exc.strerror}"
        ) from None
    # Accepted sockets inherit it: no Nagle delay between a response's head and body.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.listen(128)
    sock.setblocking(False)
    return sock


def drop_privileges(user: str) -> None:
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise ConfigError(
            f"no such user {user!r}", path="tunnel config", key="tunnel.run_as"
        ) from None
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    try:
        os.setuid(0)
    except PermissionError:
        pass
    else:  # pragma: no cover - would mean the drop did not happen
        raise Unavailable("dropping privileges failed: uid 0 could be regained")
    os.environ["HOME"] = entry.pw_dir
    os.environ["USER"] = os.environ["LOGNAME"] = user
    no_new_privileges()


def no_new_privileges() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        log.warning("could not set no_new_privs (errno %d)", ctypes.get_errno())


def _read_secret(path: Path, key: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("no such file", path=str(path), key=key) from None
    except PermissionError:
        raise ConfigError(f"not readable by uid {os.getuid()}", path=str(path), key=key) from None


def load_signing_key(path: Path) -> Ed25519PrivateKey:
    data = _read_secret(path, "tunnel.credential")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except ValueError:
        raise ConfigError(
            "not a PEM private key", path=str(path), key="tunnel.credential"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError("not an Ed25519 private key", path=str(path), key="tunnel.credential")
    return key


def load_cookie_keys(path: Path) -> list[bytes]:
    try:
        return parse_key_ring(_read_secret(path, "tunnel.cookie_key").decode("ascii", "replace"))
    except ValueError as exc:
        raise ConfigError(str(exc), path=str(path), key="tunnel.cookie_key") from None


def tls_context(config: TunnelConfig) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    for path, key in ((config.tls_cert, "tunnel.tls_cert"), (config.tls_key, "tunnel.tls_key")):
        _read_secret(path, key)
    try:
        context.load_cert_chain(str(config.tls_cert), str(config.tls_key))
    except ssl.SSLError as exc:
        raise ConfigError(
            f"certificate and key do not load ({exc.reason})",
            path=str(config.tls_cert),
            key="tunnel.tls_cert",
        ) from None
    return context


def _preload() -> None:
    """Import what serving needs while the code's own directories are surely readable."""
    for name in (
        "uvicorn",
        "uvicorn.config",
        "uvicorn.server",
        "uvicorn.protocols.http.httptools_impl",
        "httptools",
        "uvicorn.lifespan.off",
        "uvicorn.loops.asyncio",
        "uvloop",
        "uvicorn.loops.auto",
        "uvicorn.protocols.utils",
        "encodings.idna",
        "http.cookies",
        "email.utils",
    ):
        importlib.import_module(name)


def serve(config: TunnelConfig) -> None:
    logging.basicConfig(
        level=os.environ.get("OPENBUS_LOG_LEVEL", "INFO").upper(),
        stream=sys.stderr,
        format="openbus-tunnel: %(levelname)s %(message)s",
    )
    _preload()
    page = login_page()
    helper, helper_sock = spawn_helper(config.pam_service)
    try:
        sock = listening_socket(config)
        if os.geteuid() == 0 and config.run_as:
            drop_privileges(config.run_as)
        elif os.geteuid() == 0:
            log.warning("running as root: set tunnel.run_as to drop privileges")
        else:
            log.warning(
                "started as uid %d, not root: the PAM helper cannot check passwords", os.getuid()
            )
        clock, random = SystemClock(), SystemRandom()
        app = TunnelApp(
            sealer=SessionSealer(
                load_cookie_keys(config.cookie_key),
                clock=clock,
                random=random,
                ttl=config.session_seconds,
            ),
            throttle=LoginThrottle(
                clock, max_failures=config.max_failed_logins, base_delay=config.failed_login_delay
            ),
            authenticate=PamClient(helper_sock).authenticate,
            signing_key=load_signing_key(config.credential),
            daemon_socket=config.daemon_socket,
            clock=clock,
            random=random,
            page=page,
        )
        context = tls_context(config)
        log.info(
            "serving on %s as uid %d; daemon at %s",
            sock.getsockname(),
            os.getuid(),
            config.daemon_socket,
        )
        uvloop.run(_run(app, sock, context))
    finally:
        helper_sock.close()
        try:
            helper.wait(timeout=5)
        except Exception:  # noqa: BLE001 - the helper is gone or going either way
            helper.kill()


class _CoalescingTransport:
    """Sends a response's head and body as one write: one TLS record, one send.

    uvicorn writes a response's head and its body separately; each write to the TLS
    transport is a record of its own and a ``send`` of its own, and the client wakes for
    each. So the first write of an event-loop step is held: the next write of the same step
    takes it along at once (the body after its head leaves the moment it is written, before
    uvicorn's and the proxy's own bookkeeping for the finished exchange), and a write that
    nothing follows leaves at the end of the step (``call_soon``), so a stream's chunks
    still leave as soon as each is sent. Everything else is the real transport's; ``close``
    flushes first. At most one write is held, and the real transport's flow control still
    applies.
    """

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._pending: list[bytes] = []
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._pending.append(bytes(data))
            self._loop.call_soon(self._flush)
            return
        self._pending.append(bytes(data))
        self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _protocol_class() -> type[asyncio.Protocol]:
    class CoalescingHttpToolsProtocol(HttpToolsProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(cast("asyncio.Transport", _CoalescingTransport(transport)))

    return CoalescingHttpToolsProtocol


async def _run(app: TunnelApp, sock: socket.socket, context: ssl.SSLContext) -> None:
    config = uvicorn.Config(
        app,
        interface="asgi3",
        # llhttp (measured ~0.1 ms less CPU per request than h11), writes coalesced per step
        http=_protocol_class(),
        ws="none",
        lifespan="off",
        access_log=False,
        proxy_headers=False,
        server_header=False,
        log_config=None,
        timeout_keep_alive=75,
        timeout_graceful_shutdown=5,
    )
    config.load()
    config.ssl = context  # uvicorn builds a context only from file names; ours pins TLS >= 1.2
    await uvicorn.Server(config).serve(sockets=[sock])
