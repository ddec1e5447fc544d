"""The signed ``X-Tunnel-User`` identity: codec, verifier and the header spellings.

Theory of operation
-------------------
Only the tunnel client (system user ``openbus-tunnel``) holds the Ed25519 private key. A
request it signs (the first on each connection to the daemon's unix socket, see
"Per-connection MAC keys" for the others) carries four headers::

    X-Tunnel-User       the PAM login name of the human
    X-Tunnel-Timestamp  integer milliseconds since the epoch, when it signed
    X-Tunnel-Nonce      16 random bytes, base64url without padding (22 characters)
    X-Tunnel-Signature  Ed25519 over the canonical bytes below, base64url without padding

The canonical bytes are the lines (joined by ``\\n``)::

    openbus-tunnel-v2
    METHOD                (upper case)
    TARGET                (the request target as sent: raw path, and ``?query`` if any)
    USER
    TIMESTAMP
    NONCE
    hex(sha256(BODY))

so a signature binds one method, one path and query, one user, one moment, one nonce and one
body. The daemon's ``TunnelVerifier.verify`` accepts a request only when each of the four
headers appears exactly once, in its one canonical spelling (case is free in HTTP; an
underscore variant such as ``X_Tunnel_User`` is an attack, not a spelling), the values are
well formed, the signature checks against one key of the ring, the timestamp is within the
window (±30 s by default) of the injected clock, is not older than the verifier itself
(``not_before``, the clock's time when it was built), and the nonce was not seen before.
Nonces are remembered only after the signature checks (so only the key holder can fill the
cache) and only until the timestamp leaves the window (after which the window check alone
refuses a replay). The cache is bounded; when it is full of live nonces the verifier refuses
(fails closed) rather than forgetting one.

Per-connection MAC keys
-----------------------
An Ed25519 signature costs the tunnel about 0.1 ms and its check costs the daemon about
0.4 ms of CPU (measured on this project's bench box), most of what the tunnel adds to a
request. So a request may instead carry a MAC under a key bound to the one unix connection it
arrives on. The tunnel makes a random 32-byte key for each new connection to the daemon and
sends it, once, in ``X-Tunnel-Key`` on a signed request, whose signature then covers the key
too (the canonical bytes start ``openbus-tunnel-v2-key`` and end with one more line, the key
in base64url). When such a request passes every check below, the daemon keeps the key in the
``TunnelConnection`` of that connection (the worker makes one per accepted connection and
forgets it with the connection). Later requests on the same connection may carry, in place of
``X-Tunnel-Signature``::

    X-Tunnel-Mac        keyed BLAKE2b-256 (RFC 7693's MAC mode) under the connection's key
                        over the canonical bytes (first line ``openbus-tunnel-v2-blake2b-mac``),
                        base64url without padding

and are then checked exactly as a signed one (window, ``not_before``, nonce), with the MAC in
place of the signature. Such a request carries its whole claim in that one header, the four
fields in this order, each separated by one space (``X-Tunnel-Mac: USER TIMESTAMP NONCE
MAC``), and no other identity header: every header costs the daemon's HTTP parser and this
verifier a little on every request, and a MAC'd request is the common one. A value that is
not exactly four well-formed fields, or any other ``X-Tunnel-*`` header beside it, is
refused. A MAC on a connection without a key, or under another connection's
key, is refused with the same one error. Why this is no weaker than signing every request:

* the key is installed only by a request signed with the tunnel's private key, and that
  request is itself refused when replayed (nonce, window, ``not_before``), so nobody without
  the private key can put a key they know on a connection;
* the key lives only in the tunnel's memory and in the daemon worker's state for that one
  connection (never on disk, in a log or in an answer); it crosses only the daemon's unix
  socket, whose directory only the daemon's user can write and only the tunnel's user and
  the operators' group can enter, and the daemon takes it only from a peer whose
  SO_PEERCRED uid is the tunnel's;
* a MAC binds the same fields a signature does (method, target, user, time, nonce, body
  digest), so it can vouch for no other request, user or moment, and replays are refused by
  the same nonce cache and window.

The cache lives in memory, so it is empty in a new process; ``not_before`` is what keeps a
signature that an earlier daemon accepted from being accepted again by the next one within
its window: a signature from an earlier millisecond than the start is refused (the timestamp
is in milliseconds for this; a replay would need the earlier daemon to have accepted the
request in the very millisecond the next one was built).

Every failure raises the same ``Unauthenticated("tunnel identity not accepted")``: a caller
learns nothing about which check failed. ``rejection_reason`` on the exception is for the
daemon's own audit record only.

This module is pure: no I/O, time comes from the injected clock and randomness from the
caller.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from openbus.kernel.clock import Clock
from openbus.kernel.errors import Unauthenticated

HEADER_USER = "X-Tunnel-User"
HEADER_TIMESTAMP = "X-Tunnel-Timestamp"
HEADER_NONCE = "X-Tunnel-Nonce"
HEADER_SIGNATURE = "X-Tunnel-Signature"
HEADER_KEY = "X-Tunnel-Key"
HEADER_MAC = "X-Tunnel-Mac"
SIGNED_HEADERS = (HEADER_USER, HEADER_TIMESTAMP, HEADER_NONCE, HEADER_SIGNATURE)
ALL_HEADERS = (*SIGNED_HEADERS, HEADER_KEY, HEADER_MAC)

DOMAIN = b"openbus-tunnel-v2"
KEYED_DOMAIN = b"openbus-tunnel-v2-key"
MAC_DOMAIN = b"openbus-tunnel-v2-blake2b-mac"
NONCE_BYTES = 16
KEY_BYTES = 32
MAC_BYTES = 32
DEFAULT_WINDOW = 30.0
DEFAULT_NONCE_CAPACITY = 100_000
REJECTED = "tunnel identity not accepted"

# Login names as PAM and useradd accept them, plus dots and upper case for other directories.
_USER_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\$?")
_TIMESTAMP_RE = re.compile(r"[0-9]{1,15}")
_NONCE_RE = re.compile(r"[A-Za-z0-9_-]{22}")
_SIGNATURE_RE = re.compile(r"[A-Za-z0-9_-]{86}")
_KEY_RE = _MAC_RE = re.compile(r"[A-Za-z0-9_-]{43}")  # 32 bytes
_TARGET_RE = re.compile(r"/[\x21-\x7e]*")
_METHOD_RE = re.compile(r"[A-Z]{1,16}")

_CANONICAL = {name.lower(): name for name in ALL_HEADERS}
# Other headers that some proxy or framework treats as an identity; the tunnel strips them
# too, so nothing behind it ever sees a client-supplied one.
_FOREIGN_IDENTITY = frozenset(
    {
        "x-forwarded-user",
        "x-forwarded-email",
        "x-forwarded-preferred-username",
        "x-forwarded-groups",
        "x-forwarded-access-token",
        "x-auth-request-user",
        "x-auth-request-email",
        "x-auth-request-preferred-username",
        "x-auth-request-groups",
        "x-auth-request-access-token",
        "x-remote-user",
        "remote-user",
        "x-user",
        "x-openbus-user",
    }
)


class TunnelRejected(Unauthenticated):
    """The one error for every tunnel-identity failure; ``rejection_reason`` is for audit."""

    def __init__(self, reason: str) -> None:
        super().__init__(REJECTED)
        self.rejection_reason = reason


# --------------------------------------------------------------------------- header names


def _normal(name: str | bytes) -> str:
    text = name.decode("latin-1") if isinstance(name, bytes) else name
    return text.strip().lower().replace("_", "-")


def identity_header_names() -> tuple[str, ...]:
    """The canonical names of the signed identity headers."""
    return SIGNED_HEADERS


# The first characters a name can start with and still be an identity header once folded:
# ``x``/``r`` in either case, or whitespace (stripped first). Any other name is settled by
# its first character, which is most names on every request both processes see.
_IDENTITY_FIRST = frozenset(c for c in map(chr, range(256)) if c in "xXrR" or c.isspace())
_IDENTITY_FIRST_BYTES = frozenset(ord(c) for c in _IDENTITY_FIRST)


def is_identity_header(name: str | bytes) -> bool:
    """True for any spelling of an identity or signature header.

    Case and ``-``/``_`` are folded, so ``x_tunnel-USER`` counts; any ``x-tunnel-*`` header
    counts (the tunnel owns that prefix), and so do the identity headers other proxies use.
    The tunnel strips every header for which this is true; the daemon treats a request
    carrying one as an identity claim.
    """
    if not name:
        return False
    if isinstance(name, bytes):
        if name[0] not in _IDENTITY_FIRST_BYTES:
            return False
    elif name[0] not in _IDENTITY_FIRST and not name[0].isspace():
        return False
    normal = _normal(name)
    return normal.startswith("x-tunnel-") or normal in _FOREIGN_IDENTITY


def has_identity_header(headers: Iterable[tuple[str | bytes, str | bytes]]) -> bool:
    return any(is_identity_header(name) for name, _ in headers)


# --------------------------------------------------------------------------- encoding


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_EMPTY_DIGEST = hashlib.sha256(b"").hexdigest()


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest() if body else _EMPTY_DIGEST


def canonical_bytes(  # noqa: PLR0917
    method: str,
    target: str,
    user: str,
    timestamp: str,
    nonce: str,
    body: bytes,
    *,
    domain: bytes = DOMAIN,
    key: str | None = None,
) -> bytes:
    lines = [
        domain,
        method.upper().encode("ascii"),
        target.encode("latin-1"),
        user.encode("ascii"),
        timestamp.encode("ascii"),
        nonce.encode("ascii"),
        body_digest(body).encode("ascii"),
    ]
    if key is not None:
        lines.append(key.encode("ascii"))
    return b"\n".join(lines)


def target_from_scope(scope: Mapping[str, Any]) -> str:
    """The request target (raw path, ``?query`` if non-empty) from an ASGI scope."""
    raw = scope.get("raw_path") or str(scope.get("path", "/")).encode("utf-8")
    query = scope.get("query_string") or b""
    target = bytes(raw) + (b"?" + bytes(query) if query else b"")
    return target.decode("latin-1")


def _claim(user: str, target: str, now: float, nonce: bytes) -> tuple[str, str]:
    """The timestamp and nonce texts of a claim, after checking what the caller chose."""
    if not _USER_RE.fullmatch(user):
        raise ValueError("user is not a valid login name")
    if not _TARGET_RE.fullmatch(target):
        raise ValueError("target must be an origin-form request target")
    if len(nonce) != NONCE_BYTES:
        raise ValueError(f"nonce must be {NONCE_BYTES} bytes")
    return str(int(now * 1000)), _b64(nonce)


def sign(  # noqa: PLR0917
    private_key: Ed25519PrivateKey,
    method: str,
    target: str,
    user: str,
    body: bytes,
    now: float,
    nonce: bytes,
    *,
    mac_key: bytes | None = None,
) -> dict[str, str]:
    """The four headers vouching that ``user`` sends this exact request at ``now``; with
    ``mac_key``, a fifth offering it as the key of the connection the request goes on."""
    timestamp, nonce_text = _claim(user, target, now, nonce)
    headers = {HEADER_USER: user, HEADER_TIMESTAMP: timestamp, HEADER_NONCE: nonce_text}
    if mac_key is None:
        message = canonical_bytes(method, target, user, timestamp, nonce_text, body)
    else:
        if len(mac_key) != KEY_BYTES:
            raise ValueError(f"a MAC key must be {KEY_BYTES} bytes")
        key_text = headers[HEADER_KEY] = _b64(mac_key)
        message = canonical_bytes(
            method, target, user, timestamp, nonce_text, body, domain=KEYED_DOMAIN, key=key_text
        )
    headers[HEADER_SIGNATURE] = _b64(private_key.sign(message))
    return headers


def _mac_of(key: bytes, message: bytes) -> bytes:
    # Keyed BLAKE2b is a MAC by itself (no HMAC construction needed), and Python's own code:
    # HMAC-SHA256 through OpenSSL 3 cost each side ~14 µs a request in the running processes
    # (it looks the algorithm up by name on every call), BLAKE2b a fraction of that.
    return hashlib.blake2b(message, key=key, digest_size=MAC_BYTES).digest()


def mac(  # noqa: PLR0917
    mac_key: bytes,
    method: str,
    target: str,
    user: str,
    body: bytes,
    now: float,
    nonce: bytes,
) -> dict[str, str]:
    """The one header vouching for the request as ``sign``'s do, with a MAC under the key the
    connection it goes on was given (see "Per-connection MAC keys")."""
    timestamp, nonce_text = _claim(user, target, now, nonce)
    message = canonical_bytes(method, target, user, timestamp, nonce_text, body, domain=MAC_DOMAIN)
    tag = _b64(_mac_of(mac_key, message))
    return {HEADER_MAC: f"{user} {timestamp} {nonce_text} {tag}"}


# --------------------------------------------------------------------------- keys


def load_public_keys(data: bytes) -> list[Ed25519PublicKey]:
    """Every Ed25519 public key in ``data``: PEM blocks, or OpenSSH lines (a key ring)."""
    keys: list[Ed25519PublicKey] = []
    text = data.decode("ascii", errors="strict")
    for block in re.findall(r"-----BEGIN PUBLIC KEY-----.*?-----END PUBLIC KEY-----", text, re.S):
        keys.append(_ed25519(serialization.load_pem_public_key(block.encode("ascii"))))
    for line in text.splitlines():
        if line.startswith("ssh-ed25519 "):
            keys.append(_ed25519(serialization.load_ssh_public_key(line.encode("ascii"))))
    if not keys:
        raise ValueError("no Ed25519 public key found")
    return keys


def _ed25519(key: object) -> Ed25519PublicKey:
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("not an Ed25519 public key")
    return key


def public_key_pem(private_key: Ed25519PrivateKey) -> bytes:
    return private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


# --------------------------------------------------------------------------- nonce cache


class NonceCache:
    """Seen nonces with their expiry; bounded, and refusing rather than forgetting.

    Each ``add`` is O(1) amortized: nonces are kept in the order they were added, which is
    nearly the order they expire in (each expires a window after its claimed time, and claims
    are checked to be within a window of now), so the expired ones are dropped from the front
    as new ones come, each once. One added out of that order stays until those before it
    have expired, which only refuses its replay a little longer. Only when the cache is full
    after that is every entry looked at (a nonce that expired behind a live one is dropped
    then, before anything is refused).
    """

    def __init__(self, capacity: int = DEFAULT_NONCE_CAPACITY) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self._expiry: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._expiry)

    def _expire_front(self, now: float) -> None:
        expiry = self._expiry
        while expiry:
            oldest = next(iter(expiry))
            if expiry[oldest] >= now:
                return
            del expiry[oldest]

    def _expire_all(self, now: float) -> None:
        for nonce in [n for n, exp in self._expiry.items() if exp < now]:
            del self._expiry[nonce]

    def add(self, nonce: str, expires: float, now: float) -> str | None:
        """Remember ``nonce``; return a reason when it cannot be accepted."""
        self._expire_front(now)
        seen = self._expiry.get(nonce)
        if seen is not None and seen >= now:
            return "replayed nonce"
        if len(self._expiry) >= self.capacity:
            self._expire_all(now)
            if len(self._expiry) >= self.capacity:
                return "nonce cache full"
        self._expiry[nonce] = expires
        self._expiry.move_to_end(nonce)
        return None


# --------------------------------------------------------------------------- verifier


def _one_each(headers: Iterable[tuple[str | bytes, str | bytes]]) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    for raw_name, raw_value in headers:
        if not is_identity_header(raw_name):
            continue
        name = raw_name.decode("latin-1") if isinstance(raw_name, bytes) else raw_name
        value = raw_value.decode("latin-1") if isinstance(raw_value, bytes) else raw_value
        canonical = _CANONICAL.get(name.lower())
        if canonical is None:
            raise TunnelRejected(f"identity header in a foreign spelling: {name[:40]!r}")
        found.setdefault(canonical, []).append(value)
    for canonical, got in found.items():
        if len(got) != 1:
            raise TunnelRejected(f"{canonical} repeated")
    values = {canonical: got[0] for canonical, got in found.items()}
    if HEADER_MAC in values:
        if len(values) != 1:
            raise TunnelRejected(f"{HEADER_MAC} beside another identity header")
        fields = values[HEADER_MAC].split(" ")
        if len(fields) != 4:
            raise TunnelRejected(f"malformed {HEADER_MAC}")
        names = (HEADER_USER, HEADER_TIMESTAMP, HEADER_NONCE, HEADER_MAC)
        return dict(zip(names, fields, strict=True))
    for canonical in (HEADER_USER, HEADER_TIMESTAMP, HEADER_NONCE):
        if canonical not in values:
            raise TunnelRejected(f"{canonical} missing")
    if HEADER_SIGNATURE not in values:
        raise TunnelRejected(f"{HEADER_SIGNATURE} or {HEADER_MAC} missing")
    return values


class TunnelConnection:
    """One unix connection from the tunnel as the daemon sees it: the MAC key a signed
    request established on it, if any. Made by the worker per accepted connection."""

    __slots__ = ("mac_key",)

    def __init__(self) -> None:
        self.mac_key: bytes | None = None


class TunnelVerifier:
    """Checks the tunnel's signed identity; one instance per daemon process, built when the
    daemon starts: it refuses every signature made before it was built (``not_before``)."""

    def __init__(
        self,
        public_keys: Sequence[Ed25519PublicKey],
        *,
        clock: Clock,
        window: float = DEFAULT_WINDOW,
        nonce_cache: NonceCache | None = None,
    ) -> None:
        if not public_keys:
            raise ValueError("a verifier needs at least one public key")
        if window <= 0:
            raise ValueError("window must be positive")
        self._keys = tuple(public_keys)
        self._clock = clock
        self.window = float(window)
        self._nonces = nonce_cache if nonce_cache is not None else NonceCache()
        self.not_before = clock.now()
        self._not_before_ms = int(self.not_before * 1000)

    def verify(
        self,
        method: str,
        target: str,
        headers: Iterable[tuple[str | bytes, str | bytes]],
        body: bytes,
        connection: TunnelConnection | None = None,
    ) -> str:
        """The vouched-for user name, or ``TunnelRejected`` (an ``Unauthenticated``).

        ``connection`` is the one the request arrived on: a MAC is checked under its key,
        and a signed ``X-Tunnel-Key`` becomes its key once the request is accepted. Without
        one a MAC is refused (and an offered key is checked but kept nowhere)."""
        values = _one_each(headers)
        user = values[HEADER_USER]
        timestamp = values[HEADER_TIMESTAMP]
        nonce = values[HEADER_NONCE]
        if not _USER_RE.fullmatch(user):
            raise TunnelRejected("malformed user")
        if not _TIMESTAMP_RE.fullmatch(timestamp):
            raise TunnelRejected("malformed timestamp")
        if not _NONCE_RE.fullmatch(nonce):
            raise TunnelRejected("malformed nonce")
        if not _METHOD_RE.fullmatch(method.upper()):
            raise TunnelRejected("malformed method")
        offered = values.get(HEADER_KEY)
        mac_text = values.get(HEADER_MAC)

        def message(domain: bytes, key: str | None = None) -> bytes:
            return canonical_bytes(
                method, target, user, timestamp, nonce, body, domain=domain, key=key
            )

        try:
            if mac_text is not None:
                self._check_mac(mac_text, connection, message)
            else:
                self._check_signature(values[HEADER_SIGNATURE], offered, message)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise TunnelRejected("undecodable field") from None
        now = self._clock.now()
        claimed_ms = int(timestamp)
        claimed = claimed_ms / 1000
        if abs(now - claimed) > self.window:
            raise TunnelRejected("timestamp outside the window")
        if claimed_ms < self._not_before_ms:
            raise TunnelRejected("signed before this daemon started")
        problem = self._nonces.add(nonce, claimed + self.window, now)
        if problem is not None:
            raise TunnelRejected(problem)
        if offered is not None and connection is not None:
            connection.mac_key = _unb64(offered)
        return user

    def _check_signature(
        self, signature_text: str, offered: str | None, message: Callable[..., bytes]
    ) -> None:
        if not _SIGNATURE_RE.fullmatch(signature_text):
            raise TunnelRejected("malformed signature")
        if offered is not None and not _KEY_RE.fullmatch(offered):
            raise TunnelRejected("malformed key")
        signed = message(DOMAIN) if offered is None else message(KEYED_DOMAIN, offered)
        signature = _unb64(signature_text)
        if not any(self._checks(key, signature, signed) for key in self._keys):
            raise TunnelRejected("bad signature")

    @staticmethod
    def _check_mac(
        mac_text: str, connection: TunnelConnection | None, message: Callable[..., bytes]
    ) -> None:
        if not _MAC_RE.fullmatch(mac_text):
            raise TunnelRejected("malformed MAC")
        key = connection.mac_key if connection is not None else None
        if key is None:
            raise TunnelRejected("MAC on a connection without a key")
        # compared as text: only the one canonical encoding of the right MAC is accepted
        if not hmac.compare_digest(mac_text, _b64(_mac_of(key, message(MAC_DOMAIN)))):
            raise TunnelRejected("bad MAC")

    @staticmethod
    def _checks(key: Ed25519PublicKey, signature: bytes, message: bytes) -> bool:
        try:
            key.verify(signature, message)
        except InvalidSignature:
            return False
        return True
