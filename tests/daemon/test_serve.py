"""openbus serve: gunicorn with one worker, both listeners, clean shutdown."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.support.daemon import RunningDaemon, write_config


def test_healthz_answers_on_the_agents_port_and_the_human_socket(daemon: RunningDaemon) -> None:
    with daemon.agent_side() as agents:
        assert agents.get("/healthz").json()["ok"] is True
    with daemon.human() as human:
        assert human.get("/healthz").json()["ok"] is True


def test_the_human_socket_is_private_to_its_user(daemon: RunningDaemon) -> None:
    assert daemon.socket_path.stat().st_mode & 0o077 == 0


def test_sigterm_drains_and_exits_zero(daemon: RunningDaemon) -> None:
    assert daemon.stop(signal.SIGTERM) == 0


def test_a_bad_config_key_stops_start_up_naming_key_and_file(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "bad.toml", {"daemon": {"listen": "127.0.0.1:7707", "colour": "blue"}}
    )
    result = subprocess.run(
        [sys.executable, "-m", "openbus.daemon.cli", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode != 0
    assert "daemon.colour" in result.stderr and str(config) in result.stderr
    assert "Traceback" not in result.stderr
