"""The directory's rules, with a fake probe and a fixed clock (no tmux here; see
tests/daemon/tmux for the real server)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from openbus.daemon import directory_probe
from openbus.daemon.directory import BRANCH_RECHECK, Directory
from openbus.daemon.directory_probe import (
    Detected,
    ProcessProbe,
    ProcIdentity,
    _children_of,
)
from openbus.daemon.launch_proc import process_tree
from openbus.daemon.screens import ClaudeStatus
from openbus.daemon.tmux.adapter import PaneInfo
from openbus.kernel.errors import BadRequest, NotFound
from openbus.kernel.testing import FixedClock
from tests.support.wait import let_others_run, until_execed, wait_until

CASES = Path(__file__).parent / "screens" / "cases"


def screen(name: str) -> str:
    return (CASES / f"{name}.txt").read_text(encoding="utf-8")


@dataclass
class FakeProbe:
    harness: dict[int, str] = field(default_factory=dict)
    start: dict[int, int] = field(default_factory=dict)
    parent: dict[int, int] = field(default_factory=dict)  # else 1: tmux's server
    branches: dict[str, str] = field(default_factory=dict)
    status: ClaudeStatus | None = None
    owing: set[int] = field(default_factory=set)

    def detect(self, pane_pid: int, *, walk_now: bool = False) -> Detected:
        ident = ProcIdentity(pane_pid, self.start.get(pane_pid, 100))
        harness, parent = self.harness.get(pane_pid, "shell"), self.parent.get(pane_pid, 1)
        return Detected(harness, ident, ident, parent)

    def owed(self) -> set[int]:
        owing, self.owing = self.owing, set()
        return owing

    def git_branch(self, cwd: str) -> str | None:
        return self.branches.get(cwd)

    def claude_status(self, process: ProcIdentity) -> ClaudeStatus | None:
        return self.status


def info(pane: str = "%1", pid: int = 10, **kw: object) -> PaneInfo:
    base = PaneInfo(
        pane,
        pid,
        "claude",
        "/work/app",
        "✳ Claude Code",
        False,
        None,
        False,
        120,
        40,
        "@1",
        0,
        "w",
        "$0",
        "main",
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def make(probe: FakeProbe | None = None) -> tuple[Directory, FixedClock, FakeProbe]:
    clock = FixedClock()
    probe = probe or FakeProbe(harness={10: "claude", 20: "codex"}, branches={"/work/app": "main"})
    return Directory(clock, b"s" * 32, probe, socket="/tmp/sock", hostname="vm"), clock, probe


def test_a_captured_claude_pane_reads_idle_with_its_branch_and_title() -> None:
    d, _, _ = make()
    d.server_status(True)
    d.pane_captured(info(), screen("claude-idle"))
    entry = d.pane("%1")
    assert entry["harness"] == "claude" and entry["state"] == "idle"
    assert entry["composer_empty"] is True and entry["title"] == "Claude Code"
    assert entry["branch"] == "main" and entry["cwd"] == "/work/app"
    assert entry["incarnation"].startswith("inc_") and entry["revision"] == 1
    assert d.snapshot()["tmux"]["status"] == "running"


def test_a_branch_checked_out_elsewhere_shows_on_a_pane_whose_screen_stands_still() -> None:
    """Another pane in the same worktree checks out a branch: this one prints nothing, and tmux
    lists it as before, yet its branch is read again within a minute and a quarter, once for
    all the panes in that folder."""
    d, clock, probe = make()
    reads: list[str] = []
    git_branch = probe.git_branch
    probe.git_branch = lambda cwd: reads.append(cwd) or git_branch(cwd)  # type: ignore[method-assign]
    d.pane_captured(info(), screen("claude-idle"))
    d.pane_captured(info("%2", 20), screen("claude-idle"))
    version = d.version
    probe.branches["/work/app"] = "feature/x"
    reads.clear()
    clock.advance(BRANCH_RECHECK - 1)
    d.recheck_branches()
    assert (reads, d.version) == ([], version)  # read less than a minute ago
    clock.advance(BRANCH_RECHECK / 4)
    d.recheck_branches()
    assert reads == ["/work/app"]
    assert d.pane("%1")["branch"] == d.pane("%2")["branch"] == "feature/x"
    assert d.version == version + 2
    clock.advance(1)
    d.recheck_branches()  # the next pass waits its quarter minute
    assert reads == ["/work/app"]


def test_the_revision_moves_only_when_the_screen_text_changes() -> None:
    d, clock, _ = make()
    d.pane_captured(info(), screen("claude-idle"))
    clock.advance(5)
    d.pane_captured(info(), screen("claude-idle") + "\n\n")
    assert d.pane("%1")["revision"] == 1
    d.pane_captured(info(), screen("claude-running"))
    entry = d.pane("%1")
    assert entry["revision"] == 2 and entry["state"] == "busy"
    assert entry["last_activity"] == clock.now()
    kinds = [(e["kind"], e.get("to")) for e in entry["events"]]
    assert ("state", "idle") in kinds and ("state", "busy") in kinds


def test_a_recycled_pane_gets_a_new_incarnation() -> None:
    d, _, probe = make()
    d.pane_captured(info(pid=10), screen("claude-idle"))
    first = d.pane("%1")["incarnation"]
    probe.start[10] = 999  # same pid, another process tmux started (a respawn, pid reused)
    d.pane_captured(info(pid=10), screen("claude-idle"))
    second = d.pane("%1")["incarnation"]
    d.pane_captured(info(pid=20), screen("codex-idle"))
    third = d.pane("%1")
    assert len({first, second, third["incarnation"]}) == 3
    assert third["harness"] == "codex" and third["revision"] == 1


def test_incarnations_depend_on_the_daemon_secret() -> None:
    a, _, _ = make()
    b = Directory(FixedClock(), b"t" * 32, FakeProbe(harness={10: "claude"}))
    a.pane_captured(info(), screen("claude-idle"))
    b.pane_captured(info(), screen("claude-idle"))
    assert a.pane("%1")["incarnation"] != b.pane("%1")["incarnation"]


def test_a_pane_missing_from_the_listing_is_removed() -> None:
    d, _, _ = make()
    d.panes_listed([info("%1"), info("%2", pid=20)])
    assert [p["pane"] for p in d.snapshot()["panes"]] == ["%1", "%2"]
    d.panes_listed([info("%2", pid=20)])
    assert [p["pane"] for p in d.snapshot()["panes"]] == ["%2"]
    with pytest.raises(NotFound, match="%1"):
        d.pane("%1")


def test_entries_keep_listing_order_through_adds_moves_and_removals() -> None:
    d, _, _ = make()
    one, two, three = (info(f"%{n}", pid=10 * n, window_index=1) for n in (1, 2, 3))
    d.panes_listed([three, one])
    assert [e.pane_id for e in d.entries()] == ["%1", "%3"]
    d.entries().clear()  # a caller's list is its own
    d.panes_listed([three, one, two])
    assert [e.pane_id for e in d.entries()] == ["%1", "%2", "%3"]
    d.panes_listed([replace(three, window_index=0), two])  # %3 moved to the first window
    assert [e.pane_id for e in d.entries()] == ["%3", "%2"]


def test_an_unknown_pane_is_not_found_and_a_bad_id_is_a_bad_request() -> None:
    d, _, _ = make()
    with pytest.raises(NotFound, match="no pane %7"):
        d.pane("%7")
    with pytest.raises(BadRequest):
        d.pane("seven")


def test_a_server_going_away_empties_the_directory_and_says_so() -> None:
    d, _, _ = make()
    d.server_status(True)
    d.pane_captured(info(), screen("claude-idle"))
    d.server_status(False, "no tmux server on /tmp/sock")
    snap = d.snapshot()
    assert snap["panes"] == [] and snap["tmux"]["running"] is False
    assert snap["tmux"]["detail"] == "no tmux server on /tmp/sock"


def test_the_status_file_refines_a_recognized_screen() -> None:
    d, _, probe = make()
    probe.status = ClaudeStatus("busy")
    d.pane_captured(info(), screen("claude-idle"))
    assert d.pane("%1")["state"] == "busy"


def test_a_status_file_that_changes_while_the_screen_does_not_is_read_again() -> None:
    d, _, probe = make()
    probe.status = ClaudeStatus("waiting")
    d.pane_captured(info(), screen("claude-idle"))
    assert d.pane("%1")["state"] == "unknown"  # the status and the screen disagree
    probe.status = ClaudeStatus("idle")  # nothing new on screen
    d.reread_evidence()
    assert (d.pane("%1")["state"], d.pane("%1")["composer_empty"]) == ("idle", True)


def test_one_panes_status_file_can_be_read_again_at_once_leaving_the_others() -> None:
    """A new agent's first-idle wait reads its status file on each look, not once a second."""
    d, _, probe = make()
    probe.harness[30] = "claude"
    probe.status = None  # Claude Code draws its idle composer before it writes the file
    d.pane_captured(info(), screen("claude-idle"))
    d.pane_captured(info("%2", 30), screen("claude-idle"))
    probe.status = ClaudeStatus("idle")
    d.reread_evidence("%1")
    assert d.entry("%1").status == ClaudeStatus("idle")
    assert d.entry("%2").status is None  # left for the once-a-second re-read
    d.reread_evidence("%9")  # a pane it does not know: nothing to read
    d.reread_evidence()
    assert d.entry("%2").status == ClaudeStatus("idle")


