"""The privilege-separated PAM helper and the tunnel's client for it.

Theory of operation
-------------------
OpenSSH's privsep model: the process that talks to the network never reads ``/etc/shadow``.
``openbus-tunnel serve`` starts as root (systemd, or an operator), creates a socketpair,
starts this module as a fresh process (``python -I -m openbus.tunnel.pam_helper``, its end
of the pair as stdin, a scrubbed environment, no other descriptors), then drops itself to
``openbus-tunnel`` before it accepts a connection. The helper keeps the starting privileges,
because that is what ``pam_unix`` needs to check another user's password (as measured: an
unprivileged caller gets the same failure for right and wrong passwords, and NoNewPrivileges
rules out the set-gid ``unix_chkpwd`` path). It holds no key, no TLS material and no socket
but its end of the pair, and does one thing: check a user name and password with PAM.

The protocol: frames of a 4-byte big-endian length and a payload of at most 4096 bytes.
A request is ``b"A" + user + b"\\0" + password`` (UTF-8); the reply is ``b"OK"``,
``b"NO"`` (wrong password, unknown user, account refused), or ``b"UN <detail>"`` (PAM itself
is unavailable: the service file is missing, a module failed to load, the password database
is unreadable). One request at a time; end of file on the pair ends the helper. The helper
never logs a password, and logs user names only as "a login" counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import re
import socket
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

MAX_FRAME = 4096
USER_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\$?")

# PAM return codes that mean "these credentials are not accepted" (the rest: PAM is broken).
PAM_SUCCESS = 0
DENIED_CODES = frozenset({6, 7, 8, 10, 11, 12, 13, 20})  # PERM_DENIED, AUTH_ERR, CRED_INSUFFICIENT,
# USER_UNKNOWN, MAXTRIES, NEW_AUTHTOK_REQD, ACCT_EXPIRED, AUTHTOK_EXPIRED
PAM_DIRS = (Path("/etc/pam.d"), Path("/usr/lib/pam.d"))

Outcome = Literal["ok", "denied", "unavailable"]


@dataclass(frozen=True)
class PamResult:
    outcome: Outcome
    detail: str = ""


# --------------------------------------------------------------------------- framing


def encode_frame(payload: bytes) -> bytes:
    if len(payload) > MAX_FRAME:
        raise ValueError("frame too large")
    return struct.pack(">I", len(payload)) + payload


def _read_exact(fd: int, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_frame_blocking(fd: int) -> bytes | None:
    head = _read_exact(fd, 4)
    if head is None:
        return None
    (length,) = struct.unpack(">I", head)
    if length > MAX_FRAME:
        return None
    return _read_exact(fd, length)


def encode_request(user: str, password: str) -> bytes:
    return b"A" + user.encode("utf-8") + b"\0" + password.encode("utf-8")


def decode_reply(payload: bytes) -> PamResult:
    if payload == b"OK":
        return PamResult("ok")
    if payload == b"NO":
        return PamResult("denied")
    if payload.startswith(b"UN"):
        return PamResult("unavailable", payload[3:].decode("utf-8", "replace"))
    return PamResult("unavailable", "the PAM helper answered nonsense")


# --------------------------------------------------------------------------- the helper


def check(service: str, user: str, password: str) -> PamResult:
    """Ask PAM (auth and account, no credentials set) about one login."""
    if not any((d / service).is_file() for d in PAM_DIRS):
        # Without its file PAM would silently use the "other" service: refuse instead.
        return PamResult("unavailable", f"no PAM service file for {service!r}")
    if Path("/etc/shadow").exists() and not os.access("/etc/shadow", os.R_OK):
        return PamResult("unavailable", "the PAM helper cannot read the password database")
    import pam  # noqa: PLC0415 - libpam is loaded only once the checks above let a login through

    handle: Any = pam.pam()
    ok = handle.authenticate(user, password, service=service, resetcreds=False)
    code = int(handle.code)
    if ok and code == PAM_SUCCESS:
        return PamResult("ok")
    if code in DENIED_CODES:
        return PamResult("denied")
    return PamResult("unavailable", f"PAM error {code}: {handle.reason}")


def handle_request(service: str, payload: bytes) -> bytes:
    if not payload.startswith(b"A") or payload.count(b"\0") != 1:
        return b"UN malformed request"
    raw_user, raw_password = payload[1:].split(b"\0")
    try:
        user, password = raw_user.decode("utf-8"), raw_password.decode("utf-8")
    except UnicodeDecodeError:
        return b"NO"
    if not USER_RE.fullmatch(user) or not password:
        return b"NO"
    result = check(service, user, password)
    if result.outcome == "ok":
        return b"OK"
    if result.outcome == "denied":
        return b"NO"
    return b"UN " + result.detail.encode("utf-8", "replace")[:400]


def helper_main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if (
        len(args) not in (2, 4)
        or args[0] != "--service"
        or (len(args) == 4 and args[2] != "--as-user")
    ):
        print(
            "usage: python -m openbus.tunnel.pam_helper --service NAME [--as-user USER]"
            "  (stdin: the socketpair)",
            file=sys.stderr,
        )
        return 2
    service = args[1]
    if len(args) == 4:
        # Run as a less privileged account (one in group shadow suffices for pam_unix).
        entry = pwd.getpwnam(args[3])
        os.initgroups(entry.pw_name, entry.pw_gid)
        os.setgid(entry.pw_gid)
        os.setuid(entry.pw_uid)
    fd = sys.stdin.fileno()
    while True:
        payload = read_frame_blocking(fd)
        if payload is None:
            return 0
        os.write(fd, encode_frame(handle_request(service, payload)))


# --------------------------------------------------------------------------- the client side


def spawn_helper(
    service: str, *, user: str | None = None
) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """Start the helper (with the current privileges, or as ``user``); return it and our end."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        argv = [sys.executable, "-I", "-m", "openbus.tunnel.pam_helper", "--service", service]
        process = subprocess.Popen(
            [*argv, "--as-user", user] if user else argv,
            stdin=theirs.fileno(),
            stdout=subprocess.DEVNULL,
            close_fds=True,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
            cwd="/",
        )
    finally:
        theirs.close()
    return process, ours


class PamClient:
    """The tunnel's end of the socketpair; one request at a time."""

    def __init__(self, sock: socket.socket, *, timeout: float = 20.0) -> None:
        self._sock = sock
        self._timeout = timeout
        self._lock = asyncio.Lock()
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._broken = False

    async def authenticate(self, user: str, password: str) -> PamResult:
        if len(user.encode("utf-8")) + len(password.encode("utf-8")) + 2 > MAX_FRAME:
            return PamResult("denied")
        async with self._lock:
            if self._broken:
                return PamResult("unavailable", "the PAM helper is not running")
            try:
                return await asyncio.wait_for(
                    self._ask(encode_request(user, password)), self._timeout
                )
            except (OSError, asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                self._broken = (
                    True  # a reply may be pending or lost: never pair it with another login
                )
                return PamResult("unavailable", "the PAM helper is not running")

    async def _ask(self, payload: bytes) -> PamResult:
        if self._streams is None:
            self._streams = await asyncio.open_connection(sock=self._sock)
        reader, writer = self._streams
        writer.write(encode_frame(payload))
        await writer.drain()
        (length,) = struct.unpack(">I", await reader.readexactly(4))
        if length > MAX_FRAME:
            raise ConnectionError("oversized reply")
        return decode_reply(await reader.readexactly(length))

    async def aclose(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            with contextlib.suppress(OSError):
                await self._streams[1].wait_closed()
        self._sock.close()


if __name__ == "__main__":
    raise SystemExit(helper_main())
