"""The human's feed: what a page (or ``openbus cards --follow``) shows, pushed as it changes.

Theory of operation
-------------------
A page that polled the directory, its cards and its connections every few seconds would write
an audit record for every poll (dozens a minute per open tab) and bury what people do. So the
page follows instead: ``human.follow`` is one call through the gate, one audit record for the
subscription, and then the daemon pushes frames of what that human may see, each one exactly
what ``directory.list``, ``cards.list`` and ``connect.list`` would answer them:

    {"directory": {...}, "cards": [...], "connections": {...}}

A frame is sent at once, then whenever the directory or the cards change (woken by the
directory's change stream and the cards' change event; grants are re-read on every wake and
at least every ``KEEPALIVE_SECONDS``), and only when it differs from the last one sent;
``None`` (a keep-alive) when nothing changed for ``KEEPALIVE_SECONDS``. Frames are at most
``MIN_GAP_SECONDS`` apart, so a burst of changes costs one frame. A follow ends when its
client goes away or the daemon stops.

``human.page`` is that first frame once, with the human's session families beside it (what
``sessions.families`` answers them): the page's ``GET /`` carries it, so the page draws the
fleet without waiting for a request of its own, then follows as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from openbus.daemon.cards import Cards
from openbus.daemon.connect import Connect
from openbus.daemon.consent_actions import card_list
from openbus.daemon.core.actions import Action
from openbus.daemon.core.actors import Actor
from openbus.daemon.core.consent import Tier
from openbus.daemon.directory_service import DirectoryFeature
from openbus.daemon.feature import Feature
from openbus.daemon.gate import Call, Gate

FOLLOW = Action("human.follow", tier=Tier.HUMAN)
FIRST_FRAME = Action("human.page", tier=Tier.HUMAN)
KEEPALIVE_SECONDS = 5.0
MIN_GAP_SECONDS = 0.1


class HumanFeed(Feature):
    name = "human_feed"

    def __init__(
        self,
        gate: Gate,
        directory: DirectoryFeature,
        cards: Cards,
        connect: Connect,
        families: Callable[[str | None], dict[str, str]],
    ) -> None:
        self.directory = directory
        self.cards = cards
        self.connect = connect
        self.families = families  # a user -> their child panes' parents
        self.stopping = asyncio.Event()
        self.following = 0
        gate.register(FOLLOW, self._follow)
        gate.register(FIRST_FRAME, self._page)

    async def _follow(self, call: Call) -> AsyncIterator[dict[str, Any] | None]:
        return self.frames(call.actor)

    async def _page(self, call: Call) -> dict[str, Any]:
        return {**self.frame(call.actor), "families": self.families(call.actor.user)}

    def frame(self, actor: Actor) -> dict[str, Any]:
        assert actor.user is not None
        return {
            "directory": self.directory.snapshot_for(actor),
            "cards": card_list(self.cards, actor.user),
            "connections": self.connect.connections_of(actor),
        }

    async def frames(self, actor: Actor) -> AsyncIterator[dict[str, Any] | None]:
        wake = asyncio.Event()

        async def directory_changes() -> None:
            async for _ in self.directory.directory.changes():
                wake.set()

        async def card_changes() -> None:
            while True:
                await self.cards.changed.wait()
                wake.set()
                await asyncio.sleep(0)  # ``notify`` replaces the event once it is set

        async def stopped() -> None:
            await self.stopping.wait()
            wake.set()

        loop = asyncio.get_running_loop()
        watchers = [loop.create_task(w()) for w in (directory_changes, card_changes, stopped)]
        self.following += 1
        last = ""
        try:
            while not self.stopping.is_set():
                wake.clear()
                frame = self.frame(actor)
                text = json.dumps(frame, sort_keys=True, default=str)
                if text != last:
                    last = text
                    yield frame
                    await asyncio.sleep(MIN_GAP_SECONDS)
                    if wake.is_set():
                        continue
                try:
                    await asyncio.wait_for(wake.wait(), timeout=KEEPALIVE_SECONDS)
                except TimeoutError:
                    yield None
        finally:
            self.following -= 1
            for task in watchers:
                task.cancel()
            for task in watchers:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def stop(self) -> None:
        self.stopping.set()

    def health(self) -> Mapping[str, Any]:
        return {"following": self.following}
