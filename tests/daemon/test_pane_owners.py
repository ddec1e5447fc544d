"""Who runs a hosted box: root and the members of the operators' group, by the system's
databases, with a change of membership holding at once (and within a second when the files
behind them did not change)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from openbus.daemon.config import HostedConfig
from openbus.daemon.core import actors
from openbus.daemon.core.pane_view import EVERY
from openbus.daemon.grants import Grants
from openbus.daemon.pane_owners import OPERATOR_TTL, PaneOwners
from openbus.daemon.state import StateDB
from openbus.kernel.scopes import Preset
from openbus.kernel.testing import FixedClock, SeededRandom
from tests.tunnel.conftest import ThrowawayUsers, needs_root

pytestmark = needs_root


@pytest.fixture
def accounts(request: pytest.FixtureRequest) -> ThrowawayUsers:
    made = ThrowawayUsers()
    request.addfinalizer(made.remove_all)
    return made


def _owners(
    tmp_path: Path, group: str, clock: FixedClock, account_files: tuple[Path, ...] | None = None
) -> PaneOwners:
    grants = Grants(
        StateDB(tmp_path / "state.db"),
        clock,
        SeededRandom(3),
        cap_for=lambda owner: Preset.COLLABORATE,
    )
    hosted = HostedConfig(enabled=True, operators_group=group)
    if account_files is None:
        return PaneOwners(grants, hosted, clock)
    return PaneOwners(grants, hosted, clock, account_files)


def _is_operator(owners: PaneOwners, user: str) -> bool:
    return owners.view(actors.human(user)) is EVERY


def test_a_user_added_to_the_operators_group_is_an_operator_at_once(
    tmp_path: Path, accounts: ThrowawayUsers
) -> None:
    group, person = accounts.add(), accounts.add()  # each with a group of its own name
    owners = _owners(tmp_path, group, FixedClock())
    assert _is_operator(owners, group)  # its own primary group
    assert not _is_operator(owners, person)
    subprocess.run(["usermod", "--append", "--groups", group, person], check=True)
    assert _is_operator(owners, person)
    subprocess.run(["gpasswd", "--delete", person, group], check=True, capture_output=True)
    assert not _is_operator(owners, person)


def test_while_the_account_files_stay_the_same_an_answer_holds_for_at_most_a_second(
    tmp_path: Path, accounts: ThrowawayUsers
) -> None:
    group, person = accounts.add(), accounts.add()
    unchanged = tmp_path / "group"
    unchanged.write_text("")
    clock = FixedClock()
    owners = _owners(tmp_path, group, clock, (unchanged,))
    assert not _is_operator(owners, person)
    subprocess.run(["usermod", "--append", "--groups", group, person], check=True)
    assert not _is_operator(owners, person)  # as another NSS source would be: not yet
    clock.advance(OPERATOR_TTL)
    assert _is_operator(owners, person)