def test_a_stale_busy_status_does_not_outlive_a_still_idle_screen() -> None:
    """After quick turns the status file may still say busy while the screen has long shown
    the idle composer: a message to that pane would otherwise wait for ever."""
    d, clock, probe = make()
    probe.status = ClaudeStatus("busy")
    d.pane_captured(info(), screen("claude-idle"))
    assert d.pane("%1")["state"] == "busy"  # the turn may have just begun
    clock.advance(1.0)
    assert d.reread_evidence() is True  # disputed: the caller asks again soon
    assert d.pane("%1")["state"] == "busy"
    clock.advance(5.0)  # the screen has not moved: no spinner, no work
    assert d.reread_evidence() is False
    entry = d.pane("%1")
    assert (entry["state"], entry["composer_empty"]) == ("idle", True)
    assert [e["to"] for e in entry["events"] if e["kind"] == "state"][-1] == "idle"


def test_a_busy_status_set_before_the_idle_screen_was_drawn_does_not_keep_the_pane_busy() -> None:
    """Claude Code draws the idle composer a moment before it writes its idle status: a busy
    status older than the screen's last change is the ended turn's; one newer still makes an
    idle-looking screen busy (the turn began and the screen has not caught up)."""
    d, clock, probe = make()
    probe.status = ClaudeStatus("busy", since=clock.now() - 30)  # set when the turn began
    d.pane_captured(info(), screen("claude-idle"))
    assert d.pane("%1")["state"] == "idle"
    probe.status = ClaudeStatus("busy", since=clock.now() + 0.2)  # a new turn, set after it
    clock.advance(1.0)
    d.reread_evidence()
    assert d.pane("%1")["state"] == "busy"


