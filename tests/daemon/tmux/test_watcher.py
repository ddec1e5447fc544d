"""The watcher against a real tmux server per test: panes appear, change, vanish; the server
goes away and comes back."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon.directory import Directory
from openbus.daemon.directory_probe import ProcessProbe
from openbus.daemon.directory_service import EVIDENCE_EVERY
from openbus.daemon.tmux import Tmux
from openbus.daemon.tmux.adapter import PaneInfo
from openbus.daemon.tmux.watcher import PROCESS_FIELDS, Watcher
from openbus.kernel.clock import SystemClock
from tests.support.tmux import TmuxServer
from tests.support.wait import async_wait_until, let_others_run

CASES = Path(__file__).parent.parent / "screens" / "cases"


def follow(
    server: TmuxServer, scenario: Callable[[Directory, Watcher], Awaitable[None]], **kw: Any
) -> None:
    async def main() -> None:
        directory = Directory(SystemClock(), b"k" * 32, ProcessProbe(), socket=str(server.socket))
        watcher = Watcher(Tmux(server.socket), directory, backoff=(0.05, 0.3), **kw)

        async def reprobe() -> None:  # as the directory feature does, about once a second
            while True:
                await asyncio.sleep(EVIDENCE_EVERY)
                directory.reprobe_owed()

        await watcher.start()
        owed = asyncio.get_running_loop().create_task(reprobe())
        try:
            await scenario(directory, watcher)
        finally:
            owed.cancel()
            await watcher.stop()

    asyncio.run(main())


async def until(predicate: Callable[[], object], what: str, timeout: float = 10) -> None:
    async def check() -> object:
        return predicate()

    await async_wait_until(check, timeout=timeout, what=what)


def panes(directory: Directory) -> dict[str, dict[str, Any]]:
    return {p["pane"]: p for p in directory.snapshot()["panes"]}


def test_the_directory_shows_every_pane_of_every_session(server: TmuxServer) -> None:
    second = server.session("other")
    third = server.new_window(["sh"])

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: len(panes(d)) == 3, "three panes")
        listed = panes(d)
        assert listed[second]["session"] == "other"
        assert all(p["harness"] == "shell" and p["state"] == "shell" for p in listed.values())
        assert d.snapshot()["tmux"]["running"] is True
        assert third in listed

    follow(server, scenario)


def test_a_change_on_screen_shows_up_in_any_session(server: TmuxServer) -> None:
    pane = server.session("other")

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: pane in panes(d), "the pane")
        before = panes(d)[pane]["revision"]
        server.keys(pane, "echo marker-$((6*7))", "Enter")
        await until(lambda: "marker-42" in (d.entry(pane).text or ""), "the echo on screen")
        assert panes(d)[pane]["revision"] > before

    follow(server, scenario)


def test_a_killed_pane_disappears(server: TmuxServer) -> None:
    extra = server.new_window(["sh"])

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: extra in panes(d), "the extra pane")
        server.run("kill-pane", "-t", extra)
        await until(lambda: extra not in panes(d), "the killed pane to go")

    follow(server, scenario)


def test_a_pane_vanishing_right_after_output_leaves_no_entry(server: TmuxServer) -> None:
    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: len(panes(d)) == 1, "the first pane")
        for _ in range(5):
            flash = server.new_window(["sh", "-c", "echo flash; exit 0"])
            del flash
        await until(lambda: len(panes(d)) == 1, "only the first pane")
        assert d.snapshot()["tmux"]["running"] is True

    follow(server, scenario)


def test_a_respawned_pane_gets_a_new_incarnation(server: TmuxServer) -> None:
    pane = server.new_window(["sh"])

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: pane in panes(d), "the pane")
        first = panes(d)[pane]["incarnation"]
        server.run("respawn-pane", "-k", "-t", pane, "sh")
        await until(
            lambda: panes(d).get(pane, {}).get("incarnation") not in (None, first),
            "a new incarnation",
        )

    follow(server, scenario, resync=0.5)


# A safety check an hour away: what these see comes from tmux's own announcements.
NO_SAFETY_CHECK = 3600.0


def _no_pidfd(pid: int) -> int:
    raise OSError(errno.EMFILE, "Too many open files")


# How a pane's process that exits is told: by its pidfd alone (no probe round in the test's
# time, so nothing is listed), or, with no pidfd to be had, by the rounds' listing of every
# pane's process and dead flag
TOLD_BY = [
    pytest.param({"probe_every": NO_SAFETY_CHECK}, id="its-pidfd-with-no-round-listing-it"),
    pytest.param({"open_pidfd": _no_pidfd}, id="the-rounds-listing-with-no-pidfd-to-be-had"),
]


@pytest.mark.parametrize("told_by", TOLD_BY)
def test_an_agent_that_dies_under_remain_on_exit_is_exited_without_waiting_for_a_safety_check(
    server: TmuxServer, told_by: dict[str, Any]
) -> None:
    pane = server.new_window(server.fake_harness("claude", CASES, "claude-idle"))
    server.run("set-option", "-p", "-t", pane, "remain-on-exit", "on")

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: panes(d).get(pane, {}).get("state") == "idle", "idle")
        first = panes(d)[pane]["incarnation"]
        server.keys(pane, "exit", "Enter")
        await until(lambda: panes(d)[pane]["state"] == "exited", "exited")
        entry = panes(d)[pane]
        assert (entry["incarnation"], entry["harness"]) == (first, "claude")
        assert entry["composer_empty"] is None
        live = 0 if "open_pidfd" in told_by else len(panes(d)) - 1  # (the session's first)
        assert w.health()["processes_watched"] == live  # a dead pane has nothing to watch

    follow(server, scenario, resync=NO_SAFETY_CHECK, **told_by)


def test_a_dead_pane_respawned_with_a_silent_process_is_live_again_without_a_safety_check(
    server: TmuxServer,
) -> None:
    """tmux announces a dead pane's respawn to no control client, and a process that prints
    nothing and sets no title draws no capture: the rounds list the panes' dead flags while any
    pane is dead."""
    pane = server.new_window(["sleep", "600"])
    server.run("set-option", "-p", "-t", pane, "remain-on-exit", "on")

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: pane in panes(d), "the pane")
        first = d.entry(pane).info
        os.kill(first.pid, signal.SIGKILL)
        await until(lambda: d.entry(pane).info.dead, "the dead pane")
        server.run("respawn-pane", "-t", pane, "sleep 600")
        await until(
            lambda: not d.entry(pane).info.dead and d.entry(pane).info.pid != first.pid,
            "the respawned process",
        )
        assert d.entry(pane).info.title == first.title  # nothing else told of it
        assert w.health()["processes_watched"] == len(panes(d))  # followed again, every one

    follow(server, scenario, resync=NO_SAFETY_CHECK)


@pytest.mark.parametrize("told_by", TOLD_BY)
def test_a_pane_respawned_with_kill_is_a_new_incarnation_without_waiting_for_a_safety_check(
    server: TmuxServer, told_by: dict[str, Any]
) -> None:
    pane = server.new_window(server.fake_harness("claude", CASES, "claude-idle"))

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: panes(d).get(pane, {}).get("state") == "idle", "idle")
        first = panes(d)[pane]["incarnation"]
        watched = 0 if "open_pidfd" in told_by else len(panes(d))  # (the session's first too)
        assert w.health()["processes_watched"] == watched
        server.run(
            "respawn-pane", "-k", "-t", pane, *server.fake_harness("codex", CASES, "codex-idle")
        )
        await until(
            lambda: panes(d)[pane]["incarnation"] != first and panes(d)[pane]["harness"] == "codex",
            "the new process as a new incarnation",
        )
        # The process is seen before it draws: its state follows the first screen it prints.
        await until(lambda: panes(d)[pane]["state"] == "idle", "the new process's idle screen")
        events = d.pane(pane)["events"]
        assert [e["kind"] for e in events][:2] == ["appeared", "incarnation"]
        assert w.health()["processes_watched"] == watched  # the new process, in its turn

    follow(server, scenario, resync=NO_SAFETY_CHECK, **told_by)


def test_a_title_set_without_output_is_seen_without_waiting_for_a_safety_check(
    server: TmuxServer,
) -> None:
    pane = server.new_window(["sh"])

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: pane in panes(d), "the pane")
        server.run("select-pane", "-t", pane, "-T", "retitled")
        # announced by nothing: seen by the listing an idle fleet gets every fourth round
        await until(lambda: d.entry(pane).info.title == "retitled", "the new title", 20)

    follow(server, scenario, resync=NO_SAFETY_CHECK)


def test_a_title_a_program_prints_is_seen_with_the_next_probe_round(server: TmuxServer) -> None:
    pane = server.new_window(["sh"])

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: pane in panes(d), "the pane")
        # an OSC 2 sequence, as harnesses set theirs: its %output has the titles listed
        server.run("send-keys", "-t", pane, r"printf '\033]2;%s\033\\' printed-title", "Enter")
        await until(lambda: d.entry(pane).info.title == "printed-title", "the printed title")

    # no safety check and no listing for idle rounds: only the output can have it seen
    follow(server, scenario, resync=NO_SAFETY_CHECK, title_rounds=1_000_000)


def test_an_idle_fleets_titles_are_listed_every_fourth_round_not_with_each_probe(
    server: TmuxServer,
) -> None:
    pane = server.new_window(["sh"])

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: pane in panes(d) and w.stats.title_listings > 0, "the pane")
        # the shell's prompt is on the screen and nothing prints from here on: an idle client
        # is probed every other round, and the titles are listed every fourth
        probes, listings = w.stats.probes, w.stats.title_listings
        await until(lambda: w.stats.probes >= probes + 10, "ten more probes", 40)
        assert w.stats.lost == 0, w.health()  # (a restarted client prints: not idle)
        assert w.stats.title_listings - listings <= 7, w.health()  # with each probe: 10

    # rounds slow enough that a loaded host answers each probe in time
    follow(server, scenario, resync=NO_SAFETY_CHECK, probe_every=0.5)


def test_a_watched_session_destroyed_while_its_client_cannot_leave_keeps_the_server_up(
    server: TmuxServer,
) -> None:
    """tmux 3.3a's server checks a client's subscriptions each second; one for all panes of the
    session (``%*``) read through the session pointer a destroyed session's client still held
    until it left, and crashed the whole server (measured: every time the client was held for
    a second). The watcher's per-window subscriptions survive it."""
    doomed = server.session("doomed", ["sleep", "600"])
    first = server.new_window(server.fake_harness("claude", CASES, "claude-idle"))
    second = server.new_window(server.fake_harness("claude", CASES, "claude-idle"))
    for pane in (first, second):
        server.run("set-option", "-p", "-t", pane, "remain-on-exit", "on")
    pid = server.run("display-message", "-p", "#{pid}").strip()

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(
            lambda: doomed in panes(d) and panes(d).get(second, {}).get("state") == "idle",
            "both sessions followed",
        )
        # a respawn is told by its window's subscription only (no safety check): the doomed
        # session's client is subscribed
        before = panes(d)[doomed]["pid"]
        server.run("respawn-pane", "-k", "-t", doomed, "sleep 601")
        await until(lambda: panes(d)[doomed]["pid"] != before, "the respawn seen")
        clients = server.run("list-clients", "-F", "#{client_pid} #{session_name}").splitlines()
        held = [int(c.split()[0]) for c in clients if c.split()[1:] == ["doomed"]]
        assert len(held) == 1, clients
        os.kill(held[0], signal.SIGSTOP)  # it cannot leave when its session goes
        try:
            server.run("kill-session", "-t", "doomed")
            # two of the main client's checks, one after the other, each telling a pane's
            # exit: more than a second passes, so the held client's check has run too
            for pane in (first, second):
                server.keys(pane, "exit", "Enter")
                await until(
                    lambda pane=pane: (
                        panes(d).get(pane, {}).get("state") == "exited" or not d.server_running
                    ),
                    "the exit seen, or the server gone",
                )
            now = server.run("display-message", "-p", "#{pid}", check=False).strip()
            assert now == pid, f"the tmux server (pid {pid}) went away"
        finally:
            with contextlib.suppress(ProcessLookupError):  # the watcher ends a client that
                os.kill(held[0], signal.SIGCONT)  # stops answering, this one too

    follow(server, scenario, resync=NO_SAFETY_CHECK)


