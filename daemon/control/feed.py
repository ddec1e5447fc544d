"""The feed control blocks on: the directory's changes that matter for routing, and new
requests, behind one revision counter.

Theory of operation
-------------------
The directory publishes a change for every screen update; control must not wake for a
spinner. The feed listens to the directory (``Directory.listen``: called as each change is
published, so a waiter wakes as soon as a reader of ``changes()`` would) and keeps only what
routing needs: a pane appeared (``added``), went (``gone``), changed state or title
(``state``), the tmux server came or went (``server``); plus the thread entries control has
to work on (``thread``). Each kept change takes the next revision; the last ``KEPT`` are held
in a ring.

``wait(since, timeout)`` answers at once with the changes after ``since`` if there are any,
else blocks until the next kept change or the timeout (at most 50 s), woken by an event the
change sets: no polling, so a waiting caller costs nothing while the fleet is quiet. A
``since`` the ring no longer holds (or one from an earlier daemon lifetime) answers
``resync``: read the directory again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from openbus.daemon.directory import Change, Directory
from openbus.kernel.clock import Clock
from openbus.kernel.errors import BadRequest, NotFound

KEPT = 1024
MAX_WAIT_SECONDS = 50.0

Visible = Callable[[dict[str, Any]], bool]


class ControlFeed:
    def __init__(self, directory: Directory, clock: Clock) -> None:
        self.directory = directory
        self.clock = clock
        self.revision = 0
        self._ring: deque[dict[str, Any]] = deque(maxlen=KEPT)
        self._seen: dict[str, tuple[str, str, str | None]] = {}  # pane -> (inc, state, title)
        self._waiters: list[asyncio.Future[None]] = []  # woken by the next kept change
        self._listening = False
        self._stopped = False
        self.wakeups = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._seen = {
            e.pane_id: (e.incarnation, e.state, e.title) for e in self.directory.entries()
        }
        if not self._listening:
            self._listening = True
            self.directory.listen(self._on_published)
        self._stopped = False

    async def stop(self) -> None:
        self._stopped = True

    def _on_published(self, change: Change) -> None:
        if not self._stopped:
            self.on_change(change)

    # ------------------------------------------------------------------ what is kept

    def on_change(self, change: Change) -> None:
        if change.kind == "server":
            self._push({"kind": "server", "tmux": self.directory.server()})
            if not self.directory.server_running:
                self._diff()
            return
        if change.kind == "resync" or change.pane_id is None:
            self._diff()
            return
        if change.kind == "removed":
            self._gone(change.pane_id)
            return
        try:
            entry = self.directory.entry(change.pane_id)
        except NotFound:  # gone again before we looked
            self._gone(change.pane_id)
            return
        self._look(entry.pane_id, entry.incarnation, entry.state, entry.title, entry.harness)

    def _look(
        self, pane: str, incarnation: str, state: str, title: str | None, harness: str
    ) -> None:
        was = self._seen.get(pane)
        now = (incarnation, state, title)
        if was == now:
            return
        self._seen[pane] = now
        if was is None or was[0] != incarnation:
            if was is not None:
                self._push({"kind": "gone", "pane": pane, "incarnation": was[0]})
            kind = "added"
        else:
            kind = "state"
        body = {
            "kind": kind,
            "pane": pane,
            "incarnation": incarnation,
            "harness": harness,
            "state": state,
            "title": title,
        }
        if kind == "state" and was is not None:
            body["from"] = was[1]
        self._push(body)

    def _gone(self, pane: str) -> None:
        was = self._seen.pop(pane, None)
        if was is not None:
            self._push({"kind": "gone", "pane": pane, "incarnation": was[0]})

    def _diff(self) -> None:
        present = {e.pane_id: e for e in self.directory.entries()}
        for pane in [p for p in self._seen if p not in present]:
            self._gone(pane)
        for e in present.values():
            self._look(e.pane_id, e.incarnation, e.state, e.title, e.harness)

    def thread_entry(self, entry: dict[str, Any]) -> None:
        """A thread entry for control (a delegated request, a fallback)."""
        self._push({"kind": "thread", "entry": entry})

    def _push(self, body: dict[str, Any]) -> None:
        self.revision += 1
        self._ring.append({"revision": self.revision, "time": self.clock.now(), **body})
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # ------------------------------------------------------------------ readers

    def since(self, revision: int) -> list[dict[str, Any]] | None:
        """The kept changes after ``revision``; None when the ring no longer holds them."""
        if revision > self.revision:
            return None
        if revision == self.revision:
            return []
        oldest = self._ring[0]["revision"] if self._ring else self.revision + 1
        if revision < oldest - 1:
            return None
        return [c for c in self._ring if c["revision"] > revision]

    async def wait(self, since: object, timeout: object, visible: Visible) -> dict[str, Any]:
        start = _since(since, self.revision)
        seconds = _timeout(timeout)
        deadline = self.clock.monotonic() + seconds
        while True:
            found = self.since(start)
            if found is None:
                return {"revision": self.revision, "resync": True, "changes": []}
            shown = [c for c in found if visible(c)]
            if shown:
                return {"revision": self.revision, "resync": False, "changes": shown}
            start = self.revision
            left = deadline - self.clock.monotonic()
            if left <= 0:
                return {"revision": self.revision, "resync": False, "changes": []}
            await self._next(left)
            self.wakeups += 1

    async def _next(self, timeout: float) -> None:
        """Until the next kept change or ``timeout``: one future, set by the change itself."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        timer = loop.call_later(timeout, _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            if waiter in self._waiters:
                self._waiters.remove(waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _since(value: object, current: int) -> int:
    if value is None:
        return current
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest("since must be a revision (a whole number from 0)", field="since")
    return value


def _timeout(value: object) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise BadRequest(
            f"timeout_seconds must be a number of seconds (0 to {int(MAX_WAIT_SECONDS)})",
            field="timeout_seconds",
        )
    if value > MAX_WAIT_SECONDS:
        raise BadRequest(
            f"timeout_seconds is at most {int(MAX_WAIT_SECONDS)}", field="timeout_seconds"
        )
    return float(value)
