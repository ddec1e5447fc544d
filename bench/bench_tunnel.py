"""Through the tunnel vs. straight to the daemon's socket: GET /api/directory p50, and login cost.

Needs root (a throwaway tunnel user and a PAM account are created and removed). Floor:
the tunnel's p50 may be at most 1.5x the direct p50, measured in the same run.

Both sides use the same client, httpx with one kept-alive connection each (HTTPS to the
tunnel, one TLS handshake for the whole run; the unix socket as root to the daemon). The
machine is shared, so the two are interleaved request by request (load that comes and goes
hits both alike) in ``ROUNDS`` rounds, each printed with its own ratio; the verdict is on the
p50s of all rounds together. Also printed, to show where the time goes:

* the tunnel alone: ``GET /login`` (TLS, HTTP parsing, the app; no daemon), interleaved too;
* CPU per request of each process (the tunnel or nginx's worker, the daemon worker, this
  client), from ``/proc`` over ``CPU_N`` requests of each kind: unlike latency, it does not
  depend on what else runs;
* the peer: nginx (when installed; ``make bench`` installs Debian's nginx-light) as a bare
  TLS-terminating reverse proxy in front of the same socket, with a kept-alive upstream, no
  login, no signature: what any TLS hop costs here, interleaved with the other two.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.daemon import free_port, running_daemon
from tests.support.wait import wait_until
from tests.tunnel.conftest import ThrowawayUsers, hosted_pair, start_tunnel, stop_tunnel

FLOOR = 1.5
N = 200
ROUNDS = 5
CPU_N = 1000


def p50(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def only_child(pid: int) -> int:
    return int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])


def timed(call: Callable[[], object], into: list[float]) -> None:
    t0 = time.perf_counter()
    call()
    into.append(time.perf_counter() - t0)


def cpu_per_request(
    call: Callable[[], object], proxy_pid: int, worker_pid: int
) -> tuple[float, float, float]:
    """ms of CPU per request: the proxy (the tunnel, or nginx's worker), daemon worker, this
    client."""
    before = (cpu_seconds(proxy_pid), cpu_seconds(worker_pid), time.process_time())
    for _ in range(CPU_N):
        call()
    after = (cpu_seconds(proxy_pid), cpu_seconds(worker_pid), time.process_time())
    t, d, c = (1000 * (b - a) / CPU_N for a, b in zip(before, after, strict=True))
    return t, d, c


NGINX_CONF = """worker_processes 1;
daemon off;
user root;
pid {base}/nginx.pid;
error_log {base}/nginx.log;
events {{ worker_connections 64; }}
http {{
    access_log off;
    upstream openbus {{ server unix:{sock}; keepalive 4; }}
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        location / {{
            proxy_pass http://openbus;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""


@dataclass
class Peer:
    client: httpx.Client
    worker: int  # the pid of nginx's one worker process


@contextlib.contextmanager
def nginx_peer(base: Path, sock: Path, tunnel_dir: Path) -> Iterator[Peer | None]:
    """A client of nginx proxying TLS to the daemon's socket (as root, so the daemon sees the
    same peer as the direct requests), and nginx's worker, or None when nginx is not
    installed."""
    binary = shutil.which("nginx") or (
        "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
    )
    if binary is None:
        yield None
        return
    port = free_port()
    conf = base / "nginx.conf"
    conf.write_text(
        NGINX_CONF.format(
            base=base,
            sock=sock,
            port=port,
            cert=tunnel_dir / "secrets" / "tls.crt",
            key=tunnel_dir / "secrets" / "tls.key",
        )
    )
    process = subprocess.Popen(
        [binary, "-c", str(conf), "-p", str(base)], stderr=subprocess.DEVNULL
    )
    client = httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=False, timeout=15)

    def answering() -> bool:
        try:
            return client.get("/healthz").status_code < 500
        except httpx.HTTPError:
            return False

    try:
        wait_until(answering, timeout=15, what="nginx to answer")
        yield Peer(client, only_child(process.pid))
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=10)


def main() -> None:
    if os.geteuid() != 0:
        print("bench_tunnel: skipped (needs root for a PAM account and a tunnel user)")
        return
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
        daemon_dir, tunnel_dir, sock, hosted = hosted_pair(
            base, tunnel_user=tunnel_user, pam_service=service
        )
        with running_daemon(daemon_dir, hosted) as daemon:
            tunnel = start_tunnel(
                tunnel_dir,
                daemon_socket=sock,
                pam_service=service,
                run_as=tunnel_user,
                failed_login_delay=0.0,
            )
            try:
                with (
                    tunnel.client() as client,
                    daemon.human() as desk,
                    nginx_peer(base, sock, tunnel_dir) as nginx,
                ):
                    peer = nginx.client if nginx is not None else None
                    logins = []
                    for _ in range(5):
                        client.cookies.clear()
                        t0 = time.perf_counter()
                        assert tunnel.login(client, human, password).status_code == 303
                        logins.append(time.perf_counter() - t0)
                    assert client.get("/api/directory").status_code == 200
                    assert desk.get("/api/directory").status_code == 200
                    if peer is not None:
                        assert peer.get("/api/directory").status_code == 200
                    through_all: list[float] = []
                    direct_all: list[float] = []
                    alone_all: list[float] = []
                    peer_all: list[float] = []
                    for number in range(1, ROUNDS + 1):
                        through: list[float] = []
                        direct: list[float] = []
                        alone: list[float] = []
                        peered: list[float] = []
                        for _ in range(N):
                            timed(lambda: client.get("/api/directory"), through)
                            timed(lambda: desk.get("/api/directory"), direct)
                            timed(lambda: client.get("/login"), alone)
                            if peer is not None:
                                timed(lambda: peer.get("/api/directory"), peered)
                        print(
                            f"round {number}: tunnel p50 {p50(through):.2f} ms, direct "
                            f"{p50(direct):.2f} ms, ratio {p50(through) / p50(direct):.2f}; "
                            f"tunnel alone (GET /login) {p50(alone):.2f} ms"
                            + (
                                f"; nginx peer {p50(peered):.2f} ms, ratio "
                                f"{p50(peered) / p50(direct):.2f}"
                                if peered
                                else ""
                            )
                        )
                        through_all += through
                        direct_all += direct
                        alone_all += alone
                        peer_all += peered
                    worker = only_child(daemon.process.pid)
                    cpu_through = cpu_per_request(
                        lambda: client.get("/api/directory"), tunnel.process.pid, worker
                    )
                    cpu_direct = cpu_per_request(
                        lambda: desk.get("/api/directory"), tunnel.process.pid, worker
                    )
                    cpu_peer = (
                        cpu_per_request(
                            lambda: nginx.client.get("/api/directory"), nginx.worker, worker
                        )
                        if nginx is not None
                        else None
                    )
            finally:
                stop_tunnel(tunnel)
        ratio = p50(through_all) / p50(direct_all)
        print(f"tunnel GET /api/directory p50 {p50(through_all):.2f} ms (all rounds)")
        print(f"direct GET /api/directory p50 {p50(direct_all):.2f} ms (all rounds)")
        print(f"tunnel alone GET /login p50 {p50(alone_all):.2f} ms (TLS + HTTP, no daemon)")
        print(f"ratio {ratio:.2f} (floor {FLOOR}): {'OK' if ratio <= FLOOR else 'OVER'}")
        if peer_all:
            print(
                f"peer: nginx as a bare TLS proxy to the same socket p50 {p50(peer_all):.2f} ms, "
                f"ratio {p50(peer_all) / p50(direct_all):.2f} to direct; the tunnel is "
                f"{p50(through_all) / p50(peer_all):.2f}x the peer"
            )
        else:
            print("peer: nginx is not installed; no bare TLS proxy measured")
        for name, (t, d, c) in (("tunnel", cpu_through), ("direct", cpu_direct)):
            print(
                f"CPU per request, {name}: tunnel {t:.3f} ms, daemon {d:.3f} ms, "
                f"client {c:.3f} ms, total {t + d + c:.3f} ms"
            )
        if cpu_peer is not None:
            n, d, c = cpu_peer
            print(
                f"CPU per request, nginx: nginx {n:.3f} ms, daemon {d:.3f} ms, "
                f"client {c:.3f} ms, total {n + d + c:.3f} ms"
            )
        print(f"login (PAM via the helper, sealed cookie) p50 {p50(logins):.1f} ms")
    finally:
        pam_file.unlink(missing_ok=True)
        users.remove_all()
        subprocess.run(["rm", "-rf", str(base)], check=False)


if __name__ == "__main__":
    main()
