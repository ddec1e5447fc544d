"""Sampling refusals, so a flood cannot fill the audit store.

Theory of operation
-------------------
Refusals of callers with no identity (a forged tunnel header over TCP, a token in a query
string) are audited, but anyone on the box can send them as fast as the daemon answers; so
can a connected agent whose calls are refused (a token turned Off, a scope it lacks). For
each *key* (what was refused and from which peer, or the agent refused) the sampler admits
the first ``burst`` refusals of a window of ``window`` seconds as individual records; the rest
are counted. When a window with suppressed refusals closes (noticed at the next refusal of
that key, or by a periodic ``sweep``) the count comes out as one summary, so the trail stays
complete in number: every refusal is either its own record or part of a summary's count. Keys
whose windows closed are forgotten, and at most ``max_keys`` are tracked (the oldest window
closes first), so the sampler's own memory is bounded.

An agent that used its window's burst is rate-limited (``retry_after``): the gate answers its
further calls of that window ``rate_limited`` without running them, each counted in the
window's summary, so a refused caller costs neither records nor executor work.
"""

from __future__ import annotations

from dataclasses import dataclass

from openbus.daemon.core.audit import AuditDraft

SUPPRESSED_ACTION = "refusals.suppressed"


@dataclass(frozen=True)
class Suppressed:
    key: str
    count: int
    since: float
    until: float

    def draft(self) -> AuditDraft:
        """The summary record: how many refusals of ``key`` had no record of their own."""
        return AuditDraft(
            actor="system",
            action=SUPPRESSED_ACTION,
            outcome="refused",
            target=self.key,
            details={"count": self.count, "seconds": round(self.until - self.since, 3)},
        )


@dataclass
class _Window:
    opened: float
    admitted: int = 0
    suppressed: int = 0


class RefusalSampler:
    def __init__(self, burst: int = 100, window: float = 60.0, max_keys: int = 1024) -> None:
        self.burst = burst
        self.window = window
        self.max_keys = max_keys
        self._windows: dict[str, _Window] = {}

    def admit(self, key: str, now: float) -> tuple[bool, list[Suppressed]]:
        """Whether this refusal gets its own record, and any summaries now due."""
        due = self.sweep(now)
        current = self._windows.get(key)
        if current is None:
            if len(self._windows) >= self.max_keys:
                oldest = min(self._windows, key=lambda k: self._windows[k].opened)
                due.extend(self._close(oldest, now))
            current = self._windows[key] = _Window(opened=now)
        if current.admitted < self.burst:
            current.admitted += 1
            return True, due
        current.suppressed += 1
        return False, due

    def retry_after(self, key: str, now: float) -> float | None:
        """Seconds until ``key``'s window closes when it has used its burst, else None."""
        current = self._windows.get(key)
        if current is None or current.admitted < self.burst:
            return None
        left = self.window - (now - current.opened)
        return left if left > 0 else None

    def sweep(self, now: float) -> list[Suppressed]:
        """Close every window older than ``window``; the summaries of those that suppressed."""
        due: list[Suppressed] = []
        for key in [k for k, w in self._windows.items() if now - w.opened >= self.window]:
            due.extend(self._close(key, now))
        return due

    def _close(self, key: str, now: float) -> list[Suppressed]:
        closed = self._windows.pop(key)
        if not closed.suppressed:
            return []
        return [Suppressed(key, closed.suppressed, closed.opened, now)]
