"""The pool's adapter: which uids run (``/proc``), who is in the pool, and the refusals at start
when the pool could not isolate."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from openbus.daemon.agent_users import AgentUsers, proc_hides_processes, running_uids
from openbus.daemon.config import Config, parse_config
from openbus.kernel.errors import ConfigError
from openbus.kernel.testing import FixedClock

PROC_LINE = "22 26 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc {}\n"


def test_running_uids_see_this_process_and_a_child_under_its_pid() -> None:
    with subprocess.Popen(["sleep", "30"]) as child:
        try:
            uids, pids = running_uids()
        finally:
            child.kill()
    assert os.getuid() in uids
    assert {os.getpid(), child.pid} <= pids


@pytest.mark.parametrize(
    ("options", "hides"),
    [
        ("rw", False),
        ("rw,hidepid=0", False),
        ("rw,hidepid=invisible", True),
        ("rw,hidepid=2", True),
    ],
)
def test_a_proc_mounted_with_hidepid_counts_as_hiding(
    tmp_path: Path, options: str, hides: bool
) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(PROC_LINE.format(options))
    assert proc_hides_processes(mountinfo) is hides


def test_an_unreadable_mount_table_counts_as_hiding(tmp_path: Path) -> None:
    assert proc_hides_processes(tmp_path / "missing") is True


def hosted(tmp_path: Path, **values: object) -> Config:
    return parse_config(
        {"daemon": {"state_dir": str(tmp_path)}, "hosted": {"enabled": True, **values}},
        str(tmp_path / "openbus.toml"),
    )


def test_pool_mode_with_a_group_of_no_users_stops_the_start_naming_the_key(tmp_path: Path) -> None:
    config = hosted(tmp_path, agent_pool_group="openbus-no-such-group")
    with pytest.raises(ConfigError) as err:
        AgentUsers.from_config(config, FixedClock())
    assert err.value.key == "hosted.agent_pool_group"
    assert "openbus-no-such-group" in err.value.message


def test_a_pool_holding_root_or_the_daemons_own_user_is_refused(tmp_path: Path) -> None:
    config = hosted(tmp_path, agent_pool_group="root")
    with pytest.raises(ConfigError) as err:
        AgentUsers.from_config(config, FixedClock())
    assert "root" in err.value.message
    assert err.value.key == "hosted.agent_pool_group"


def test_shared_mode_and_a_desk_box_have_no_pool(tmp_path: Path) -> None:
    shared = hosted(tmp_path, agent_isolation="shared")
    assert AgentUsers.from_config(shared, FixedClock()) is None
    desk = parse_config({"daemon": {"state_dir": str(tmp_path)}}, str(tmp_path / "o.toml"))
    assert AgentUsers.from_config(desk, FixedClock()) is None
