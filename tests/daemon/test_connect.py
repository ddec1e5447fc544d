"""Connect over the real daemon: turning an agent Off revokes its token for good."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.mcp.conftest import Fleet, make_fleet
from tests.daemon.mcp.test_endpoint import raw


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    with make_fleet(tmp_path) as made:
        yield made


def put_connect(fleet: Fleet, pane: str, preset: str) -> Any:
    with fleet.daemon.human() as client:
        return client.put("/api/connect", json={"pane": pane, "preset": preset})


def test_off_then_observe_again_leaves_the_old_token_refused(fleet: Fleet) -> None:
    launched = fleet.launch("fakeclaude", "observe")
    token = fleet.token_of(launched["pid"])
    assert raw(fleet, token).status_code == 200
    assert put_connect(fleet, launched["pane"], "off").status_code == 200
    assert raw(fleet, token).status_code == 401
    again = put_connect(fleet, launched["pane"], "observe")
    assert again.status_code == 409, again.text
    body = again.json()
    assert body["field"] == "pane"
    assert "revoked" in body["message"] and "restart-to-connect" in body["message"]
    assert raw(fleet, token).status_code == 401
    records = [r for r in fleet.audit() if r["action"] == "connect.set"]
    assert records[0]["details"]["revoked"] is True
    assert records[0]["details"]["principals"] == [launched["connect"]["principal"]]
    assert records[-1]["outcome"] != "ok"
    # turning it off again is a no-op, not an error
    assert put_connect(fleet, launched["pane"], "off").status_code == 200


def test_disconnect_all_revokes_every_token_of_the_human(fleet: Fleet) -> None:
    first = fleet.launch("fakeclaude", "observe")
    second = fleet.launch("fakecodex", "collaborate")
    tokens = [fleet.token_of(first["pid"]), fleet.token_of(second["pid"])]
    with fleet.daemon.human() as client:
        assert client.post("/api/disconnect-all", json={}).json()["disconnected"] == 2
    assert put_connect(fleet, second["pane"], "collaborate").status_code == 409
    assert [raw(fleet, t).status_code for t in tokens] == [401, 401]
