"""The real tunnel (root start, privilege drop, PAM helper) in front of a recording upstream."""

from __future__ import annotations

import asyncio
import os
import pwd
import secrets
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from openbus.kernel.clock import SystemClock
from openbus.kernel.errors import Unauthenticated
from openbus.kernel.tunnel_signature import TunnelVerifier, is_identity_header, load_public_keys
from openbus.tunnel.server import _CoalescingTransport
from tests.support.wait import let_others_run, wait_until
from tests.tunnel.conftest import (
    RecordingUpstream,
    RunningTunnel,
    ThrowawayUsers,
    needs_root,
    start_tunnel,
    stop_tunnel,
)

pytestmark = [pytest.mark.root, needs_root]


@dataclass
class Box:
    tunnel: RunningTunnel
    upstream: RecordingUpstream
    tunnel_user: str
    human: str
    password: str
    # built before any request, as the daemon builds its own when it starts
    verifier: TunnelVerifier

    @contextmanager
    def signed_in(self) -> Iterator[httpx.Client]:
        with self.tunnel.client() as client:
            response = self.tunnel.login(client, self.human, self.password)
            assert response.status_code == 303, response.text
            yield client


@pytest.fixture
def box(users: ThrowawayUsers, pam_service: str, open_dir: Path) -> Iterator[Box]:
    tunnel_user = users.add()
    password = "pw-" + secrets.token_urlsafe(12)
    human = users.add(password)
    with RecordingUpstream(open_dir / "daemon.sock") as upstream:
        tunnel = start_tunnel(
            open_dir,
            daemon_socket=upstream.socket_path,
            pam_service=pam_service,
            run_as=tunnel_user,
            failed_login_delay=0.01,
            max_failed_logins=3,
        )
        verifier = TunnelVerifier(
            load_public_keys(tunnel.public_key.read_bytes()), clock=SystemClock()
        )
        try:
            yield Box(tunnel, upstream, tunnel_user, human, password, verifier)
        finally:
            stop_tunnel(tunnel)


def test_the_serving_process_runs_as_the_tunnel_user_and_the_helper_as_root(box: Box) -> None:
    status = Path(f"/proc/{box.tunnel.process.pid}/status").read_text()
    uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    assert uid_line.split()[1:] == [str(pwd.getpwnam(box.tunnel_user).pw_uid)] * 4
    children = (
        Path(f"/proc/{box.tunnel.process.pid}/task/{box.tunnel.process.pid}/children")
        .read_text()
        .split()
    )
    assert len(children) == 1
    helper_status = Path(f"/proc/{children[0]}/status").read_text()
    assert (
        next(line for line in helper_status.splitlines() if line.startswith("Uid:")).split()[1]
        == "0"
    )
    groups = next(line for line in status.splitlines() if line.startswith("Groups:")).split()[1:]
    assert groups == []


def test_a_right_password_gives_a_secure_httponly_strict_session_cookie(box: Box) -> None:
    with box.tunnel.client() as client:
        response = box.tunnel.login(client, box.human, box.password)
    assert response.status_code == 303
    assert response.headers["location"] == "/"
    cookie = response.headers["set-cookie"]
    name, _, rest = cookie.partition("=")
    assert name == "__Host-openbus"
    flags = {part.strip().split("=")[0].lower(): part.strip() for part in rest.split(";")[1:]}
    assert {"secure", "httponly", "samesite", "path", "max-age"} <= set(flags)
    assert flags["samesite"] == "SameSite=Strict"
    assert flags["path"] == "Path=/"
    assert "domain" not in flags
    assert box.human not in cookie  # sealed, not merely signed


def test_a_wrong_password_is_refused_without_a_cookie(box: Box) -> None:
    with box.tunnel.client() as client:
        response = box.tunnel.login(client, box.human, "not-" + box.password)
        assert response.status_code == 401
        assert "set-cookie" not in response.headers
        assert "Wrong user name or password" in response.text
        assert client.get("/api/directory").status_code == 401
    assert box.upstream.requests == []