@pytest.mark.parametrize(
    ("launch", "same_process"),
    [
        pytest.param("script", False, id="a-script-tmux-runs-under-sh-c"),
        pytest.param("sh-c", True, id="a-shell-that-execs-in-place"),
    ],
)
def test_a_wrapper_that_execs_the_harness_is_read_as_the_harness_once_it_has(
    server: TmuxServer, tmp_path: Path, launch: str, same_process: bool
) -> None:
    """A launcher that sets up the environment and then ``exec``s the agent: first unknown,
    then the harness for the rest of the pane's life (never a shell for good). A script tmux
    runs under ``sh -c`` execs in a child (the harness is a process of its own: a new
    incarnation); ``sh -c`` with ``exec`` keeps the pid and start time (the same incarnation,
    its harness now known)."""
    claude = " ".join(server.fake_harness("claude", CASES, "claude-idle"))
    setup = "export AGENT_READY=1; echo setting up; read go"
    if launch == "script":
        wrapper = tmp_path / "run-agent"
        wrapper.write_text(f"#!/bin/sh\n{setup}\nexec {claude}\n")
        wrapper.chmod(0o755)
        pane = server.new_window([str(wrapper)])
    else:
        pane = server.new_window(["sh", "-c", f"{setup}; exec {claude}"])

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: "setting up" in panes(d).get(pane, {}).get("summary", ""), "setup")
        first = panes(d)[pane]["incarnation"]
        assert panes(d)[pane]["harness"] == "unknown"  # a launcher, not a shell to type at
        server.keys(pane, "go", "Enter")
        await until(lambda: panes(d)[pane]["harness"] == "claude", "the exec'd harness")
        await until(lambda: panes(d)[pane]["state"] == "idle", "claude idle")
        assert (panes(d)[pane]["incarnation"] == first) is same_process
        if same_process:
            events = d.pane(pane)["events"]
            assert [e for e in events if e["kind"] == "harness"][-1]["to"] == "claude"

    follow(server, scenario, resync=NO_SAFETY_CHECK)


