"""The real Gemini CLI, each pinned version, launched through ``openbus launch`` with preset
observe against the stub model: its per-launch settings file offers it the openbus tools, its
``list_panes`` call is audited as that agent (bound to the session id given at launch), and the
settings file is private to the daemon's user and gone once the agent has ended; its TUI,
which outlives the hangup of a closed pane, is ended by the daemon and loses its grant."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon.launch_proc import identity_of, session_members
from tests.daemon.mcp.test_real_clients import agent_calls, audit
from tests.support.daemon import RunningDaemon, running_daemon
from tests.support.harnesses import pin_params
from tests.support.more_harnesses import make_harness
from tests.support.require import skip_missing
from tests.support.stub_model import StubModel, call_tool, reply
from tests.support.tmux import TmuxServer
from tests.support.wait import wait_until

pytestmark = [pytest.mark.harness, pytest.mark.root, pytest.mark.timeout(150)]

WORD = "openbus-gemini-check"


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """A state directory Gemini CLI accepts a settings file in: root's all the way down (a
    test's tmp dir is under the world-writable /tmp, which Gemini CLI 0.61 refuses)."""
    if os.getuid() != 0:
        skip_missing("root", "Gemini CLI reads a system settings file only under root's dirs")
    path = Path(tempfile.mkdtemp(prefix="openbus-gemini-test-", dir="/run"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def gemini_daemon(
    tmp_path: Path, tmux: TmuxServer, state_dir: Path, launcher: dict[str, Any]
) -> Iterator[RunningDaemon]:
    """A daemon on the test's tmux server whose launcher ``gemini`` is ``launcher``."""
    extra = {
        "tmux": {"socket": str(tmux.socket)},
        "daemon": {"state_dir": str(state_dir)},
        "launchers.gemini": launcher,
    }
    (tmp_path / "d").mkdir()
    with running_daemon(tmp_path / "d", extra) as daemon:
        yield daemon


def launch(daemon: RunningDaemon, project: Path) -> dict[str, Any]:
    args = ["launch", "gemini", "--preset", "observe", "--cwd", str(project), "--json"]
    launched: dict[str, Any] = json.loads(daemon.cli(*args, check=True).stdout)
    return launched


@pytest.mark.parametrize("version", pin_params("gemini"))
def test_gemini_launched_with_observe_is_offered_the_tools_and_its_call_is_audited_as_it(
    tmp_path: Path, stub: StubModel, tmux: TmuxServer, state_dir: Path, version: Any
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    gemini = make_harness("gemini", tmp_path / "g", stub, project, version=version.version)
    script = stub.script(
        call_tool("mcp_openbus_list_panes", {}), reply("PANES-LISTED"), match=WORD, api="gemini"
    )
    launcher = {
        "harness": "gemini",
        "argv": gemini.print_argv(f"please run {WORD}"),
        "env": gemini.env(),
    }
    with gemini_daemon(tmp_path, tmux, state_dir, launcher) as daemon:
        launched = launch(daemon, project)
        connect = launched["connect"]
        assert connect["connected"] and connect["session_id"]
        actor = connect["actor"]
        assert actor == f"agent:gemini:{connect['session_id']}"
        settings = state_dir / "launch" / f"agent-{connect['principal']}.json"
        mode = stat.S_IMODE(settings.stat().st_mode)
        assert mode == 0o600 and settings.stat().st_uid == os.getuid()
        assert "Bearer $OPENBUS_TOKEN" in settings.read_text()
        script.wait_finished(timeout=90)
        offered = {t for req in stub.turns("gemini") for t in req.offered_tools}
        assert {"mcp_openbus_list_panes", "mcp_openbus_find_sessions"} <= offered, offered
        got = wait_until(lambda: agent_calls(daemon, actor), timeout=30, what="the audited call")
        assert got == [(actor, "directory.list", "ok")]
        wait_until(
            lambda: any(r["action"] in ("agent.suspended", "agent.revoked") for r in audit(daemon)),
            timeout=30,
            what="the agent's end",
        )
        wait_until(lambda: not settings.exists(), timeout=10, what="the settings file removed")


PAST_START_SECONDS = 5.0


def age(pid: int) -> float:
    """How long ``pid`` has run, in seconds."""
    start = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - start / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("version", pin_params("gemini"))
def test_a_gemini_tui_whose_pane_is_closed_loses_its_grant_and_is_ended(
    tmp_path: Path, stub: StubModel, tmux: TmuxServer, state_dir: Path, version: Any
) -> None:
    """Gemini CLI's TUI runs on after tmux closes its pane once it is past its first seconds
    (measured here, both versions: closed as its composer shows, ~1.5 s after start, it exits;
    a second later and after, it runs on every time, idle): orphaned, it kept its grant and
    its memory. The daemon ends it."""
    project = tmp_path / "project"
    project.mkdir()
    gemini = make_harness("gemini", tmp_path / "g", stub, project, version=version.version)
    launcher = {"harness": "gemini", "argv": gemini.tui_argv(), "env": gemini.env()}
    with gemini_daemon(tmp_path, tmux, state_dir, launcher) as daemon:
        launched = launch(daemon, project)
        principal = launched["connect"]["principal"]
        members = session_members(launched["pid"])
        assert members, "Gemini CLI's processes"
        # what is waited for is Gemini CLI's own change of behaviour with its age
        wait_until(lambda: age(launched["pid"]) >= PAST_START_SECONDS, what="Gemini CLI's start")
        tmux.run("kill-pane", "-t", launched["pane"])
        wait_until(
            lambda: all(identity_of(m.pid) != m for m in members),
            timeout=30,
            what="Gemini CLI's processes to be ended",
        )
        ended = [
            (r["details"]["principal"], r["details"]["reason"])
            for r in audit(daemon)
            if r["action"] in ("agent.suspended", "agent.revoked")
        ]
        assert ended == [(principal, "its pane was closed; what ran in it is ended")]
