"""Test doubles of the kernel's ports: a clock that moves only when told, seeded bytes.

Named as doubles and kept apart from the real ``SystemClock`` and ``SystemRandom``; no product
code imports this module.
"""

from __future__ import annotations

import hashlib


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


class SeededRandom:
    """Deterministic bytes for tests (never for real tokens)."""

    def __init__(self, seed: int = 0) -> None:
        self._counter = seed

    def token_bytes(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            self._counter += 1
            out += hashlib.sha256(self._counter.to_bytes(8, "big")).digest()
        return out[:n]
