"""What a part of the daemon may do besides registering its actions: start, stop, tick, health.

Theory of operation
-------------------
A feature is built by the composition root (``daemon.compose``) from the ports it uses, and
registers its gate actions while it is built. The root then runs every feature through this
one protocol, in the order it names them:

* ``start()`` in build order once the event loop runs, ``stop()`` in reverse order at
  shutdown (a failing stop is logged and the others still stop);
* ``tick()`` once a second on the one housekeeping tick (``Housekeeping``), the sweeps of
  cards, messages and launches and the policy watch; one wake-up a second for all of them.
  A sweep of stored deadlines asks the database only once one can be due (``core.due``), so
  an idle tick is mostly code that runs cold. A failing tick is logged under the feature's
  name and the others still run;
* ``health()``: the feature's section of ``/healthz`` (``None``: it has none).

Override only what a feature needs (mitmproxy's addons work the same way).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

log = logging.getLogger("openbus")

TICK_SECONDS = 1.0

Sleep = Callable[[float], Awaitable[None]]


class Feature:
    """A part of the daemon; the defaults do nothing."""

    name = "feature"

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def tick(self) -> Awaitable[None] | None:
        return None

    def health(self) -> Mapping[str, Any] | None:
        return None


class Housekeeping:
    """The one tick a second that runs every feature's ``tick()``."""

    def __init__(self, features: Sequence[Feature], *, sleep: Sleep = asyncio.sleep) -> None:
        self.features = tuple(features)
        self.sleep = sleep
        self._task: asyncio.Task[None] | None = None

    async def tick_once(self) -> None:
        for feature in self.features:
            try:
                pending = feature.tick()
                if inspect.isawaitable(pending):
                    await pending
            except Exception:
                log.exception("%s failed", feature.name)

    async def _run(self) -> None:
        while True:
            await self.tick_once()
            await self.sleep(TICK_SECONDS)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="housekeeping")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
