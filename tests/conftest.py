"""Shared fixtures. Support code lives in ``tests/support``.

``OPENBUS_REQUIRE`` (e.g. ``harness,root``) turns skips for missing real parts into failures:
``tests/support/require.py``, loaded here. ``pytester`` is for the test of that mechanism.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.daemon import RunningDaemon, running_daemon

if TYPE_CHECKING:
    from tests.support.stub_model import StubModel
    from tests.support.tmux import TmuxServer

pytest_plugins = ["pytester", "tests.support.require"]


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[RunningDaemon]:
    """The real daemon (gunicorn subprocess) with a private state dir and socket."""
    with running_daemon(tmp_path) as running:
        yield running


@pytest.fixture
def stub() -> Iterator[StubModel]:
    """A stub model server (imported here: the require plugin must load before its modules)."""
    from tests.support.stub_model import running_stub_model  # noqa: PLC0415

    with running_stub_model() as model:
        yield model


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[TmuxServer]:
    """A tmux server of the test's own."""
    from tests.support.tmux import tmux_server  # noqa: PLC0415

    with tmux_server(tmp_path / "tmux") as server:
        yield server