def test_a_panes_detail_explains_its_state_with_the_status_file_it_weighed() -> None:
    d, clock, probe = make()
    probe.status = ClaudeStatus("busy")
    d.pane_captured(info(), screen("claude-idle"))
    why = d.pane("%1")["explain"]
    assert (why["parser"], why["rule"]) == ("claude", "busy-status-file")
    assert why["evidence"]["status_file"] == {"status": "busy", "waiting_for": None}
    assert "status file saying idle" in why["would_change"]
    clock.advance(5.0)
    d.reread_evidence()
    why = d.pane("%1")["explain"]
    assert why["rule"] == "idle-composer" and why["evidence"]["screen"]["still"] == 5.0
    assert any(line.startswith("❯") for line in why["evidence"]["screen"]["lines"])


def test_a_dead_flag_from_tmux_makes_the_pane_exited() -> None:
    d, _, _ = make()
    d.pane_captured(info(), screen("claude-idle"))
    d.panes_listed([info(dead=True, dead_status=0)])
    assert d.pane("%1")["state"] == "exited"


def test_a_pane_whose_process_ended_keeps_its_incarnation_and_harness() -> None:
    d, _, probe = make()
    d.pane_captured(info(pid=10), screen("claude-idle"))
    first = d.pane("%1")["incarnation"]
    probe.harness[10], probe.start[10] = "unknown", 0  # /proc no longer knows pid 10
    d.pane_captured(info(pid=10), screen("claude-idle"))  # metadata from before tmux saw it die
    d.panes_listed([info(pid=10, dead=True, dead_status=0)])
    entry = d.pane("%1")
    assert (entry["incarnation"], entry["harness"], entry["state"]) == (first, "claude", "exited")
    d.pane_captured(info(pid=20), screen("codex-idle"))  # respawned: the same pane id
    assert d.pane("%1")["incarnation"] != first and d.pane("%1")["harness"] == "codex"