def test_the_server_going_away_and_coming_back_is_followed(server: TmuxServer) -> None:
    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: len(panes(d)) == 1, "the first pane")
        first = next(iter(panes(d).values()))
        server.kill()
        await until(lambda: d.snapshot()["tmux"]["running"] is False, "not running")
        assert d.snapshot()["tmux"]["status"] == "not running" and panes(d) == {}
        await let_others_run()  # the daemon's loop keeps running
        server.start()
        await until(lambda: len(panes(d)) == 1 and d.server_running, "the new server's pane")
        again = next(iter(panes(d).values()))
        assert again["pane"] == first["pane"]  # tmux numbers panes from %0 again...
        assert again["incarnation"] != first["incarnation"]  # ...but it is another incarnation

    follow(server, scenario)


def test_a_fake_claude_is_detected_and_read_from_its_screens(server: TmuxServer) -> None:
    argv = server.fake_harness("claude", CASES, "claude-idle")
    pane = server.new_window(argv)

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: panes(d).get(pane, {}).get("state") == "idle", "idle")
        assert panes(d)[pane]["harness"] == "claude"
        assert panes(d)[pane]["composer_empty"] is True
        server.keys(pane, "claude-running", "Enter")
        await until(lambda: panes(d)[pane]["state"] == "busy", "busy")
        server.keys(pane, "claude-permission-prompt", "Enter")
        await until(lambda: panes(d)[pane]["state"] == "menu", "menu")
        server.keys(pane, "claude-typed-not-submitted", "Enter")
        await until(lambda: panes(d)[pane]["composer_empty"] is False, "a draft")
        events = [e["to"] for e in d.pane(pane)["events"] if e["kind"] == "state"]
        assert events[-4:] == ["idle", "busy", "menu", "idle"]

    follow(server, scenario)


