"""Local mode's loopback web address for the human, against the real daemon (gunicorn).

The secret printed at start is exchanged for a cookie; without it nothing but ``/healthz``
answers; Host and Origin are checked; no answer carries CORS headers; the agents' port never
serves the human side, even with the cookie, and the web address never serves ``/mcp``.
"""

from __future__ import annotations

import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.daemon import RunningDaemon, restart_daemon, running_daemon, write_config


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with running_daemon(tmp_path_factory.mktemp("web")) as started:
        yield started


@pytest.fixture
def web(daemon: RunningDaemon) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=daemon.web_base(), timeout=10) as client:
        yield client


@contextmanager
def logged_in(daemon: RunningDaemon) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=daemon.web_base(), timeout=10) as client:
        answer = client.get(daemon.web_url())
        assert answer.status_code == 303, answer.text
        yield client


def test_the_daemon_prints_the_address_with_this_starts_secret_kept_0600(
    daemon: RunningDaemon,
) -> None:
    url = daemon.web_url()
    assert url in daemon.log()
    secret = daemon.socket_path.parent / "web.secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert urlsplit(url).hostname == "127.0.0.1"


def test_the_secret_is_exchanged_for_an_http_only_strict_cookie_and_leaves_the_address(
    daemon: RunningDaemon, web: httpx.Client
) -> None:
    answer = web.get(daemon.web_url())
    assert answer.status_code == 303
    assert answer.headers["location"] == "/"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith("openbus_web=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    page = web.get("/")
    assert page.status_code == 200 and "<title>openbus</title>" in page.text
    fleet = web.get("/api/directory")
    assert fleet.status_code == 200 and "panes" in fleet.json()


def test_the_page_is_the_daemons_users_own_and_its_actions_are_audited(
    daemon: RunningDaemon,
) -> None:
    with logged_in(daemon) as web:
        web.get("/api/directory").raise_for_status()
        records = web.get("/api/audit", params={"after": 0, "limit": 1000}).json()["records"]
    listed = [r for r in records if r["action"] == "directory.list"]
    assert listed and listed[-1]["actor"].startswith("human:")


def test_without_the_secret_only_healthz_answers_and_the_refusal_says_how_in(
    daemon: RunningDaemon, web: httpx.Client
) -> None:
    assert web.get("/healthz").json()["ok"] is True
    for path in ("/", "/api/directory", "/static/app.js"):
        answer = web.get(path)
        assert answer.status_code == 401, path
        assert "openbus ui" in answer.json()["message"]


def test_a_wrong_secret_is_refused_and_audited_and_sets_no_cookie(
    daemon: RunningDaemon, web: httpx.Client
) -> None:
    answer = web.get("/", params={"token": "not-the-secret"})
    assert answer.status_code == 401
    assert "set-cookie" not in answer.headers
    assert "changes at every start" in answer.json()["message"]
    with daemon.human() as human:
        records = human.get("/api/audit", params={"after": 0, "limit": 1000}).json()["records"]
    refused = [r for r in records if r["action"] == "web.refused"]
    assert refused and refused[-1]["outcome"] == "refused"
    assert "not-the-secret" not in str(records)


def test_a_foreign_host_or_origin_is_refused_even_with_the_cookie(daemon: RunningDaemon) -> None:
    with logged_in(daemon) as web:
        rebound = web.get("/api/directory", headers={"Host": "evil.example:80"})
        assert rebound.status_code == 403 and "Host" in rebound.json()["message"]
        foreign = web.put(
            "/api/connect",
            json={"pane": "%1", "preset": "observe"},
            headers={"Origin": "http://evil.example"},
        )
        assert foreign.status_code == 403 and "Origin" in foreign.json()["message"]
        port = urlsplit(daemon.web_base()).port
        same = web.get("/api/directory", headers={"Origin": f"http://localhost:{port}"})
        assert same.status_code == 200


def test_no_answer_carries_cors_headers(daemon: RunningDaemon) -> None:
    with logged_in(daemon) as web:
        origin = {"Origin": "http://evil.example", "Access-Control-Request-Method": "PUT"}
        for answer in (
            web.options("/api/connect", headers=origin),
            web.get("/api/directory", headers=origin),
            web.get("/api/directory"),
        ):
            assert not any(k.lower().startswith("access-control-") for k in answer.headers)


def test_the_agents_port_never_serves_the_human_side_even_with_the_cookie(
    daemon: RunningDaemon,
) -> None:
    with logged_in(daemon) as web:
        cookie = web.cookies["openbus_web"]
    login = urlsplit(daemon.web_url())
    with httpx.Client(
        base_url=daemon.base_url, timeout=10, cookies={"openbus_web": cookie}
    ) as agents:
        for path in ("/", "/api/directory", f"/?{login.query}"):
            answer = agents.get(path)
            assert answer.status_code == 404, path
            assert "set-cookie" not in answer.headers


def test_the_web_address_does_not_serve_mcp(daemon: RunningDaemon) -> None:
    with logged_in(daemon) as web:
        answer = web.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize"})
    assert answer.status_code == 404


def test_a_restart_draws_a_new_secret_and_the_old_one_stops_working(tmp_path: Path) -> None:
    with running_daemon(tmp_path) as first:
        old = first.web_url()
        second = restart_daemon(first)
        try:
            assert second.web_url() != old
            with httpx.Client(base_url=second.web_base(), timeout=10) as web:
                assert web.get(old).status_code == 401
                assert web.get(second.web_url()).status_code == 303
        finally:
            second.stop()


def test_openbus_ui_prints_the_address_without_opening_a_browser_when_told(
    daemon: RunningDaemon,
) -> None:
    result = daemon.cli("ui", "--no-browser", check=True)
    assert result.stdout.strip() == daemon.web_url()
    as_json = daemon.cli("ui", "--no-browser", "--json", check=True)
    assert '"opened": false' in as_json.stdout


def test_openbus_ui_without_a_running_daemon_says_so(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "c.toml",
        {"daemon": {"socket": str(tmp_path / "run" / "d.sock"), "state_dir": str(tmp_path)}},
    )
    result = subprocess.run(
        [sys.executable, "-m", "openbus.daemon.cli", "ui", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert "is the daemon running" in result.stderr and "Traceback" not in result.stderr
