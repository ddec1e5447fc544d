"""Real git repositories for the session tools' tests."""

from __future__ import annotations

import subprocess
from pathlib import Path


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
