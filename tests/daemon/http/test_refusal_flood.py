"""A flood of anonymous refusals is counted, not recorded one by one without end."""

from __future__ import annotations

import asyncio
from pathlib import Path

from openbus.daemon import compose
from openbus.daemon.app import create_app
from openbus.daemon.config import parse_config
from openbus.kernel.testing import FixedClock, SeededRandom
from tests.support.asgi import call


def test_forged_identities_beyond_the_burst_are_counted_in_one_summary(tmp_path: Path) -> None:
    config = parse_config(
        {
            "daemon": {"state_dir": str(tmp_path / "state"), "socket": str(tmp_path / "d.sock")},
            "tmux": {"socket": str(tmp_path / "no-tmux")},
        },
        "<test>",
    )
    clock = FixedClock()
    daemon = compose.build(config, clock=clock, random=SeededRandom())
    app = create_app(config, daemon=daemon)
    refusals = daemon.foundation.refusals
    burst = refusals.sampler.burst
    forged = [(b"x-tunnel-user", b"root")]

    async def flood(count: int) -> set[int]:
        statuses = set()
        for _ in range(count):
            status, _ = await call(app, "GET", "/healthz", peer=False, headers=forged)  # type: ignore[arg-type]
            statuses.add(status)
        return statuses

    assert asyncio.run(flood(burst + 50)) == {401}  # every one refused
    records = daemon.foundation.audit.read(0, 10_000)
    assert [r.action for r in records] == ["identity.refused"] * burst
    clock.advance(refusals.sampler.window)
    refusals.tick()
    [summary] = daemon.foundation.audit.read(records[-1].seq)
    assert (summary.action, summary.target, summary.details["count"]) == (
        "refusals.suppressed",
        "identity.refused tcp",
        50,
    )
