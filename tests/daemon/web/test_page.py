"""The human side's page: served on the unix socket with a strict CSP, never on the TCP port."""

from __future__ import annotations

import re

import pytest

from openbus.daemon.http.web import CSP, STATIC
from openbus.daemon.state import StateDB
from tests.support.daemon import RunningDaemon

ASSETS = [(f"/static/{name}", "") for name in STATIC]


def audit_actions(daemon: RunningDaemon) -> list[str]:
    db = StateDB(daemon.state_dir / "openbus.db")
    rows = db.conn.execute("SELECT action FROM audit ORDER BY seq").fetchall()
    db.close()
    return [row[0] for row in rows]


def test_the_page_and_its_assets_are_served_on_the_socket_with_a_strict_csp(
    daemon: RunningDaemon,
) -> None:
    before = audit_actions(daemon)
    with daemon.human() as client:
        for path, kind in ASSETS:
            response = client.get(path)
            assert response.status_code == 200, (path, response.text)
            assert response.headers["content-security-policy"] == CSP
            assert "default-src 'self'" in CSP and "unsafe-inline" not in CSP
            assert response.headers["x-content-type-options"] == "nosniff"
            assert response.headers["content-type"].startswith(kind)
            assert response.content
            again = client.get(path, headers={"If-None-Match": response.headers["etag"]})
            assert again.status_code == 304
        missing = client.get("/static/nope.js")
        assert audit_actions(daemon) == before  # the page's files carry no data: unaudited
        response = client.get("/")
    assert missing.status_code == 404 and "nope.js" in missing.json()["message"]
    assert response.status_code == 200
    assert response.headers["content-security-policy"] == CSP
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["cache-control"] == "no-store"
    page = response.text
    assert re.search(r'<script type="module" src="/static/app\.js\?v=[0-9a-f]{32}"></script>', page)
    assert "<script>" not in page and " style=" not in page  # nothing inline for the CSP to allow
    assert "http://" not in page.replace('xmlns="http://www.w3.org', "")
    assert "https://" not in page  # nothing loads from outside the box
    # the page carries its first frame of fleet data: one audited read (test_first_frame.py)
    assert audit_actions(daemon)[len(before) :] == ["human.page"]


@pytest.mark.parametrize("path", ["/", "/static/app.js", "/static/app.css", "/api/connections"])
def test_the_page_is_not_served_on_the_agents_tcp_port(daemon: RunningDaemon, path: str) -> None:
    with daemon.agent_side() as client:
        response = client.get(path)
    assert response.status_code == 404
    assert "<html" not in response.text


def test_connections_list_the_humans_agents_through_the_gate(daemon: RunningDaemon) -> None:
    with daemon.human() as client:
        response = client.get("/api/connections")
    assert response.status_code == 200
    assert response.json() == {"cap": "collaborate", "connections": [], "unavailable": []}
    assert audit_actions(daemon)[-1] == "connect.list"