def test_a_pane_whose_process_is_gone_is_exited_before_tmux_flags_it_dead() -> None:
    """The last screen an agent left (its idle composer, where messages are delivered) is not
    read as idle once /proc no longer knows the pane's process, whatever tmux still says."""
    d, _, probe = make()
    d.pane_captured(info(pid=10), screen("claude-idle"))
    first = d.pane("%1")["incarnation"]
    probe.harness[10], probe.start[10] = "unknown", 0
    d.pane_captured(info(pid=10, title="✳ gone"), screen("claude-idle"))  # not dead in tmux yet
    entry = d.pane("%1")
    assert (entry["incarnation"], entry["state"], entry["composer_empty"]) == (
        first,
        "exited",
        None,
    )


def test_a_dead_panes_pid_held_by_a_process_tmux_did_not_start_is_not_read_as_its_own() -> None:
    """Pids wrap: while tmux's report of the dead pane lags, its pid can be a stranger's."""
    d, _, probe = make()
    d.pane_captured(info(pid=10), screen("claude-idle"))
    first = d.pane("%1")["incarnation"]
    probe.harness[10], probe.start[10], probe.parent[10] = "shell", 999, 4242
    d.pane_captured(info(pid=10), screen("claude-idle"))  # not dead in tmux yet
    entry = d.pane("%1")
    assert (entry["incarnation"], entry["harness"], entry["state"]) == (first, "claude", "exited")
    d.panes_listed([info(pid=10, dead=True, dead_status=0)])
    assert d.pane("%1")["incarnation"] == first


def test_a_pane_recognized_only_after_its_exec_changes_harness_not_incarnation() -> None:
    d, _, probe = make(FakeProbe(harness={10: "unknown"}))
    d.panes_listed([info(pid=10)])  # listed between tmux's fork and the exec
    first = d.pane("%1")
    assert (first["harness"], first["state"]) == ("unknown", "unknown")
    probe.harness[10] = "shell"  # the same process, now the shell
    d.panes_listed([info(pid=10)])
    entry = d.pane("%1")
    assert (entry["harness"], entry["state"]) == ("shell", "shell")
    assert entry["incarnation"] == first["incarnation"]
    assert entry["events"][-2]["kind"] == "harness" and entry["events"][-2]["to"] == "shell"


def test_a_pane_the_probe_owes_a_look_is_probed_again_without_a_capture() -> None:
    d, _, probe = make(FakeProbe(harness={10: "unknown", 20: "unknown"}))
    d.panes_listed([info(pid=10), info("%2", pid=20)])
    probe.harness.update({10: "claude", 20: "codex"})  # started by their launchers since
    probe.owing = {10}
    d.reprobe_owed()
    assert d.pane("%1")["harness"] == "claude"
    assert d.pane("%2")["harness"] == "unknown"  # not owed: asked at its next capture


