"""The layers hold: import-linter's contracts pass on the tree and fail on a planted import
that points the wrong way."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PARTS = ("daemon", "tunnel", "policy", "kernel")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the sources laid out as in the repository (``openbus/*`` are links)."""
    ignore = shutil.ignore_patterns("__pycache__")
    for part in PARTS:
        shutil.copytree(REPO / part, tmp_path / part, ignore=ignore)
    shutil.copytree(REPO / "openbus", tmp_path / "openbus", symlinks=True, ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_keeps_every_layer_contract(tree: Path) -> None:
    result = _lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "planted", "contract"),
    [
        ("kernel/clock.py", "openbus.daemon.gate", "the kernel imports nothing else"),
        ("tunnel/throttle.py", "openbus.daemon.config", "do not import the daemon"),
        ("policy/model.py", "openbus.tunnel.session", "independent"),
        ("daemon/core/actors.py", "openbus.daemon.gate", "pure core imports no adapter"),
        ("daemon/core/actors.py", "sqlite3", "pure core imports no adapter"),
        ("daemon/messaging/service.py", "openbus.daemon.compose", "composition root"),
        ("daemon/tmux/adapter.py", "openbus.daemon.http.routes", "no import cycles"),
    ],
)
def test_a_planted_wrong_direction_import_breaks_its_contract(
    tree: Path, module: str, planted: str, contract: str
) -> None:
    path = tree / module
    path.write_text(path.read_text() + f"\nimport {planted}  # planted\n")
    result = _lint(tree)
    assert result.returncode != 0, result.stdout
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, result.stdout