def test_output_on_a_pane_triggers_its_capture(server: TmuxServer) -> None:
    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: len(panes(d)) == 1 and w.stats.captures >= 1, "the first capture")
        await until(lambda: d.entry(next(iter(panes(d)))).text, "the prompt")
        settled = w.stats.captures
        server.keys(next(iter(panes(d))), "true", "Enter")
        await until(lambda: w.stats.captures > settled, "a capture after output")

    follow(server, scenario)


def test_a_pane_printing_in_bursts_is_paused_between_captures_and_read_to_its_last_line(
    server: TmuxServer,
) -> None:
    script = "i=0; while [ $i -lt 300 ]; do i=$((i+1)); echo burst-$i; sleep 0.005; done; "
    script += "echo all-done; exec cat"

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: len(panes(d)) == 1, "the first pane")
        pane = server.new_window(["sh", "-c", script])
        await until(
            lambda: pane in panes(d) and "all-done" in (d.entry(pane).text or ""), "the last line"
        )
        assert "burst-300" in (d.entry(pane).text or "")
        assert w.stats.pauses >= 1  # tmux stopped sending this pane's output until its capture
        server.keys(pane, "typed-after", "Enter")
        await until(lambda: "typed-after" in (d.entry(pane).text or ""), "output after resuming")
        assert d.snapshot()["tmux"]["running"] is True

    follow(server, scenario)


