"""Fixtures the real-harness tests share: the stub model, a tmux server and a project repo
of the test's own (a plugin of ``tests/conftest.py``, loaded after ``require``)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.stub_model import StubModel, running_stub_model
from tests.support.tmux import TmuxServer, tmux_server


@pytest.fixture
def stub() -> Iterator[StubModel]:
    """The stub model the real harness CLIs talk to."""
    with running_stub_model() as model:
        yield model


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[TmuxServer]:
    """A tmux server of the test's own."""
    with tmux_server(tmp_path / "tmux") as server:
        yield server


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A fresh git repository for an agent to work in."""
    path = tmp_path / "project"
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path
