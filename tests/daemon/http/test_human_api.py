"""The human API on the daemon's unix socket, through the real daemon and the CLI."""

from __future__ import annotations

import getpass
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from openbus.daemon.cards import Cards
from openbus.daemon.state import StateDB
from openbus.kernel.clock import SystemClock
from openbus.kernel.testing import SeededRandom
from tests.support.daemon import RunningDaemon, running_daemon

ME = getpass.getuser()


def seed_cards(state_dir: Path, *owners_and_ttls: tuple[str, float]) -> list[str]:
    db = StateDB(state_dir / "openbus.db")
    cards = Cards(db, SystemClock(), SeededRandom(7))
    ids = []
    for owner, ttl in owners_and_ttls:
        card, write = cards.new(
            kind="message",
            requester="agent:claude:s-a",
            owner=owner,
            summary="A asks B",
            ttl=ttl,
            requester_principal="p_a",
            target_principal="p_b",
            target="%2",
        )
        db.conn.execute("BEGIN")
        write(db.conn)
        db.conn.execute("COMMIT")
        ids.append(card.id)
    db.close()
    return ids


@pytest.fixture
def seeded(tmp_path: Path) -> Iterator[tuple[RunningDaemon, list[str]]]:
    # seeded while the daemon runs: a message card an earlier run left pending is cancelled
    # when the daemon starts (its message died with that run)
    with running_daemon(tmp_path) as daemon:
        ids = seed_cards(daemon.state_dir, (ME, 600), (ME, 600), ("someone-else", 600), (ME, -1))
        yield daemon, ids


def audit(daemon: RunningDaemon) -> list[dict[str, object]]:
    db = StateDB(daemon.state_dir / "openbus.db")
    rows = db.conn.execute(
        "SELECT actor, action, outcome, target, details FROM audit ORDER BY seq"
    ).fetchall()
    db.close()
    return [
        {"actor": a, "action": b, "outcome": c, "target": d, "details": json.loads(e)}
        for a, b, c, d, e in rows
    ]


def test_cards_that_need_you_are_listed_and_approved_from_the_cli(
    seeded: tuple[RunningDaemon, list[str]],
) -> None:
    daemon, (mine, _other_mine, _theirs, _expired) = seeded
    listed = json.loads(daemon.cli("cards", "--json", check=True).stdout)
    assert {c["id"] for c in listed["cards"]} == {mine, _other_mine}
    result = daemon.cli("approve", mine, "--pair", check=True)
    assert "approved_pair" in result.stdout
    again = daemon.cli("approve", mine)
    assert (
        again.returncode == 1
        and "already approved_pair" in again.stderr
        and "Traceback" not in again.stderr
    )
    records = [r for r in audit(daemon) if r["actor"] == f"human:{ME}"]  # not the sweeps'
    decided = records[-2]
    assert (decided["actor"], decided["action"], decided["outcome"], decided["target"]) == (
        f"human:{ME}",
        "cards.decide",
        "approved",
        mine,
    )
    assert records[-1]["outcome"] == "refused"


def test_a_decision_on_someone_elses_card_is_403_and_audited(
    seeded: tuple[RunningDaemon, list[str]],
) -> None:
    daemon, (_, _, theirs, _) = seeded
    with daemon.human() as client:
        response = client.post(f"/api/cards/{theirs}", json={"decision": "approve"})
    assert response.status_code == 403
    assert audit(daemon)[-1]["outcome"] == "refused" and audit(daemon)[-1]["target"] == theirs


def test_an_expired_card_resolves_as_expired_and_a_late_decision_is_409(
    seeded: tuple[RunningDaemon, list[str]],
) -> None:
    daemon, (_, _, _, expired) = seeded
    with daemon.human() as client:
        response = client.post(f"/api/cards/{expired}", json={"decision": "approve"})
        assert response.status_code == 409
        everything = client.get("/api/cards", params={"pending": "false"}).json()["cards"]
    assert {c["id"]: c["state"] for c in everything}[expired] == "expired"


@pytest.mark.parametrize(
    ("body", "field"),
    [({"decision": "maybe"}, "decision"), ({}, "decision"), ([1, 2], "body"), ("not json", "body")],
)
def test_a_malformed_decision_is_400_naming_the_field(
    seeded: tuple[RunningDaemon, list[str]], body: object, field: str
) -> None:
    daemon, (mine, *_) = seeded
    with daemon.human() as client:
        if body == "not json":
            response = client.post(
                f"/api/cards/{mine}",
                content=b"{not json",
                headers={"Content-Type": "application/json"},
            )
        else:
            response = client.post(f"/api/cards/{mine}", json=body)
    assert response.status_code == 400
    assert response.json()["field"] == field


def test_an_unknown_card_is_404(daemon: RunningDaemon) -> None:
    with daemon.human() as client:
        response = client.post("/api/cards/c_nope", json={"decision": "decline"})
    assert response.status_code == 404
    result = daemon.cli("decline", "c_nope")
    assert result.returncode == 1 and "no such card" in result.stderr


def test_connecting_a_pane_that_is_not_in_the_fleet_says_so(daemon: RunningDaemon) -> None:
    result = daemon.cli("connect", "%3", "--preset", "observe")
    assert result.returncode == 1
    assert result.stderr == "openbus: no pane %3 in the fleet (pane)\n"


def test_disconnect_all_is_audited(daemon: RunningDaemon) -> None:
    result = daemon.cli("disconnect-all", "--json", check=True)
    assert json.loads(result.stdout)["disconnected"] == 0
    assert audit(daemon)[-1]["action"] == "connect.disconnect_all"


@pytest.mark.parametrize("header", ["X-Tunnel-User", "x_tunnel_user", "X-TUNNEL-USER"])
def test_an_identity_header_from_anyone_but_the_tunnel_is_refused_and_audited(
    daemon: RunningDaemon, header: str
) -> None:
    with daemon.human() as client:
        response = client.get("/api/cards", headers={header: "root"})
    assert response.status_code == 401
    record = audit(daemon)[-1]
    assert record["action"] == "identity.refused" and "uid" in str(record["details"])


def test_the_agents_port_serves_no_human_api_and_refuses_identity_headers(
    daemon: RunningDaemon,
) -> None:
    with daemon.agent_side() as client:
        assert client.get("/api/cards").status_code == 404
        assert client.get("/api/cards", headers={"X-Tunnel-User": ME}).status_code == 401
    assert audit(daemon)[-1]["details"]["peer"] == "tcp"  # type: ignore[index]
