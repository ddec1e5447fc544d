"""Injected time and randomness.

Core code never calls ``time.time()`` or ``secrets`` directly; it takes a ``Clock`` and a
``Random``. Tests pass the doubles of ``openbus.kernel.testing`` to check expiry and replay
windows exactly.
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


class Random(Protocol):
    def token_bytes(self, n: int) -> bytes: ...


class SystemRandom:
    def token_bytes(self, n: int) -> bytes:
        return secrets.token_bytes(n)
