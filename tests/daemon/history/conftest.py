"""Fixtures for the history tests: an index over synthetic Claude Code and Codex homes (with
two git checkouts to be in), and the real Claude Code and Codex CLIs."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from openbus.daemon.history.index import HistoryIndex, watched_liveness
from openbus.daemon.history.sources import Sources
from openbus.kernel.testing import FixedClock
from tests.daemon.history.homes import ClaudeHome, CodexHome
from tests.support.harnesses import claude, codex
from tests.support.stub_model import stub_model

__all__ = ["World", "claude", "codex", "populate", "stub_model", "world"]


@dataclass
class World:
    tmp: Path
    claude: ClaudeHome
    codex: CodexHome
    index: HistoryIndex
    widget: Path  # a git checkout with origin github.com/acme/widget
    gadget: Path  # a git checkout with origin github.com/acme/gadget


def _checkout(path: Path, origin: str) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(["git", "-C", str(path), "remote", "add", "origin", origin], check=True)
    return path


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    claude = ClaudeHome(tmp_path / "claude")
    codex = CodexHome(tmp_path / "codex")
    widget = _checkout(tmp_path / "src" / "widget", "git@github.com:acme/widget.git")
    gadget = _checkout(tmp_path / "src" / "gadget", "https://github.com/acme/gadget.git")
    sources = Sources((claude.root,), (codex.root,))
    clock = FixedClock()
    index = HistoryIndex(
        tmp_path / "state" / "history.db",
        sources,
        clock=clock,
        liveness=watched_liveness(sources, clock),
    )
    yield World(tmp_path, claude, codex, index, widget, gadget)
    index.close()


def populate(w: World) -> None:
    w.claude.session(
        "c-login",
        str(w.widget),
        ["fix the flaky login test in the auth module"],
        branches=("fix/login-flake",),
        replies=["opened https://github.com/acme/widget/pull/4955"],
        ai_title="Fix flaky login test",
    )
    w.claude.subagent("c-login", "agent1", str(w.widget), "Find every caller of authenticate()")
    w.claude.session("c-docs", str(w.gadget), ["write the release notes for version two"])
    w.codex.rollout("x-billing", str(w.gadget), ["migrate the billing tables to postgres"])
    w.codex.rollout(
        "x-exec", str(w.widget), ["run the linter and report"], source="exec", day="2026/11/29"
    )
    w.codex.name("x-billing", "Billing migration")