def test_panes_of_new_sessions_printing_from_their_first_moment_are_read_to_their_last_line(
    server: TmuxServer,
) -> None:
    # a new session's client asks its own name right after it starts, which can run before its
    # attach and be answered as another client: a pause resumed under that name would leave
    # the pane silent for good
    script = "i=0; while [ $i -lt 150 ]; do i=$((i+1)); echo burst-$i; sleep 0.005; done; "
    script += "sleep 0.5; echo all-done; exec cat"

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: len(panes(d)) == 1, "the first pane")
        new = [server.session(f"burst{n}", ["sh", "-c", script]) for n in range(8)]

        def done() -> bool:
            found = panes(d)
            return all(p in found and "all-done" in (d.entry(p).text or "") for p in new)

        await until(done, "every new session's last line", timeout=30)
        assert w.stats.pauses >= 1

    follow(server, scenario)


class EarlyClient:
    """A client whose first name query ran before its attach, answered as another client."""

    def __init__(self) -> None:
        self.label, self.alive, self.pid = "$1", True, 4242
        self.name: str | None = None
        self.answers = [["1111 client-1111"], ["4242 client-4242"]]
        self.asked = 0

    async def command(self, line: str, timeout: float) -> list[str]:
        self.asked += 1
        return self.answers.pop(0)


def test_a_client_takes_only_a_name_its_own_process_answered_with(tmp_path: Path) -> None:
    async def main() -> None:
        directory = Directory(SystemClock(), b"k" * 32, ProcessProbe(), socket="none")
        watcher = Watcher(Tmux(tmp_path / "none"), directory, debounce=0.001)
        client = EarlyClient()
        watcher._clients["$1"] = client  # type: ignore[assignment]
        await watcher._recover(client)  # type: ignore[arg-type]
        assert (client.name, client.asked) == ("client-4242", 2)

    asyncio.run(main())


def test_a_listing_before_a_differing_panes_capture_still_checks_every_other_pane(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        directory = Directory(SystemClock(), b"k" * 32, ProcessProbe(), socket="none")
        watcher = Watcher(Tmux(tmp_path / "none"), directory)
        fields = ["%1", "100", "bash", "/", "old title", "0", "", "0", "80", "24"]
        heard = PaneInfo.parse("\x1f".join([*fields, "@1", "0", "w", "$1", "s"]))
        assert heard is not None
        watcher._heard, watcher._listed = {"%1": heard}, {"%1"}
        # the listing of the round before saw %1's new title and dropped its metadata; its
        # capture has not run when the next round's listing, which also shows a new pane, comes
        listing: asyncio.Future[list[str]] = asyncio.get_running_loop().create_future()
        listing.set_result(["%1\x1f100\x1f0\x1fnew title", "%2\x1f200\x1f0\x1fbash"])
        watcher._processes_listed(PROCESS_FIELDS, listing)
        assert watcher._dirty == {"%1"}
        assert watcher._structure_event.is_set()  # the new pane is listed

    asyncio.run(main())