def test_handles_resolve_by_pr_title_pane_and_incarnation() -> None:
    d, _, _ = make()
    d.pane_captured(
        info("%1", title="✳ Fix login bug"), screen("own-claude-busy-with-pr-and-title")
    )
    d.pane_captured(info("%2", pid=20, title="vm"), screen("codex-idle"))
    inc = d.pane("%1")["incarnation"]
    assert d.pane("%1")["handles"] == {
        "pr": ["https://github.com/acme/web/pull/1234"],
        "title": "Fix login bug",
    }
    for handle in (
        "https://github.com/acme/web/pull/1234",
        "acme/web#1234",
        "#1234",
        "fix LOGIN bug",
        "%1",
        inc,
    ):
        assert [e.pane_id for e in d.resolve_handle(handle)] == ["%1"], handle
    assert d.resolve_handle("other/repo#1234") == []
    assert d.resolve_handle("nothing") == []
    with pytest.raises(BadRequest):
        d.resolve_handle("  ")


def test_pr_links_accumulate_over_the_incarnation() -> None:
    d, _, _ = make()
    d.pane_captured(info(), screen("own-claude-busy-with-pr-and-title"))
    d.pane_captured(info(), screen("claude-idle"))
    assert d.pane("%1")["pr_links"] == ["https://github.com/acme/web/pull/1234"]


def test_subscribers_see_each_change_and_the_snapshot_is_cached() -> None:
    async def scenario() -> list[tuple[str, str | None]]:
        d, _, _ = make()
        seen: list[tuple[str, str | None]] = []

        async def reader() -> None:
            async for change in d.changes():
                seen.append((change.kind, change.pane_id))
                if change.kind == "removed":
                    return

        task = asyncio.create_task(reader())
        await let_others_run()
        d.pane_captured(info(), screen("claude-idle"))
        first = d.snapshot()
        assert d.snapshot() is first and d.snapshot_json() is d.snapshot_json()
        d.pane_captured(info(), screen("claude-running"))
        assert d.snapshot() is not first
        d.pane_gone("%1")
        await asyncio.wait_for(task, 5)
        return seen

    assert asyncio.run(scenario()) == [("added", "%1"), ("updated", "%1"), ("removed", "%1")]


def test_the_send_lock_is_one_lock_per_pane() -> None:
    d, _, _ = make()
    assert d.send_lock("%1") is d.send_lock("%1")
    assert d.send_lock("%1") is not d.send_lock("%2")


