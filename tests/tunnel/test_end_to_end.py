"""Through the tunnel to the real daemon: HTTPS, a cookie jar, the human in the audit."""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import running_daemon
from tests.support.policy import signed_policy
from tests.tunnel.conftest import (
    ThrowawayUsers,
    needs_root,
    start_tunnel,
    stop_tunnel,
    write_tunnel_config,
)

pytestmark = [pytest.mark.root, needs_root]


def test_the_directory_through_the_tunnel_is_read_as_the_logged_in_user(
    users: ThrowawayUsers, pam_service: str, open_dir: Path
) -> None:
    tunnel_user = users.add()
    password = "pw-" + secrets.token_urlsafe(12)
    human = users.add(password)
    daemon_dir = open_dir / "daemon"
    daemon_dir.mkdir(mode=0o755)
    tunnel_dir = open_dir / "tunnel"
    tunnel_dir.mkdir(mode=0o755)
    # The tunnel's secrets first, so the daemon starts with its public key.
    sock = daemon_dir / "run" / "daemon.sock"
    config = write_tunnel_config(
        tunnel_dir, port=1, daemon_socket=sock, pam_service=pam_service, run_as=tunnel_user
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "openbus.tunnel.cli",
            "init",
            "--config",
            str(config),
            "--public-key",
            str(tunnel_dir / "tunnel.pub"),
            "--hostname",
            "localhost",
        ],
        check=True,
        capture_output=True,
    )
    hosted: dict[str, dict[str, Any]] = {
        "hosted": {
            "enabled": True,
            "tunnel_user": tunnel_user,
            "tunnel_public_key": str(tunnel_dir / "tunnel.pub"),
            "operators_group": tunnel_user,
        },
        "policy": signed_policy(open_dir / "org"),
    }
    with running_daemon(daemon_dir, hosted) as daemon:
        tunnel = start_tunnel(
            tunnel_dir, daemon_socket=sock, pam_service=pam_service, run_as=tunnel_user
        )
        try:
            with tunnel.client() as client:
                assert tunnel.login(client, human, password).status_code == 303
                response = client.get("/api/directory")
                assert response.status_code == 200, response.text
        finally:
            stop_tunnel(tunnel)
        with daemon.human() as desk:
            audit = desk.get("/api/audit").text
        assert f"human:{human}" in audit
