"""Injected time and randomness.

Core code never calls ``time.time()`` or ``secrets`` directly; it takes a ``Clock`` and a
``Random``. Tests pass a ``FixedClock`` and a seeded random to check expiry and replay windows
exactly.
"""

from __future__ import annotations

import secrets
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (wall clock, for records and expiry)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a monotonic clock (for intervals and rates)."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class FixedClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._mono = 0.0

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._now += seconds
        self._mono += seconds


class Random(Protocol):
    def token_bytes(self, n: int) -> bytes: ...


class SystemRandom:
    def token_bytes(self, n: int) -> bytes:
        return secrets.token_bytes(n)


class SeededRandom:
    """Deterministic bytes for tests (never for real tokens)."""

    def __init__(self, seed: int = 0) -> None:
        self._counter = seed

    def token_bytes(self, n: int) -> bytes:
        import hashlib

        out = b""
        while len(out) < n:
            self._counter += 1
            out += hashlib.sha256(self._counter.to_bytes(8, "big")).digest()
        return out[:n]
