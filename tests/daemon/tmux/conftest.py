from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.tmux import TmuxServer, tmux_server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[TmuxServer]:
    with tmux_server(tmp_path / "tmux") as running:
        yield running
