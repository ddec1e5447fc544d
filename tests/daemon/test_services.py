"""The composition root's housekeeping: one tick a second runs every registered job."""

from __future__ import annotations

import asyncio
from pathlib import Path

from openbus.daemon.config import parse_config
from openbus.daemon.core.clock import FixedClock, SeededRandom
from openbus.daemon.services import Services
from tests.support.wait import let_others_run, wait_until


def _services(tmp_path: Path) -> Services:
    config = parse_config(
        {"daemon": {"state_dir": str(tmp_path / "state"), "socket": str(tmp_path / "d.sock")}},
        "<test>",
    )
    return Services.build(config, clock=FixedClock(), random=SeededRandom(1))


def test_every_job_runs_on_the_one_tick_and_a_failing_job_does_not_stop_the_others(
    tmp_path: Path,
) -> None:
    services = _services(tmp_path)
    ran: list[str] = []

    def plain() -> None:
        ran.append("plain")

    async def awaited() -> None:
        await let_others_run()
        ran.append("awaited")

    def failing() -> None:
        raise RuntimeError("boom")

    services.every_second("failing", failing)
    services.every_second("plain", plain)
    services.every_second("awaited", awaited)

    async def go() -> None:
        tasks_before = len(services.tasks)
        await services.start()
        assert len(services.tasks) - tasks_before >= 1
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(
            None,
            lambda: wait_until(lambda: ran.count("awaited") >= 2, timeout=10, what="two ticks"),
        )
        await services.stop()

    asyncio.run(go())
    assert ran.count("plain") >= 2
    assert [name for name, _ in services.housekeeping][-3:] == ["failing", "plain", "awaited"]
