"""The watcher survives tmux failures against a real server: a control client that is killed,
stopped, or a server that stops answering is found by the liveness probe, its panes are marked
stale (never shown as current), a new client follows them and the directory converges."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

from openbus.daemon.directory import Change, Directory
from openbus.daemon.tmux.watcher import Watcher
from tests.daemon.tmux.test_watcher import follow, panes, until
from tests.support.tmux import TmuxServer

# rounds the tests can wait out quickly (a lost client found within 1.2 s; the daemon: 4.8 s)
PROBE = {"probe_every": 0.4}


def client_pids(server: TmuxServer) -> set[int]:
    out = server.run("list-clients", "-F", "#{client_pid}", check=False)
    return {int(line) for line in out.split() if line.isdigit()}


def text(d: Directory, pane: str) -> str:
    entry = panes(d).get(pane)
    return (d.entry(pane).text or "") if entry is not None else ""


def kinds(d: Directory, pane: str) -> list[str]:
    return [e["kind"] for e in d.pane(pane)["events"] if e["kind"] in ("stale", "fresh")]


@contextlib.contextmanager
def continued(pid: int) -> Iterator[None]:
    """Whatever happens, a stopped process is let go again at the end."""
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def test_a_killed_control_client_marks_its_panes_stale_and_a_new_one_follows(
    server: TmuxServer,
) -> None:
    pane = next(iter(server.run("list-panes", "-a", "-F", "#{pane_id}").split()))

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: text(d, pane) and client_pids(server), "the pane followed")
        (first,) = client_pids(server)
        os.kill(first, signal.SIGKILL)
        await until(lambda: kinds(d, pane) == ["stale", "fresh"], "stale, then fresh again")
        stale = next(e for e in d.pane(pane)["events"] if e["kind"] == "stale")
        assert "control client" in stale["why"] or "exit" in stale["why"]
        await until(lambda: client_pids(server) - {first}, "a new control client")
        server.keys(pane, "echo after-$((6*7))", "Enter")
        await until(lambda: "after-42" in text(d, pane), "output after the restart")
        assert panes(d)[pane]["stale"] is False

    follow(server, scenario, **PROBE)


def test_a_stopped_control_client_process_goes_on_delivering_and_is_not_replaced(
    server: TmuxServer,
) -> None:
    """tmux's server reads and writes a control client's stdin and stdout itself (the client
    hands them over at attach), so stopping the client process stops nothing: the probe keeps
    its answers coming, the pane is never marked stale and output is followed throughout."""
    pane = next(iter(server.run("list-panes", "-a", "-F", "#{pane_id}").split()))

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: text(d, pane) and client_pids(server), "the pane followed")
        (first,) = client_pids(server)
        with continued(first):
            os.kill(first, signal.SIGSTOP)
            probed = w.stats.probes
            server.keys(pane, "echo while-$((6*7))", "Enter")
            await until(lambda: "while-42" in text(d, pane), "output while it is stopped")
            await until(lambda: w.stats.probes >= probed + 3, "three more probes")
            assert client_pids(server) == {first} and w.stats.lost == 0
            assert kinds(d, pane) == [] and panes(d)[pane]["stale"] is False

    follow(server, scenario, probe_every=1.0)  # tolerant: a slow answer is not a loss


def staleness(d: Directory, pane: str) -> list[bool]:
    """The pane's stale flag from now on, each time it changes (first: as it is now)."""
    flags = [bool(panes(d)[pane]["stale"])]

    def heard(change: Change) -> None:
        if change.pane_id == pane:
            flag = bool(panes(d).get(pane, {}).get("stale"))
            if flag != flags[-1]:
                flags.append(flag)

    d.listen(heard)
    return flags


def ticks(d: Directory, pane: str) -> int:
    """The highest counter a printing loop has shown on the pane's screen."""
    return max((int(word[5:]) for word in text(d, pane).split() if word[5:].isdigit()), default=0)


def test_a_control_client_that_stops_answering_while_its_pane_prints_is_replaced(
    server: TmuxServer,
) -> None:
    """A wedged command queue (here a ``wait-for`` nobody signals, queued on the client) keeps
    ``%output`` coming but answers nothing, captures included: the client is not silent, yet
    its unanswered commands get it probed, it is found lost, its panes are stale until a new
    client captures them, and the directory follows the printing pane again."""
    pane = next(iter(server.run("list-panes", "-a", "-F", "#{pane_id}").split()))

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: text(d, pane) and client_pids(server), "the pane followed")
        server.keys(pane, "i=0; while :; do i=$((i+1)); echo tick-$i; sleep 0.1; done", "Enter")
        await until(lambda: ticks(d, pane) > 0, "the loop followed")
        (first,) = client_pids(server)
        wedged = w.tmux.control
        assert wedged is not None
        flags = staleness(d, pane)  # the printing pane's events outrun the kept ones
        wedged.send_quietly(["wait-for openbus-test-wedge"])
        await until(lambda: flags == [False, True, False], "stale, then fresh again")
        assert w.stats.lost == 1
        await until(lambda: client_pids(server) - {first}, "a new control client")
        seen = ticks(d, pane)
        await until(lambda: ticks(d, pane) > seen, "the loop followed after the restart")
        assert panes(d)[pane]["stale"] is False

    try:
        follow(server, scenario, **PROBE)
    finally:
        server.run("wait-for", "-S", "openbus-test-wedge", check=False)


def test_a_server_that_stops_answering_keeps_its_panes_stale_until_it_answers_again(
    server: TmuxServer,
) -> None:
    pane = next(iter(server.run("list-panes", "-a", "-F", "#{pane_id}").split()))
    server_pid = int(server.run("display-message", "-p", "#{pid}").strip())

    async def scenario(d: Directory, w: Watcher) -> None:
        await until(lambda: text(d, pane) and client_pids(server), "the pane followed")
        removed = 0
        with continued(server_pid):
            os.kill(server_pid, signal.SIGSTOP)
            await until(lambda: panes(d)[pane]["stale"] is True, "the pane marked stale")
            await until(
                lambda: "does not answer" in (d.snapshot()["tmux"]["detail"] or ""),
                "the server reported as not answering",
            )
            removed = sum(e["kind"] == "removed" for e in d.pane(pane)["events"])
            assert panes(d)[pane]["stale"] is True  # kept, and still not shown as current
        server.keys(pane, "echo back-$((6*7))", "Enter")
        await until(lambda: "back-42" in text(d, pane), "output after it answers")
        await until(lambda: panes(d)[pane]["stale"] is False, "the pane current again")
        assert removed == 0 and d.snapshot()["tmux"]["detail"] is None

    follow(server, scenario, **PROBE)
