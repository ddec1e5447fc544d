"""The housekeeping tick runs every feature's tick; a failing one does not stop the others."""

from __future__ import annotations

import asyncio

from openbus.daemon.feature import Feature, Housekeeping
from tests.support.wait import let_others_run


class Recorder(Feature):
    def __init__(self, name: str, ran: list[str], *, fail: bool = False) -> None:
        self.name = name
        self.ran = ran
        self.fail = fail

    def tick(self) -> None:
        if self.fail:
            raise RuntimeError("boom")
        self.ran.append(self.name)


class Awaited(Feature):
    name = "awaited"

    def __init__(self, ran: list[str]) -> None:
        self.ran = ran

    async def tick(self) -> None:
        await let_others_run()
        self.ran.append(self.name)


def test_one_tick_runs_every_feature_in_order_and_a_failing_one_does_not_stop_the_rest() -> None:
    ran: list[str] = []
    features = [Recorder("failing", ran, fail=True), Recorder("plain", ran), Awaited(ran)]
    asyncio.run(Housekeeping(features).tick_once())
    assert ran == ["plain", "awaited"]


def test_the_tick_repeats_on_the_injected_sleep_until_stopped() -> None:
    ran: list[str] = []
    slept: list[float] = []

    async def main() -> None:
        third = asyncio.Event()

        async def sleep(seconds: float) -> None:
            slept.append(seconds)
            if len(slept) >= 3:
                third.set()
            await let_others_run()

        housekeeping = Housekeeping([Recorder("plain", ran)], sleep=sleep)
        housekeeping.start()
        await asyncio.wait_for(third.wait(), timeout=10)
        await housekeeping.stop()

    asyncio.run(main())
    assert ran.count("plain") >= 3
    assert set(slept) == {1.0}


def test_a_feature_that_needs_nothing_does_nothing() -> None:
    feature = Feature()
    assert feature.tick() is None and feature.health() is None
    asyncio.run(feature.start())
    asyncio.run(feature.stop())
