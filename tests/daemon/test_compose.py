"""The composition root builds every feature, starts them in order and stops them in reverse."""

from __future__ import annotations

import asyncio
from pathlib import Path

from openbus.daemon import compose
from openbus.daemon.config import parse_config
from openbus.daemon.feature import Feature
from openbus.daemon.foundation import Foundation
from openbus.kernel.testing import FixedClock, SeededRandom


def _config(tmp_path: Path) -> object:
    return parse_config(
        {
            "daemon": {"state_dir": str(tmp_path / "state"), "socket": str(tmp_path / "d.sock")},
            "tmux": {"socket": str(tmp_path / "no-tmux")},
            "history": {"claude_config_dirs": [], "codex_homes": []},
        },
        "<test>",
    )


class Probe(Feature):
    name = "probe"

    def __init__(self, events: list[str]) -> None:
        self.events = events

    async def start(self) -> None:
        self.events.append("start")

    async def stop(self) -> None:
        self.events.append("stop")

    def health(self) -> dict[str, object]:
        return {"fine": True}


def test_every_action_of_every_feature_is_registered_once_built(tmp_path: Path) -> None:
    daemon = compose.build(_config(tmp_path), clock=FixedClock(), random=SeededRandom(1))  # type: ignore[arg-type]
    names = {action.name for action in daemon.foundation.gate.actions()}
    for expected in (
        "cards.decide",
        "connect.set",
        "connect.list",
        "directory.list",
        "directory.pane",
        "history.search",
        "audit.read",
        "launch",
        "message.send",
    ):
        assert expected in names
    daemon.foundation.db.close()


def test_an_extra_feature_is_built_from_the_foundation_started_last_and_stopped_first(
    tmp_path: Path,
) -> None:
    events: list[str] = []
    seen: list[Foundation] = []

    def build(base: Foundation) -> Feature:
        seen.append(base)
        return Probe(events)

    daemon = compose.build(
        _config(tmp_path),  # type: ignore[arg-type]
        clock=FixedClock(),
        random=SeededRandom(1),
        extra=[compose.Extra(build)],
    )
    assert seen == [daemon.foundation]
    assert daemon.features[-1].name == "probe"
    health = daemon.health()
    assert health["probe"] == {"fine": True}
    assert set(health["gate"]) >= {"calls", "batches"}
    assert set(health["tmux"]["watcher"]) >= {"captures", "listings", "checks", "pauses"}

    async def main() -> None:
        await daemon.start()
        events.append("running")
        await daemon.stop()

    asyncio.run(main())
    assert events == ["start", "running", "stop"]
