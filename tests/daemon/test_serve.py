"""openbus serve: gunicorn with one worker, both listeners, clean shutdown."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

from openbus.daemon.serve import FILE_LIMIT
from tests.support.daemon import RunningDaemon, running_daemon, write_config


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


def _serve(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openbus.daemon.cli", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_port_already_in_use_is_one_line_naming_the_listen_key(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config = write_config(
            tmp_path / "busy.toml",
            {
                "daemon": {
                    "listen": f"127.0.0.1:{port}",
                    "state_dir": str(tmp_path / "state"),
                    "socket": str(tmp_path / "run" / "d.sock"),
                }
            },
        )
        result = _serve(config)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"openbus: config error: {config}: daemon.listen: 127.0.0.1:{port} is already in use "
        "(another daemon, or another program); stop it, or set another port"
    ]


def test_a_state_dir_that_is_a_file_is_one_line_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    config = write_config(
        tmp_path / "file.toml",
        {
            "daemon": {
                "listen": "127.0.0.1:1",
                "state_dir": str(tmp_path / "afile"),
                "socket": str(tmp_path / "run" / "d.sock"),
            }
        },
    )
    result = _serve(config)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "daemon.state_dir" in lines[0] and "not a directory" in lines[0]


def _open_files_limit(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open files limit listed")


def test_the_daemon_raises_its_open_files_limit_from_a_low_soft_one(tmp_path: Path) -> None:
    """As systemd starts a service (soft 1024): a fleet of a few hundred panes holds a pidfd
    and a stat file for each."""
    low = (
        "import resource, sys\n"
        "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "from openbus.daemon.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    with running_daemon(tmp_path, serve=("-c", low, "serve")) as daemon:
        soft, hard = _open_files_limit(daemon.process.pid)
        assert soft == min(hard, FILE_LIMIT) > 256