def test_the_git_branch_is_read_from_head_and_worktree_files(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/feature/x\n")
    (repo / "sub").mkdir()
    worktree = tmp_path / "wt"
    worktree.mkdir()
    gitdir = repo / ".git" / "worktrees" / "wt"
    gitdir.mkdir(parents=True)
    (gitdir / "HEAD").write_text("0123456789abcdef0123456789abcdef01234567\n")
    (worktree / ".git").write_text(f"gitdir: {gitdir}\n")
    probe = ProcessProbe()
    assert probe.git_branch(str(repo / "sub")) == "feature/x"
    assert probe.git_branch(str(worktree)) == "0123456789ab"
    assert probe.git_branch(str(tmp_path)) is None


def test_a_pane_whose_files_cannot_be_read_does_not_hide_the_rest_of_the_fleet() -> None:
    class Denied(FakeProbe):
        def git_branch(self, cwd: str) -> str | None:
            if cwd == "/private":
                raise PermissionError(13, "Permission denied", cwd)
            return super().git_branch(cwd)

    d, _, _ = make(Denied(harness={10: "claude", 20: "codex"}))
    d.panes_listed([info("%1", cwd="/private"), info("%2", pid=20)])
    assert [p["pane"] for p in d.snapshot()["panes"]] == ["%2"]


def test_a_shell_started_under_an_unrecognised_wrapper_is_seen_below_it() -> None:
    """As sudo starts a hosted agent under its pool user: the pane's own process is the
    wrapper, which keeps the foreground group, and the harness runs below it."""
    wrapper = subprocess.Popen(
        [sys.executable, "-c", "import subprocess; subprocess.run(['/bin/sh', '-c', 'sleep 30'])"]
    )
    try:
        probe = ProcessProbe()
        found = wait_until(
            lambda: (d := probe.detect(wrapper.pid)).harness == "shell" and d,
            timeout=10,
            what="the shell below the wrapper",
        )
        assert found.pane.pid == wrapper.pid
        assert found.process.pid != wrapper.pid
    finally:
        for child in process_tree(wrapper.pid)[::-1]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        wrapper.wait()


def test_a_process_children_read_from_its_own_files_match_a_scan_of_every_process() -> None:
    """Detection below a wrapper reads ``/proc/<pid>/task/*/children`` rather than every
    process's stat file; both name the same children, a thread's children included."""
    script = (
        "import subprocess, threading\n"
        "a = subprocess.Popen(['sleep', '30'])\n"
        "t = threading.Thread(target=lambda: subprocess.Popen(['sleep', '30']))\n"
        "t.start(); t.join(); print('ready', flush=True); threading.Event().wait()\n"
    )
    wrapper = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert wrapper.stdout is not None and wrapper.stdout.readline() == b"ready\n"
        direct = _children_of(wrapper.pid)
        assert direct is not None and len(direct) == 2
        assert sorted(direct) == sorted(directory_probe._children_map()[wrapper.pid])
        assert _children_of(2**22 + 1) in (None, [])  # no such process: no children
    finally:
        for child in process_tree(wrapper.pid)[::-1]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        wrapper.communicate()


def _give_pid_to_a_stranger(pid: int, helper: subprocess.Popen[str]) -> int:
    """Have ``helper`` (not the pane's parent) start a shell as the next process, with the
    kernel's pid counter set just below ``pid`` (root: ``ns_last_pid``); the shell's pid, which
    is ``pid`` unless another process on the host took it first."""
    assert helper.stdin is not None and helper.stdout is not None
    with open("/proc/sys/kernel/ns_last_pid", "w", encoding="ascii") as counter:
        fcntl.flock(counter, fcntl.LOCK_EX)  # (others that set it take the lock too)
        counter.write(str(pid - 1))
        counter.flush()
        helper.stdin.write("start\n")
        helper.stdin.flush()
        return int(helper.stdout.readline())


def test_a_real_pid_recycled_by_a_stranger_leaves_the_pane_exited_not_a_new_shell() -> None:
    """The pid of a pane's ended process, given by the kernel to a shell some other process
    started, before tmux has said the pane is dead: the pane keeps its incarnation, exited."""
    starts = (
        "import subprocess, sys\n"
        "for _ in sys.stdin:\n"
        "    print(subprocess.Popen(['sh'], stdin=subprocess.PIPE).pid, flush=True)\n"
    )
    helper = subprocess.Popen(
        [sys.executable, "-c", starts], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    d = Directory(FixedClock(), b"s" * 32, ProcessProbe(), socket="/tmp/sock", hostname="vm")
    pane: subprocess.Popen[bytes] | None = None
    try:
        for _attempt in range(20):  # another process on the host may take the pid first
            pane = subprocess.Popen(["sh"], stdin=subprocess.PIPE)  # this test stands for tmux
            until_execed(pane.pid)  # as a pane tmux reports runs already
            d.pane_captured(info(pid=pane.pid), "$ ")
            first = d.pane("%1")
            assert (first["harness"], first["state"]) == ("shell", "shell")
            pane.kill()
            pane.communicate()
            if _give_pid_to_a_stranger(pane.pid, helper) == pane.pid:
                break
        else:
            raise AssertionError("no attempt gave the ended pane's pid to the stranger")
        d.pane_captured(info(pid=pane.pid), "$ ")  # tmux's report from before the death
        entry = d.pane("%1")
        assert (entry["incarnation"], entry["harness"], entry["state"]) == (
            first["incarnation"],
            "shell",
            "exited",
        )
    finally:
        if pane is not None and pane.poll() is None:  # a failed attempt leaves its pane running
            pane.kill()
            pane.communicate()
        for child in process_tree(helper.pid)[::-1]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        helper.communicate()
