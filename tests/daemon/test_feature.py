"""The housekeeping tick runs every feature's tick; a failing one does not stop the others."""

from __future__ import annotations

import asyncio

import pytest

from openbus.daemon.feature import Feature, Housekeeping, to_grid
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
    assert all(0 < seconds <= 1.0 for seconds in slept)  # to the next whole second


def test_a_wait_on_the_grid_ends_on_the_next_multiple_of_its_period() -> None:
    assert to_grid(10.0, 1.0) == 1.0
    assert to_grid(10.25, 1.0) == 0.75
    assert to_grid(10.999, 1.0) == pytest.approx(0.001)
    assert to_grid(10.25, 0.1) == pytest.approx(0.05)
    assert 10.25 + to_grid(10.25, 0.1) == pytest.approx(10.3)


def test_loops_that_wait_on_the_grid_wake_in_the_same_turn_of_the_event_loop() -> None:
    """The tick and the evidence re-reads both wait for the next whole second of the loop's
    clock, however far apart they started: asyncio wakes them in one turn (what the first does
    next, after its wake, comes after the second's wake)."""
    order: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def waits(name: str, offset: float) -> None:
            await asyncio.sleep(offset)  # they start at different moments
            await asyncio.sleep(to_grid(loop.time(), 1.0))
            order.append(name)
            loop.call_soon(order.append, f"after {name}")

        await asyncio.gather(waits("tick", 0.0), waits("evidence", 0.3))
        await let_others_run()

    asyncio.run(main())
    assert order[:2] == ["tick", "evidence"] or order[:2] == ["evidence", "tick"]
