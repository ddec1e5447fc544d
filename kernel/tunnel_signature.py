"""The signed ``X-Tunnel-User`` identity: codec, verifier and the header spellings.

Theory of operation
-------------------
Only the tunnel client (system user ``openbus-tunnel``) holds the Ed25519 private key. For
every request it forwards to the daemon's unix socket it adds four headers::

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
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
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
SIGNED_HEADERS = (HEADER_USER, HEADER_TIMESTAMP, HEADER_NONCE, HEADER_SIGNATURE)

DOMAIN = b"openbus-tunnel-v2"
NONCE_BYTES = 16
DEFAULT_WINDOW = 30.0
DEFAULT_NONCE_CAPACITY = 100_000
REJECTED = "tunnel identity not accepted"

# Login names as PAM and useradd accept them, plus dots and upper case for other directories.
_USER_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\$?")
_TIMESTAMP_RE = re.compile(r"[0-9]{1,15}")
_NONCE_RE = re.compile(r"[A-Za-z0-9_-]{22}")
_SIGNATURE_RE = re.compile(r"[A-Za-z0-9_-]{86}")
_TARGET_RE = re.compile(r"/[\x21-\x7e]*")
_METHOD_RE = re.compile(r"[A-Z]{1,16}")

_CANONICAL = {name.lower(): name for name in SIGNED_HEADERS}
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


def is_identity_header(name: str | bytes) -> bool:
    """True for any spelling of an identity or signature header.

    Case and ``-``/``_`` are folded, so ``x_tunnel-USER`` counts; any ``x-tunnel-*`` header
    counts (the tunnel owns that prefix), and so do the identity headers other proxies use.
    The tunnel strips every header for which this is true; the daemon treats a request
    carrying one as an identity claim.
    """
    normal = _normal(name)
    return normal.startswith("x-tunnel-") or normal in _FOREIGN_IDENTITY


def has_identity_header(headers: Iterable[tuple[str | bytes, str | bytes]]) -> bool:
    return any(is_identity_header(name) for name, _ in headers)


# --------------------------------------------------------------------------- encoding


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def canonical_bytes(  # noqa: PLR0917
    method: str, target: str, user: str, timestamp: str, nonce: str, body: bytes
) -> bytes:
    return b"\n".join(
        [
            DOMAIN,
            method.upper().encode("ascii"),
            target.encode("latin-1"),
            user.encode("ascii"),
            timestamp.encode("ascii"),
            nonce.encode("ascii"),
            body_digest(body).encode("ascii"),
        ]
    )


def target_from_scope(scope: Mapping[str, Any]) -> str:
    """The request target (raw path, ``?query`` if non-empty) from an ASGI scope."""
    raw = scope.get("raw_path") or str(scope.get("path", "/")).encode("utf-8")
    query = scope.get("query_string") or b""
    target = bytes(raw) + (b"?" + bytes(query) if query else b"")
    return target.decode("latin-1")


def sign(  # noqa: PLR0917
    private_key: Ed25519PrivateKey,
    method: str,
    target: str,
    user: str,
    body: bytes,
    now: float,
    nonce: bytes,
) -> dict[str, str]:
    """The four headers vouching that ``user`` sends this exact request at ``now``."""
    if not _USER_RE.fullmatch(user):
        raise ValueError("user is not a valid login name")
    if not _TARGET_RE.fullmatch(target):
        raise ValueError("target must be an origin-form request target")
    if len(nonce) != NONCE_BYTES:
        raise ValueError(f"nonce must be {NONCE_BYTES} bytes")
    timestamp = str(int(now * 1000))
    nonce_text = _b64(nonce)
    signature = private_key.sign(canonical_bytes(method, target, user, timestamp, nonce_text, body))
    return {
        HEADER_USER: user,
        HEADER_TIMESTAMP: timestamp,
        HEADER_NONCE: nonce_text,
        HEADER_SIGNATURE: _b64(signature),
    }


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
    """Seen nonces with their expiry; bounded, and refusing rather than forgetting."""

    def __init__(self, capacity: int = DEFAULT_NONCE_CAPACITY) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self._expiry: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._expiry)

    def _expire(self, now: float) -> None:
        # Entries are inserted with non-decreasing expiry in practice, but not guaranteed
        # (the window is around each claimed timestamp), so scan past the first live one.
        for nonce in [n for n, exp in self._expiry.items() if exp < now]:
            del self._expiry[nonce]

    def add(self, nonce: str, expires: float, now: float) -> str | None:
        """Remember ``nonce``; return a reason when it cannot be accepted."""
        if nonce in self._expiry and self._expiry[nonce] >= now:
            return "replayed nonce"
        if len(self._expiry) >= self.capacity:
            self._expire(now)
            if len(self._expiry) >= self.capacity:
                return "nonce cache full"
        self._expiry[nonce] = expires
        return None


# --------------------------------------------------------------------------- verifier


def _one_each(headers: Iterable[tuple[str | bytes, str | bytes]]) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    for raw_name, raw_value in headers:
        name = raw_name.decode("latin-1") if isinstance(raw_name, bytes) else raw_name
        value = raw_value.decode("latin-1") if isinstance(raw_value, bytes) else raw_value
        if not is_identity_header(name):
            continue
        canonical = _CANONICAL.get(name.lower())
        if canonical is None:
            raise TunnelRejected(f"identity header in a foreign spelling: {name[:40]!r}")
        found.setdefault(canonical, []).append(value)
    values: dict[str, str] = {}
    for canonical in SIGNED_HEADERS:
        got = found.get(canonical, [])
        if len(got) != 1:
            raise TunnelRejected(f"{canonical} {'missing' if not got else 'repeated'}")
        values[canonical] = got[0]
    return values


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
    ) -> str:
        """The vouched-for user name, or ``TunnelRejected`` (an ``Unauthenticated``)."""
        values = _one_each(headers)
        user = values[HEADER_USER]
        timestamp = values[HEADER_TIMESTAMP]
        nonce = values[HEADER_NONCE]
        signature_text = values[HEADER_SIGNATURE]
        if not _USER_RE.fullmatch(user):
            raise TunnelRejected("malformed user")
        if not _TIMESTAMP_RE.fullmatch(timestamp):
            raise TunnelRejected("malformed timestamp")
        if not _NONCE_RE.fullmatch(nonce):
            raise TunnelRejected("malformed nonce")
        if not _SIGNATURE_RE.fullmatch(signature_text) or not _METHOD_RE.fullmatch(method.upper()):
            raise TunnelRejected("malformed signature or method")
        try:
            signature = _unb64(signature_text)
            message = canonical_bytes(method, target, user, timestamp, nonce, body)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise TunnelRejected("undecodable field") from None
        if not any(self._checks(key, signature, message) for key in self._keys):
            raise TunnelRejected("bad signature")
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
        return user

    @staticmethod
    def _checks(key: Ed25519PublicKey, signature: bytes, message: bytes) -> bool:
        try:
            key.verify(signature, message)
        except InvalidSignature:
            return False
        return True
