"""Liveness with real processes: Claude's status files, Codex's open rollouts, pane walks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from openbus.daemon.history.liveness import LivenessProbe, proc_start, walk_to_pane
from openbus.daemon.history.model import LiveState, SessionEntry
from openbus.daemon.history.open_watch import OpenWatch
from openbus.kernel.clock import SystemClock
from openbus.kernel.testing import FixedClock
from tests.daemon.history.holding import holding
from tests.daemon.history.homes import ClaudeHome, CodexHome
from tests.support.tmux import tmux_server
from tests.support.wait import wait_until


def _entry(harness: str, sid: str, **kw: object) -> SessionEntry:
    fields: dict[str, object] = {
        "repo": None,
        "repo_root": None,
        "origin": None,
        "cwd": "/w",
        "branches": (),
        "prs": (),
        "title": None,
        "prompts": (),
        "started": None,
        "last_active": None,
        "resume_argv": None,
        "subagent": False,
    }
    fields.update(kw)
    return SessionEntry(harness=harness, session_id=sid, **fields)  # type: ignore[arg-type]


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "120"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_claude_session_with_a_live_status_file_is_running_in_its_pane(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    home = ClaudeHome(tmp_path / "claude")
    home.status(sleeper.pid, "c-1", "/w", proc_start(sleeper.pid))
    clock = FixedClock()
    probe = LivenessProbe(
        [home.root], clock=clock, pane_for_pid=lambda pid: "%7" if pid == sleeper.pid else None
    )
    live = probe.of(_entry("claude", "c-1"))
    assert (live.state, live.pane, live.pid) == (LiveState.RUNNING, "%7", sleeper.pid)
    assert probe.of(_entry("claude", "c-2")).state is LiveState.NOT_RUNNING

    child = probe.of(_entry("claude", "ag", subagent=True, parent_session_id="c-1"))
    assert (child.state, child.pane) == (LiveState.RUNNING_UNKNOWN, "%7")

    sleeper.kill()
    sleeper.wait()
    clock.advance(10)  # past the scan cache
    assert probe.of(_entry("claude", "c-1")).state is LiveState.NOT_RUNNING


def test_a_status_file_whose_pid_was_recycled_is_not_running(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    home = ClaudeHome(tmp_path / "claude")
    home.status(sleeper.pid, "c-1", "/w", "1")  # a start time this process does not have
    probe = LivenessProbe([home.root], clock=FixedClock())
    assert probe.of(_entry("claude", "c-1")).state is LiveState.NOT_RUNNING


def test_an_unreadable_status_dir_gives_running_unknown(tmp_path: Path) -> None:
    root = tmp_path / "claude"
    root.mkdir()
    (root / "sessions").write_text("not a directory")
    probe = LivenessProbe([root], clock=FixedClock())
    assert probe.of(_entry("claude", "c-1")).state is LiveState.RUNNING_UNKNOWN


def test_a_codex_rollout_held_open_by_a_live_process_is_running(tmp_path: Path) -> None:
    rollout = CodexHome(tmp_path / "codex").rollout("x-1", "/w", ["hi"])
    with holding(rollout) as holder:
        clock = FixedClock()
        probe = LivenessProbe(
            [], clock=clock, pane_for_pid=lambda pid: "%3" if pid == holder.pid else None
        )
        entry = _entry("codex", "x-1", transcript=str(rollout))
        live = probe.of(entry)
        assert (live.state, live.pane) == (LiveState.RUNNING, "%3")
        holder.kill()
        holder.wait()
        clock.advance(10)
        assert probe.of(entry).state is LiveState.NOT_RUNNING


def test_an_open_files_scan_past_half_its_ttl_is_read_again_in_the_background(
    tmp_path: Path,
) -> None:
    rollout = CodexHome(tmp_path / "codex").rollout("x-3", "/w", ["hi"])
    clock = FixedClock()
    probe = LivenessProbe([], clock=clock, ttl=2.0)
    entry = _entry("codex", "x-3", transcript=str(rollout))
    assert probe.of(entry).state is LiveState.NOT_RUNNING  # scanned on the spot: none yet
    with holding(rollout):
        clock.advance(0.5)
        assert probe.of(entry).state is LiveState.NOT_RUNNING  # fresh: no new scan
        clock.advance(0.7)
        # past half the ttl: answered from the scan it has, the next one read meanwhile
        assert probe.of(entry).state is LiveState.NOT_RUNNING
        wait_until(
            lambda: probe.of(entry).state is LiveState.RUNNING,
            what="the background scan to see the rollout held open",
        )
        assert probe._codex is not None and probe._codex[0] == clock.monotonic()


def test_codex_liveness_without_a_readable_proc_is_running_unknown(tmp_path: Path) -> None:
    rollout = CodexHome(tmp_path / "codex").rollout("x-1", "/w", ["hi"])
    probe = LivenessProbe([], clock=FixedClock(), proc=tmp_path / "no-proc")
    entry = _entry("codex", "x-1", transcript=str(rollout))
    assert probe.of(entry).state is LiveState.RUNNING_UNKNOWN


def test_a_pid_is_walked_up_its_parents_to_the_pane_process() -> None:
    shell = subprocess.Popen(["bash", "-c", "sleep 120 & wait"])
    child: int | None = None
    try:
        children = Path(f"/proc/{shell.pid}/task/{shell.pid}/children")
        child = int(wait_until(lambda: children.read_text().split(), what="the child")[0])
        assert walk_to_pane(child, {shell.pid: "%12"}) == "%12"
        assert walk_to_pane(child, {}) is None
    finally:
        if child is not None:
            os.kill(child, signal.SIGKILL)
        shell.kill()
        shell.wait()


def test_a_codex_process_in_a_real_tmux_pane_is_found_in_that_pane(tmp_path: Path) -> None:
    rollout = CodexHome(tmp_path / "codex").rollout("x-9", "/w", ["hi"])
    holder = "import signal,sys; f=open(sys.argv[1]); signal.pause()"
    with tmux_server(tmp_path / "tmux") as tmux:
        # a shell with the holder as its child, like a harness started from a pane's shell
        pane = tmux.new_window(["sh", "-c", f'{sys.executable} -c "{holder}" {rollout}; true'])
        pane_pids = {tmux.pane_pid(pane): pane}
        probe = LivenessProbe(
            [], clock=SystemClock(), ttl=0, pane_for_pid=lambda pid: walk_to_pane(pid, pane_pids)
        )
        entry = _entry("codex", "x-9", transcript=str(rollout))
        live = wait_until(
            lambda: (lv := probe.of(entry)).state is LiveState.RUNNING and lv,
            what="the pane's process to open the rollout",
        )
        assert live.pane == pane
        assert live.pid != tmux.pane_pid(pane)  # found through the walk up to the pane
        tmux.kill_pane(pane)
        wait_until(
            lambda: probe.of(entry).state is LiveState.NOT_RUNNING, what="the holder to exit"
        )


def test_a_codex_rollout_named_through_a_symlink_is_running_while_held(tmp_path: Path) -> None:
    rollout = CodexHome(tmp_path / "codex").rollout("x-2", "/w", ["hi"])
    (tmp_path / "link").symlink_to(rollout.parent)
    with holding(rollout):
        probe = LivenessProbe([], clock=FixedClock())
        entry = _entry("codex", "x-2", transcript=str(tmp_path / "link" / rollout.name))
        assert probe.of(entry).state is LiveState.RUNNING


def _fake_proc(root: Path, pid: int) -> Path:
    """A ``/proc`` of one process with no open files yet (``_holds`` gives it one without
    opening anything, so no watch hears of it: only a scan can see it)."""
    (root / str(pid) / "fd").mkdir(parents=True)
    return root


def _holds(proc: Path, pid: int, path: Path) -> None:
    (proc / str(pid) / "fd" / "3").symlink_to(path)


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[CodexHome, OpenWatch]]:
    home = CodexHome(tmp_path / "codex")
    home.rollout("x-0", "/w", ["hi"])  # the day's folder exists before the watch starts
    watch = OpenWatch([home.root / "sessions"])
    yield home, watch
    watch.close()


def test_a_scan_is_kept_past_its_ttl_while_nothing_in_the_watched_folders_opens_or_closes(
    tmp_path: Path, watched: tuple[CodexHome, OpenWatch]
) -> None:
    home, watch = watched
    rollout = home.rollout("x-4", "/w", ["hi"])
    proc = _fake_proc(tmp_path / "proc", 4242)
    clock = FixedClock()
    probe = LivenessProbe([], clock=clock, proc=proc, open_watch=watch)
    entry = _entry("codex", "x-4", transcript=str(rollout))
    assert probe.of(entry).state is LiveState.NOT_RUNNING
    _holds(proc, 4242, rollout)  # seen by a scan only
    clock.advance(60)
    assert probe.of(entry).state is LiveState.NOT_RUNNING  # the first scan still answers
    assert probe.scans == 1
    rollout.read_text()  # an open and a close in its folder: the scan is due
    live = probe.of(entry)
    assert (live.state, live.pid) == (LiveState.RUNNING, 4242)
    assert probe.scans == 2


def test_a_rollout_opened_after_a_fresh_scan_is_seen_running_without_waiting_for_the_ttl(
    watched: tuple[CodexHome, OpenWatch],
) -> None:
    home, watch = watched
    rollout = home.rollout("x-5", "/w", ["hi"])
    probe = LivenessProbe([], clock=FixedClock(), open_watch=watch)  # the clock never moves
    entry = _entry("codex", "x-5", transcript=str(rollout))
    assert probe.of(entry).state is LiveState.NOT_RUNNING
    with holding(rollout) as holder:
        live = wait_until(
            lambda: (found := probe.of(entry)).state is LiveState.RUNNING and found,
            what="the opened rollout to be seen running",
        )
        assert live.pid == holder.pid
        holder.kill()
        holder.wait()
        wait_until(
            lambda: probe.of(entry).state is LiveState.NOT_RUNNING,
            what="the closed rollout to be seen not running",
        )


def test_a_transcript_outside_the_watched_folders_is_answered_by_time(
    tmp_path: Path, watched: tuple[CodexHome, OpenWatch]
) -> None:
    _, watch = watched
    rollout = CodexHome(tmp_path / "other").rollout("x-6", "/w", ["hi"])
    proc = _fake_proc(tmp_path / "proc", 4243)
    clock = FixedClock()
    probe = LivenessProbe([], clock=clock, proc=proc, ttl=2.0, open_watch=watch)
    entry = _entry("codex", "x-6", transcript=str(rollout))
    assert probe.of(entry).state is LiveState.NOT_RUNNING
    _holds(proc, 4243, rollout)
    clock.advance(2.5)  # past the ttl: read again on the spot
    assert probe.of(entry).state is LiveState.RUNNING
    assert probe.scans == 2
