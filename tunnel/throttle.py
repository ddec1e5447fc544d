"""Failed-login throttling per user name and per client address.

Theory of operation
-------------------
Each key (``user:<name>`` and ``addr:<ip>``) keeps the monotonic times of its recent failed
logins. A key with ``max_failures`` failures inside ``window`` seconds is blocked until the
oldest of them leaves the window; a login attempt for a blocked user or from a blocked
address is refused before PAM is asked. Every failure also earns a delay before the answer
(``base_delay`` doubled per recent failure of the worse key, capped), which the server
sleeps, so guessing is slow even below the limit. A success clears the user's key (not the
address's: one good password must not launder an address's guessing). Memory is bounded: at
``capacity`` keys the least recently touched key is dropped. Pure: the clock is injected.
"""

from __future__ import annotations

from collections import OrderedDict, deque

from openbus.kernel.clock import Clock


class LoginThrottle:
    def __init__(
        self,
        clock: Clock,
        *,
        max_failures: int = 5,
        window: float = 900.0,
        base_delay: float = 1.0,
        max_delay: float = 8.0,
        capacity: int = 10_000,
    ) -> None:
        self._clock = clock
        self.max_failures = max_failures
        self.window = window
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.capacity = capacity
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, key: str) -> deque[float]:
        now = self._clock.monotonic()
        times = self._failures.get(key)
        if times is None:
            return deque()
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._failures[key]
        return times

    def retry_after(self, user: str, address: str) -> float:
        """Seconds until this user may try from this address again (0: allowed now)."""
        now = self._clock.monotonic()
        wait = 0.0
        for key in (f"user:{user}", f"addr:{address}"):
            times = self._recent(key)
            if len(times) >= self.max_failures:
                wait = max(wait, times[-self.max_failures] + self.window - now)
        return wait

    def failed(self, user: str, address: str) -> float:
        """Record a failure; return the delay to wait before answering."""
        now = self._clock.monotonic()
        worst = 0
        for key in (f"user:{user}", f"addr:{address}"):
            times = self._recent(key)
            times.append(now)
            self._failures[key] = times
            self._failures.move_to_end(key)
            worst = max(worst, len(times))
        while len(self._failures) > self.capacity:
            self._failures.popitem(last=False)
        return float(min(self.max_delay, self.base_delay * 2 ** (worst - 1)))

    def succeeded(self, user: str) -> None:
        self._failures.pop(f"user:{user}", None)