def test_without_a_session_a_browser_is_sent_to_the_login_page(box: Box) -> None:
    with box.tunnel.client() as client:
        response = client.get("/api/directory?x=1", headers={"accept": "text/html"})
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=%2Fapi%2Fdirectory%3Fx%3D1"


def test_a_forged_cookie_is_no_session(box: Box) -> None:
    with box.tunnel.client() as client:
        client.cookies.set("__Host-openbus", "v1.00000000.AAAA")
        assert client.get("/api/directory").status_code == 401


def test_requests_reach_the_daemon_signed_as_the_logged_in_user(box: Box) -> None:
    with box.signed_in() as client:
        response = client.post("/api/launch?cwd=%2Ftmp", json={"launcher": "shell"})
    assert response.status_code == 200
    assert response.json() == {"ok": True}
    (seen,) = box.upstream.requests
    assert seen.target == "/api/launch?cwd=%2Ftmp"
    assert box.verifier.verify(seen.method, seen.target, seen.headers, seen.body) == box.human
    names = {name for name, _ in seen.headers}
    assert "cookie" not in names
    assert "authorization" not in names


def test_a_request_without_a_body_is_forwarded_without_a_content_length(box: Box) -> None:
    with box.signed_in() as client:
        assert client.get("/api/directory").status_code == 200
    (seen,) = box.upstream.requests
    assert seen.body == b""
    assert "content-length" not in {name for name, _ in seen.headers}
    assert box.verifier.verify(seen.method, seen.target, seen.headers, seen.body) == box.human


def test_an_answer_carries_the_security_headers_one_date_and_no_server_name(box: Box) -> None:
    with box.signed_in() as client:
        response = client.get("/api/directory")
    names = [name.decode().lower() for name, _ in response.headers.raw]
    assert names.count("date") == 1
    assert "server" not in names
    for name in (
        "strict-transport-security",
        "x-content-type-options",
        "referrer-policy",
        "x-frame-options",
    ):
        assert name in names
    assert response.json() == {"ok": True}


SPELLINGS = [
    "X-Tunnel-User",
    "x-tunnel-user",
    "X_Tunnel_User",
    "x-tunnel_user",
    "X-TUNNEL-USER",
    "x_tunnel_signature",
    "X-Tunnel-Nonce",
    "x-tunnel-timestamp",
    "X-Tunnel-Key",
    "X-Tunnel-Mac",
    "X-Forwarded-User",
    "Remote-User",
]


def test_incoming_identity_headers_are_stripped_in_every_spelling(box: Box) -> None:
    with box.signed_in() as client:
        forged = [(name, "root") for name in SPELLINGS] + [("X-Tunnel-User", "mallory")]
        response = client.get("/api/directory", headers=forged)
    assert response.status_code == 200
    (seen,) = box.upstream.requests
    identity = [(name, value) for name, value in seen.headers if is_identity_header(name)]
    assert sorted(name for name, _ in identity) == sorted(
        # a connection's first request: signed, offering the tunnel's own key
        [
            "x-tunnel-user",
            "x-tunnel-timestamp",
            "x-tunnel-nonce",
            "x-tunnel-signature",
            "x-tunnel-key",
        ]
    )
    assert dict(identity)["x-tunnel-user"] == box.human
    assert dict(identity)["x-tunnel-key"] != "root"
    assert box.verifier.verify(seen.method, seen.target, seen.headers, seen.body) == box.human


def test_a_replayed_signed_request_is_refused(box: Box) -> None:
    with box.signed_in() as client:
        client.get("/api/directory")
    (seen,) = box.upstream.requests
    verifier = box.verifier
    assert verifier.verify(seen.method, seen.target, seen.headers, seen.body) == box.human
    with pytest.raises(Unauthenticated, match="tunnel identity not accepted"):
        verifier.verify(seen.method, seen.target, seen.headers, seen.body)


