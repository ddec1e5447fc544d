"""Shared fixtures. Support code lives in ``tests/support``.

``OPENBUS_REQUIRE`` (e.g. ``harness,root``) turns skips for missing real parts into failures:
``tests/support/require.py``, loaded here. ``pytester`` is for the test of that mechanism.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import RunningDaemon, running_daemon

pytest_plugins = ["pytester", "tests.support.require", "tests.support.fixtures"]


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[RunningDaemon]:
    """The real daemon (gunicorn subprocess) with a private state dir and socket."""
    with running_daemon(tmp_path) as running:
        yield running
