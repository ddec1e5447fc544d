"""Through the tunnel vs. straight to the daemon's socket: GET /api/directory p50, and login cost.

Needs root (a throwaway tunnel user and a PAM account are created and removed). Floor:
the tunnel's p50 may be at most 1.5x the direct p50, measured in the same run. Until the
daemon honours the signed identity the tunnel's requests are answered 401 by the daemon;
they still make the full round trip (TLS, session, signing, the daemon's socket).
"""

from __future__ import annotations

import os
import pwd
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLOOR = 1.5
N = 200


def p50(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main() -> None:
    if os.geteuid() != 0:
        print("bench_tunnel: skipped (needs root for a PAM account and a tunnel user)")
        return
    from tests.support.daemon import running_daemon
    from tests.tunnel.conftest import ThrowawayUsers, start_tunnel, stop_tunnel, write_tunnel_config

    users = ThrowawayUsers()
    base = Path(tempfile.mkdtemp(prefix="openbus-bench-tunnel-", dir="/tmp"))
    base.chmod(0o755)
    service = "openbus-bench-" + secrets.token_hex(3)
    pam_file = Path("/etc/pam.d") / service
    pam_file.write_text("@include common-auth\n@include common-account\n")
    try:
        tunnel_user = users.add()
        password = "pw-" + secrets.token_urlsafe(12)
        human = users.add(password)
        daemon_dir, tunnel_dir = base / "daemon", base / "tunnel"
        daemon_dir.mkdir(mode=0o755)
        tunnel_dir.mkdir(mode=0o755)
        sock = daemon_dir / "run" / "daemon.sock"
        config = write_tunnel_config(
            tunnel_dir, port=1, daemon_socket=sock, pam_service=service, run_as=tunnel_user
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
        hosted = {
            "hosted": {
                "enabled": True,
                "tunnel_user": tunnel_user,
                "tunnel_public_key": str(tunnel_dir / "tunnel.pub"),
            }
        }
        with running_daemon(daemon_dir, hosted) as daemon:
            sock.parent.chmod(0o755)
            os.chown(sock, -1, pwd.getpwnam(tunnel_user).pw_gid)
            tunnel = start_tunnel(
                tunnel_dir,
                daemon_socket=sock,
                pam_service=service,
                run_as=tunnel_user,
                failed_login_delay=0.0,
            )
            try:
                with tunnel.client() as client:
                    logins = []
                    for _ in range(5):
                        client.cookies.clear()
                        t0 = time.perf_counter()
                        assert tunnel.login(client, human, password).status_code == 303
                        logins.append(time.perf_counter() - t0)
                    status = client.get("/api/directory").status_code
                    through = []
                    for _ in range(N):
                        t0 = time.perf_counter()
                        client.get("/api/directory")
                        through.append(time.perf_counter() - t0)
                with daemon.human() as desk:
                    direct = []
                    for _ in range(N):
                        t0 = time.perf_counter()
                        desk.get("/api/directory")
                        direct.append(time.perf_counter() - t0)
            finally:
                stop_tunnel(tunnel)
        ratio = p50(through) / p50(direct)
        print(f"tunnel GET /api/directory p50 {p50(through):.2f} ms (daemon answered {status})")
        print(f"direct GET /api/directory p50 {p50(direct):.2f} ms")
        print(f"ratio {ratio:.2f} (floor {FLOOR}): {'OK' if ratio <= FLOOR else 'OVER'}")
        print(f"login (PAM via the helper, sealed cookie) p50 {p50(logins):.1f} ms")
    finally:
        pam_file.unlink(missing_ok=True)
        users.remove_all()
        subprocess.run(["rm", "-rf", str(base)], check=False)


if __name__ == "__main__":
    main()
