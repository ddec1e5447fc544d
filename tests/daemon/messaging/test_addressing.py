"""On a hosted box an agent addresses only the panes its owner sees; in local mode, every pane."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from openbus.daemon.cards import Cards
from openbus.daemon.config import HostedConfig
from openbus.daemon.grants import Grants
from openbus.daemon.messaging.addressing import Addressing
from openbus.daemon.pane_owners import PaneOwners
from openbus.daemon.state import StateDB
from openbus.kernel.errors import NotFound
from openbus.kernel.scopes import Preset
from openbus.kernel.testing import FixedClock, SeededRandom
from tests.daemon.messaging.test_service import ScriptedFleet


def _world(tmp_path: Path, *, hosted: bool) -> tuple[Addressing, dict[str, str]]:
    clock, random = FixedClock(), SeededRandom(5)
    db = StateDB(tmp_path / "state.db")
    grants = Grants(db, clock, random, cap_for=lambda owner: Preset.COLLABORATE)
    fleet = ScriptedFleet()
    principals = {}
    for n, owner in enumerate(["alice", "bob"], start=1):
        pane, incarnation = f"%{n}", f"inc_{owner}"
        fleet.add(pane, incarnation, title=f"{owner}-work", pid=100 + n)
        principal, _token, mint = grants.mint(
            harness="claude", owner=owner, preset=Preset.COLLABORATE, launcher=None
        )
        attach = grants.attach_pane(principal, pane, 100 + n, None, incarnation)
        with sqlite3.connect(db.path) as conn:  # type: ignore[arg-type]
            mint(conn)
            attach(conn)
        principals[owner] = principal
    fleet.add("%3", "inc_shared", title="both-work", pid=103)
    owners = PaneOwners(grants, HostedConfig(enabled=hosted, operators_group=None))
    return Addressing(fleet, grants, Cards(db, clock, random), owners), principals


def test_an_agent_cannot_address_another_humans_pane_by_id_or_handle(tmp_path: Path) -> None:
    addressing, principals = _world(tmp_path, hosted=True)
    alice = principals["alice"]
    _target, view = addressing.resolve_target({"target": "%1", "incarnation": "inc_alice"}, alice)
    assert view.pane == "%1"
    with pytest.raises(NotFound):
        addressing.resolve_target({"target": "%2", "incarnation": "inc_bob"}, alice)
    with pytest.raises(NotFound):
        addressing.resolve_target({"target": "bob-work"}, alice)
    assert addressing.resolve_handle("bob-work", alice) == []


def test_control_and_local_mode_address_every_pane(tmp_path: Path) -> None:
    hosted, _ = _world(tmp_path / "hosted", hosted=True)
    assert [v.pane for v in hosted.resolve_handle("bob-work", "control")] == ["%2"]
    local, principals = _world(tmp_path / "local", hosted=False)
    _target, view = local.resolve_target(
        {"target": "%2", "incarnation": "inc_bob"}, principals["alice"]
    )
    assert view.pane == "%2"
