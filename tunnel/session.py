"""Sessions in a sealed cookie.

Theory of operation
-------------------
After a PAM login the tunnel gives the browser one cookie, ``__Host-openbus`` (so the browser
insists on Secure, Path=/ and no Domain), also HttpOnly and SameSite=Strict. Its value is
AES-256-GCM over ``{"u": user, "sid": random id, "iat": issued, "exp": expiry}`` with a key
from the tunnel's key ring (a file only ``openbus-tunnel`` can read; first key seals, every
key opens, so keys rotate by prepending). The value is ``v1.<key id>.<nonce+ciphertext>`` in
base64url; the key id is the first 8 hex digits of the key's SHA-256, and the cookie name is
the associated data, so a value cannot be moved to another cookie. Opening checks the key,
the tag, the JSON shape and the expiry against the injected clock; any failure is simply "no
session". Logging out records the session id as revoked until its expiry (in memory: a
restart forgets revocations, which the short expiry bounds). Pure apart from crypto.

A browser sends the same cookie value with every request, so the result of decrypting one
is remembered (at most ``OPEN_CACHE`` values, forgotten all at once when full): the value
maps to the same session whenever it is opened, as the key ring does not change while the
tunnel runs. The expiry and the revocation list are checked on every open, cached or not, so
a logout takes effect at once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from openbus.kernel.clock import Clock, Random

COOKIE_NAME = "__Host-openbus"
KEY_BYTES = 32
OPEN_CACHE = 1024


@dataclass(frozen=True)
class Session:
    user: str
    sid: str
    issued: float
    expires: float


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def parse_key_ring(text: str) -> list[bytes]:
    """One base64 key of 32 bytes per line; ``#`` comments and blank lines ignored."""
    keys = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            key = base64.b64decode(line, validate=True)
        except binascii.Error:
            raise ValueError(f"line {number} is not base64") from None
        if len(key) != KEY_BYTES:
            raise ValueError(f"line {number} is not a {KEY_BYTES}-byte key")
        keys.append(key)
    if not keys:
        raise ValueError("no key in the key ring")
    return keys


def new_key_ring_line(random: Random) -> str:
    return base64.b64encode(random.token_bytes(KEY_BYTES)).decode("ascii") + "\n"


def _key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:8]


class SessionSealer:
    def __init__(self, keys: list[bytes], *, clock: Clock, random: Random, ttl: float) -> None:
        if not keys:
            raise ValueError("no session key")
        self._keys = {_key_id(k): AESGCM(k) for k in keys}
        self._current = _key_id(keys[0])
        self._clock = clock
        self._random = random
        self.ttl = ttl
        self._revoked: dict[str, float] = {}
        self._opened: dict[str, Session] = {}

    def seal(self, user: str) -> tuple[str, Session]:
        now = self._clock.now()
        session = Session(
            user=user, sid=_b64(self._random.token_bytes(16)), issued=now, expires=now + self.ttl
        )
        payload = json.dumps(
            {
                "u": session.user,
                "sid": session.sid,
                "iat": int(session.issued),
                "exp": int(session.expires),
            },
            separators=(",", ":"),
        ).encode("utf-8")
        nonce = self._random.token_bytes(12)
        sealed = self._keys[self._current].encrypt(nonce, payload, COOKIE_NAME.encode("ascii"))
        return f"v1.{self._current}.{_b64(nonce + sealed)}", session

    def open(self, value: str | None) -> Session | None:
        if not value or len(value) > 4096:
            return None
        session = self._opened.get(value)
        if session is None:
            session = self._decrypt(value)
            if session is None:
                return None
            if len(self._opened) >= OPEN_CACHE:
                self._opened.clear()
            self._opened[value] = session
        if self._clock.now() >= session.expires or session.sid in self._revoked:
            return None
        return session

    def _decrypt(self, value: str) -> Session | None:
        parts = value.split(".")
        if len(parts) != 3 or parts[0] != "v1" or parts[1] not in self._keys:
            return None
        try:
            blob = _unb64(parts[2])
            payload = self._keys[parts[1]].decrypt(
                blob[:12], blob[12:], COOKIE_NAME.encode("ascii")
            )
            data = json.loads(payload)
            session = Session(
                user=str(data["u"]),
                sid=str(data["sid"]),
                issued=float(data["iat"]),
                expires=float(data["exp"]),
            )
        except (binascii.Error, InvalidTag, ValueError, KeyError, TypeError):
            return None
        return session

    def revoke(self, session: Session) -> None:
        now = self._clock.now()
        for sid in [s for s, exp in self._revoked.items() if exp <= now]:
            del self._revoked[sid]
        self._revoked[session.sid] = session.expires

    def cookie(self, value: str, max_age: int) -> str:
        return (
            f"{COOKIE_NAME}={value}; Path=/; Max-Age={max_age}; Secure; HttpOnly; SameSite=Strict"
        )

    def clearing_cookie(self) -> str:
        return f"{COOKIE_NAME}=; Path=/; Max-Age=0; Secure; HttpOnly; SameSite=Strict"
