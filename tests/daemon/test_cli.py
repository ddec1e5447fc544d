"""The openbus command line at first run: how to call it, its version, its errors."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from tests.support.daemon import write_config

ROOT = Path(__file__).resolve().parents[2]


def _openbus(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openbus.daemon.cli", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_version_prints_the_installed_version() -> None:
    result = _openbus("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"openbus {version('openbus')}"


def _unreachable(tmp_path: Path) -> Path:
    return write_config(
        tmp_path / "c.toml",
        {"daemon": {"state_dir": str(tmp_path / "s"), "socket": str(tmp_path / "none.sock")}},
    )


def test_an_error_under_json_is_the_one_error_shape_on_stdout(tmp_path: Path) -> None:
    result = _openbus("directory", "--json", "--config", str(_unreachable(tmp_path)))
    assert result.returncode == 1
    body = json.loads(result.stdout)
    assert body["error"] == "unavailable"
    assert "cannot reach the daemon" in body["message"]
    assert result.stderr == ""


def test_an_error_without_json_is_one_line_on_stderr(tmp_path: Path) -> None:
    result = _openbus("directory", "--config", str(_unreachable(tmp_path)))
    assert result.returncode == 1 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("openbus: cannot reach the daemon")


def test_a_config_error_under_json_names_the_key(tmp_path: Path) -> None:
    config = write_config(tmp_path / "bad.toml", {"daemon": {"colour": "blue"}})
    result = _openbus("cards", "--json", "--config", str(config))
    assert result.returncode == 2
    body = json.loads(result.stdout)
    assert body == {
        "error": "config_error",
        "field": "daemon.colour",
        "message": f"{config}: daemon.colour: unknown key",
    }


def test_make_run_installs_the_runtime_without_the_test_extras() -> None:
    planned = subprocess.run(
        ["make", "-n", "-B", "run"], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert planned.returncode == 0, planned.stderr
    installs = [line for line in planned.stdout.splitlines() if "pip install" in line]
    assert any(line.rstrip().endswith("install -q -e .") for line in installs)
    assert not any("[test]" in line for line in installs)
    tests = subprocess.run(
        ["make", "-n", "-B", ".venv/.installed"], cwd=ROOT, capture_output=True, text=True
    )
    assert "-e '.[test]'" in tests.stdout
