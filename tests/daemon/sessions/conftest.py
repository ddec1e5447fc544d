"""Real git repositories and the fake child agent for the session tools' tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.daemon.messaging.conftest import FAKE_AGENT


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_repo(top: Path) -> Path:
    """A repository at ``top`` on branch main with one commit."""
    top.mkdir(parents=True, exist_ok=True)
    git(top, "init", "-q", "-b", "main")
    git(top, "config", "user.email", "t@example.invalid")
    git(top, "config", "user.name", "t")
    (top / "README").write_text("hello\n")
    git(top, "add", "README")
    git(top, "commit", "-q", "-m", "first")
    return top


def child_argv(root: Path) -> list[str]:
    """The argv of a fake agent TUI drawn like Claude Code (``root/child``: its ``bin/claude``
    and its control dir), for a launcher that opens children."""
    script = root / "child" / "bin" / "claude"
    script.parent.mkdir(parents=True)
    shutil.copy(FAKE_AGENT, script)
    (root / "child" / "control").mkdir()
    return [sys.executable, str(script), str(root / "child" / "control")]
