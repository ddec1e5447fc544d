"""Through the tunnel to the real daemon: HTTPS, a cookie jar, the human in the audit."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from tests.support.daemon import running_daemon
from tests.tunnel.conftest import (
    ThrowawayUsers,
    hosted_pair,
    needs_root,
    start_tunnel,
    stop_tunnel,
)

pytestmark = [pytest.mark.root, needs_root]


def test_the_directory_through_the_tunnel_is_read_as_the_logged_in_user(
    users: ThrowawayUsers, pam_service: str, open_dir: Path
) -> None:
    tunnel_user = users.add()
    password = "pw-" + secrets.token_urlsafe(12)
    human = users.add(password)
    daemon_dir, tunnel_dir, sock, hosted = hosted_pair(
        open_dir, tunnel_user=tunnel_user, pam_service=pam_service
    )
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
