"""Fixtures for the tests of the harness test infrastructure (stub model, tmux, real CLIs)."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.harnesses import claude, codex
from tests.support.stub_model import stub_model
from tests.support.tmux import TmuxServer, tmux_server

__all__ = ["claude", "codex", "harness_tmux", "stub_model"]


@pytest.fixture
def harness_tmux(tmp_path: Path) -> Iterator[TmuxServer]:
    """A private tmux server (own socket, ``-f /dev/null``, 120x40, focus-events on)."""
    with tmux_server(tmp_path / "tmux") as server:
        yield server