def test_server_sent_events_stream_through_as_they_happen(box: Box) -> None:
    received: list[str] = []
    with box.signed_in() as client, client.stream("GET", "/events") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.iter_lines()

        def read_one() -> None:
            for line in lines:
                if line.startswith("data:"):
                    received.append(line)
                    return

        reader = threading.Thread(target=read_one, daemon=True)
        reader.start()
        # The upstream holds its second event until released: the first must arrive before.
        wait_until(
            lambda: received == ["data: one"],
            timeout=10,
            what="the first event while the stream is open",
        )
        box.upstream.release.set()
        reader.join(timeout=10)
        read_one()
    assert received == ["data: one", "data: two"]


def test_failed_logins_are_limited_per_user(box: Box) -> None:
    with box.tunnel.client() as client:
        for _ in range(3):
            assert box.tunnel.login(client, box.human, "wrong").status_code == 401
        limited = box.tunnel.login(client, box.human, box.password)
    assert limited.status_code == 429
    assert int(limited.headers["retry-after"]) > 0
    assert "set-cookie" not in limited.headers


def test_failed_logins_are_limited_per_address_across_users(box: Box) -> None:
    with box.tunnel.client() as client:
        for n in range(3):
            assert box.tunnel.login(client, f"obtnobody{n}", "wrong").status_code == 401
        assert box.tunnel.login(client, box.human, box.password).status_code == 429


def test_a_cross_site_login_post_is_refused(box: Box) -> None:
    with box.tunnel.client() as client:
        response = client.post(
            "/login",
            data={"user": box.human, "password": box.password},
            headers={"origin": "https://evil.example"},
        )
    assert response.status_code == 403


def test_logging_out_ends_the_session(box: Box) -> None:
    with box.signed_in() as client:
        cookie = client.cookies.get("__Host-openbus")
        assert client.get("/api/directory").status_code == 200
        assert client.post("/logout", headers={"origin": box.tunnel.url}).status_code == 303
        client.cookies.set("__Host-openbus", cookie or "")
        assert client.get("/api/directory").status_code == 401


def test_pam_unavailable_is_reported_distinctly_from_a_wrong_password(box: Box) -> None:
    helper = (
        Path(f"/proc/{box.tunnel.process.pid}/task/{box.tunnel.process.pid}/children")
        .read_text()
        .split()[0]
    )
    os.kill(int(helper), signal.SIGKILL)
    with box.tunnel.client() as client:
        response = box.tunnel.login(client, box.human, box.password)
    assert response.status_code == 503
    assert "unavailable" in response.text
    assert "Wrong user name" not in response.text


def test_a_head_and_the_body_after_it_leave_the_tunnel_as_one_write_at_once() -> None:
    """A response's head and body, written in the same step, become one TLS record, sent as
    the body is written; a stream's later chunks still leave as soon as each is written.
    (Whether uvicorn writes both in one step depends on load, so this is checked on the
    transport wrapper itself.)"""

    class Recorder:
        def __init__(self) -> None:
            self.writes: list[bytes] = []

        def write(self, data: bytes) -> None:
            self.writes.append(data)

        def is_closing(self) -> bool:
            return False

        def close(self) -> None:
            self.writes.append(b"<closed>")

    async def scenario() -> list[bytes]:
        real = Recorder()
        transport = _CoalescingTransport(real)  # type: ignore[arg-type]
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        assert real.writes == []  # held for what follows it
        transport.write(b'{"ok": true}')
        assert len(real.writes) == 1  # gone with it, before the step ends
        await let_others_run()  # the next step of the loop
        transport.write(b"data: later\n\n")
        transport.close()
        return real.writes

    assert asyncio.run(scenario()) == [
        b'HTTP/1.1 200 OK\r\n\r\n{"ok": true}',
        b"data: later\n\n",
        b"<closed>",
    ]
