"""When a sweep of stored deadlines can next have work: so an idle daemon skips the query.

Theory of operation
-------------------
A sweep (cards whose time has passed, message ids past their hour) asks the database, once a
second, for rows whose deadline is behind it. Nearly always there are none, yet the question
costs a read transaction and code that runs cold. ``Due`` keeps a lower bound on the soonest
deadline a stored row can have, so the sweep asks only when that time has come:

* ``added(at)``: a row with deadline ``at`` is about to be stored (its write may commit later,
  or be rolled back: a bound that is too early costs one query, never a miss). These are kept
  in a heap until a sweep runs at or after them.
* ``swept(now, soonest)``: a sweep ran at ``now`` and the rows still stored have ``soonest``
  as their earliest deadline (``None``: no rows). Deadlines added and not yet passed stay;
  the rest were seen by that sweep if their write had committed.
* ``due(now)``: whether a sweep can have work now.

The bound is ``min(soonest stored, soonest added still ahead, last sweep + recheck)``. A row
whose write committed only after its own deadline passed (a write held back for its whole
life) is missed by the bound, so a sweep runs at least every ``recheck`` seconds, whatever
the bound says. Before the first sweep the bound is unknown, so the first call is due.
"""

from __future__ import annotations

import heapq


class Due:
    def __init__(self, recheck: float) -> None:
        self.recheck = recheck
        self._stored: float = float("-inf")  # unknown until the first sweep
        self._added: list[float] = []

    def added(self, at: float) -> None:
        heapq.heappush(self._added, at)

    def due(self, now: float) -> bool:
        return now >= self.soonest()

    def soonest(self) -> float:
        """The soonest time a sweep can have work."""
        soonest = self._stored
        if self._added and self._added[0] < soonest:
            soonest = self._added[0]
        return soonest

    def swept(self, now: float, soonest: float | None) -> None:
        while self._added and self._added[0] <= now:
            heapq.heappop(self._added)
        ceiling = now + self.recheck
        self._stored = ceiling if soonest is None else min(soonest, ceiling)
