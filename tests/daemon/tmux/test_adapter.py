"""The tmux primitives against a real server."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from openbus.daemon.directory_probe import WALK_EVERY, WALK_MOST, ProcessProbe, classify_argv
from openbus.daemon.tmux import Tmux
from openbus.daemon.tmux.adapter import default_socket
from openbus.kernel.errors import BadRequest, NotFound, Unavailable
from openbus.kernel.testing import FixedClock
from tests.support.tmux import TmuxServer
from tests.support.wait import wait_until

T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


def test_list_panes_reports_ids_processes_and_places(server: TmuxServer) -> None:
    pane = server.new_window(["sh"])
    tmux = Tmux(server.socket)

    def listed() -> Any:
        # Until the child has its terminal, tmux answers the command from the pane's argv and
        # an empty path: the cwd (read from the foreground process) shows that it runs.
        found = [i for i in run(tmux.list_panes()) if i.pane_id == pane]
        return found[0] if found and found[0].current_command == "sh" and found[0].cwd else None

    info = wait_until(listed, what="the new pane running sh")
    assert info.pid > 0 and info.current_command == "sh" and info.session_name == "main"
    assert info.window_id.startswith("@") and info.dead is False and info.cwd


def test_send_literal_pastes_text_without_putting_it_in_argv(
    server: TmuxServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    pane = server.new_window(["sh"])
    tmux = Tmux(server.socket)
    argvs: list[tuple[Any, ...]] = []
    real = asyncio.create_subprocess_exec

    async def spy(*args: Any, **kw: Any) -> Any:
        argvs.append(args)
        return await real(*args, **kw)

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spy)
    run(tmux.send_literal(pane, "echo secret-$((40+2))-text"))
    run(tmux.send_key(pane, "Enter"))
    server.wait_for(pane, "secret-42-text")
    assert not any("secret" in str(a) for argv in argvs for a in argv)


def test_new_window_keeps_environment_values_out_of_every_argv(
    server: TmuxServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tmux = Tmux(server.socket)
    argvs: list[tuple[Any, ...]] = []
    real = asyncio.create_subprocess_exec

    async def spy(*args: Any, **kw: Any) -> Any:
        argvs.append(args)
        return await real(*args, **kw)

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spy)
    value = "tok-'quoted' $HOME #{pane_id} ;"
    pane, pid = run(
        tmux.new_window(
            ["sh", "-c", 'echo "[$OB_TOKEN]"; sleep 30'], {"OB_TOKEN": value}, tmp_path, "job #1"
        )
    )
    assert pid > 0
    server.wait_for(pane, f"[{value}]")
    assert not any("tok-" in str(a) for argv in argvs for a in argv)
    info = next(i for i in run(tmux.list_panes()) if i.pane_id == pane)
    assert info.cwd == str(tmp_path) and info.window_name == "job #1" and info.pid == pid


def test_new_window_refuses_bad_environment_and_argv(server: TmuxServer) -> None:
    tmux = Tmux(server.socket)
    with pytest.raises(BadRequest) as bad:
        run(tmux.new_window(["sh"], {"BAD KEY": "x"}))
    assert bad.value.field == "env.BAD KEY"
    with pytest.raises(BadRequest) as multi:
        run(tmux.new_window(["sh"], {"K": "two\nlines"}))
    assert multi.value.field == "env.K"
    with pytest.raises(BadRequest):
        run(tmux.new_window([]))


def dead_with_status(server: TmuxServer, tmux: Tmux, pane: str) -> Any:
    """The pane's info once tmux has it dead with its exit status."""
    server_pid = int(server.run("display-message", "-p", "#{pid}").strip())

    def dead() -> Any:
        found = next(i for i in run(tmux.list_panes()) if i.pane_id == pane)
        if found.dead and found.dead_status is None:
            # The pty closed but tmux missed the child's SIGCHLD: Debian's tmux uses
            # libutempter, whose helper sets SIGCHLD to SIG_DFL while it runs (here, removing
            # the pane's utmp record on that very EOF), and a signal arriving then is dropped
            # (tmux/tmux#311). The child stays a zombie without a status until tmux gets
            # another SIGCHLD, which makes it reap every exited child.
            os.kill(server_pid, signal.SIGCHLD)
        return found if found.dead and found.dead_status is not None else None

    return wait_until(dead, what="the pane to die with its status")


def test_respawn_and_remain_on_exit_and_kill(server: TmuxServer) -> None:
    tmux = Tmux(server.socket)
    pane = server.new_window(["sh"])
    run(tmux.set_option(pane, "remain-on-exit", "on"))
    old_pid = next(i.pid for i in run(tmux.list_panes()) if i.pane_id == pane)
    new_pid = run(tmux.respawn_pane(pane, ["sh", "-c", "echo respawned; exit 3"], {"X": "1"}))
    assert new_pid != old_pid
    assert dead_with_status(server, tmux, pane).dead_status == 3
    run(tmux.kill_pane(pane))
    assert pane not in {i.pane_id for i in run(tmux.list_panes())}


@pytest.mark.parametrize("session", [None, "main", "fresh"])
def test_a_window_made_to_remain_keeps_a_process_that_exits_at_once_with_its_status_and_screen(
    server: TmuxServer, session: str | None
) -> None:
    tmux = Tmux(server.socket)
    server.new_window(["sh"])  # the new window goes last, whatever the windows before it
    first, _ = run(tmux.new_window(["sh", "-c", "exit 4"], session=session, remain_on_exit=True))
    assert dead_with_status(server, tmux, first).dead_status == 4
    # tmux 3.3a drops a pane's unread output when it reaps the exit first, so this one exits
    # once tmux has answered where its cursor is, which it does only after reading the line
    said = "echo gone-$((40+2)); stty -icanon -echo; printf '\\033[6n'; head -c 1 >/dev/null"
    argv = ["sh", "-c", f"{said}; exit 3"]
    pane, _ = run(tmux.new_window(argv, session=session, remain_on_exit=True))
    assert dead_with_status(server, tmux, pane).dead_status == 3
    assert "gone-42" in run(tmux.capture(pane, history=5))  # (the dead line scrolled it up)
    others = [i.pane_id for i in run(tmux.list_panes()) if i.pane_id not in (first, pane)]
    assert all(run(tmux.pane_option(other, "remain-on-exit")) is None for other in others)


def test_a_command_run_as_the_server_gets_its_words_as_given_and_no_tmux_format(
    server: TmuxServer, tmp_path: Path
) -> None:
    tmux = Tmux(server.socket)
    said = tmp_path / "said"
    words = ["sh", "-c", 'printf %s "$1" > "$2"', "sh", "it's $HOME; `x` * ~", str(said)]
    run(tmux.run_as_server(words))
    assert wait_until(lambda: said.exists() and said.read_text()) == "it's $HOME; `x` * ~"
    with pytest.raises(BadRequest, match="#"):
        run(tmux.run_as_server(["echo", "#{pane_id}"]))


def test_a_missing_pane_is_not_found_and_bad_keys_are_refused(server: TmuxServer) -> None:
    tmux = Tmux(server.socket)
    with pytest.raises(NotFound, match="%999"):
        run(tmux.capture("%999"))
    with pytest.raises(BadRequest):
        run(tmux.send_key("%0", "rm -rf /"))
    with pytest.raises(BadRequest):
        run(tmux.capture("0"))


def test_a_pane_is_gone_only_when_tmux_says_so_or_its_server_is_gone(
    server: TmuxServer, tmp_path: Path
) -> None:
    tmux = Tmux(server.socket)
    pane = server.new_window(["sh"])
    there = run(tmux.pane_if_there(pane))
    assert there is not None and there.pane_id == pane
    assert run(tmux.pane_if_there("%999")) is None
    assert run(Tmux(tmp_path / "none").pane_if_there(pane)) is None


def test_no_server_is_unavailable(tmp_path: Path) -> None:
    tmux = Tmux(tmp_path / "none")
    assert not tmux.reachable()
    with pytest.raises(Unavailable, match="no tmux server"):
        run(tmux.list_panes())


def test_a_server_too_busy_to_take_a_connection_is_reachable_and_a_closed_socket_is_not(
    tmp_path: Path,
) -> None:
    path = tmp_path / "busy"
    waiting: list[socket.socket] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(0)  # never accepts: the connections queue until the queue is full
        try:
            while True:
                client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                waiting.append(client)
                client.setblocking(False)
                try:
                    client.connect(str(path))
                except BlockingIOError:
                    break
            assert Tmux(path).reachable()  # there, wedged: not the server's end
        finally:
            for client in waiting:
                client.close()
    assert path.exists() and not Tmux(path).reachable()  # nothing listens any more


def test_the_default_socket_follows_tmux_rules() -> None:
    assert default_socket({"TMUX": "/x/y,12,0"}) == Path("/x/y")
    assert default_socket({"TMUX_TMPDIR": "/run/t"}) == Path(f"/run/t/tmux-{os.getuid()}/default")
    assert default_socket({}) == Path(f"/tmp/tmux-{os.getuid()}/default")


def test_harnesses_are_detected_from_the_process_tree(server: TmuxServer, tmp_path: Path) -> None:
    screens = tmp_path / "screens"
    screens.mkdir()
    probe = ProcessProbe()
    codex = server.new_window(server.fake_harness("codex", screens))
    shell = server.new_window(["sh"])
    nested = server.new_window(["sh"])
    claude_argv = " ".join(server.fake_harness("claude", screens))
    server.keys(nested, claude_argv, "Enter")
    tmux = Tmux(server.socket)

    def harness(pane: str) -> str:
        info = next(i for i in run(tmux.list_panes()) if i.pane_id == pane)
        return probe.detect(info.pid).harness

    wait_until(lambda: harness(nested) == "claude", what="claude started from a shell")
    assert harness(codex) == "codex"
    assert harness(shell) == "shell"


def test_a_pane_process_is_detected_again_after_it_execs(server: TmuxServer) -> None:
    # Like a pane listed between tmux's fork and the exec of its command: the same pid, start
    # time and terminal, first unrecognized, then a shell.
    code = "import os, sys; sys.stdin.readline(); os.execvp('sh', ['sh'])"
    pane = server.new_window([sys.executable, "-c", code])
    pid = int(server.run("display-message", "-p", "-t", pane, "#{pane_pid}").strip())
    probe = ProcessProbe()
    wait_until(lambda: "python" in probe_comm(pid), what="the python process")
    assert probe.detect(pid).harness == "unknown"
    server.keys(pane, "Enter")
    wait_until(lambda: probe.detect(pid).harness == "shell", what="the exec'd shell detected")


def wrapped_harness(server: TmuxServer, tmp_path: Path) -> tuple[str, int]:
    """A pane whose shell script starts a fake OpenCode once it reads a line; its pid."""
    screens = tmp_path / "screens"
    screens.mkdir()
    harness = " ".join(server.fake_harness("opencode", screens))
    pane = server.new_window(["sh", "-c", f"read go; {harness}; true"])
    return pane, int(server.run("display-message", "-p", "-t", pane, "#{pane_pid}").strip())


def test_a_harness_a_wrapper_script_starts_a_moment_later_is_detected_below_it(
    server: TmuxServer, tmp_path: Path
) -> None:
    # ``sh -c`` keeps the pane's foreground group and runs its last command as a child: the
    # pane reads unknown (a launcher, not a shell) until the harness starts, then the harness.
    pane, pid = wrapped_harness(server, tmp_path)
    probe = ProcessProbe()
    wait_until(lambda: "sh" in probe_comm(pid), what="the wrapper shell")
    assert probe.detect(pid).harness == "unknown"
    server.keys(pane, "Enter")
    wait_until(lambda: probe.detect(pid).harness == "opencode", what="the harness below it")
    assert probe.detect(pid).process.pid != pid


def test_a_launcher_walked_lately_is_answered_from_that_walk_and_owed_once_it_is_due(
    server: TmuxServer, tmp_path: Path
) -> None:
    # a script that keeps starting commands would be walked on every capture: the walk below a
    # launcher runs at most every WALK_EVERY seconds; an answer from a walk put off is owed,
    # and the pane is due to be asked again once the walk is
    pane, pid = wrapped_harness(server, tmp_path)
    clock = FixedClock()
    probe, launching = ProcessProbe(clock=clock), ProcessProbe(clock=clock)
    wait_until(lambda: "sh" in probe_comm(pid), what="the wrapper shell")
    assert probe.detect(pid).harness == launching.detect(pid).harness == "unknown"
    server.keys(pane, "Enter")
    wait_until(lambda: ProcessProbe().detect(pid).harness == "opencode", what="the harness")
    assert launching.detect(pid, walk_now=True).harness == "opencode"  # a launch asks so
    assert probe.detect(pid).harness == "unknown"  # as walked a moment ago
    assert probe.owed() == set()
    clock.advance(WALK_EVERY)
    assert probe.owed() == {pid}
    assert probe.detect(pid).harness == "opencode"
    assert probe.owed() == set()


def test_a_launcher_whose_walks_find_nothing_new_is_walked_less_often_down_to_walk_most(
    server: TmuxServer, tmp_path: Path
) -> None:
    # each walk that finds the same answer doubles the hold (WALK_EVERY, twice it, ... up to
    # WALK_MOST); the harness such a launcher starts at last is seen once that hold is over
    pane, pid = wrapped_harness(server, tmp_path)
    clock = FixedClock()
    probe = ProcessProbe(clock=clock)
    wait_until(lambda: "sh" in probe_comm(pid), what="the wrapper shell")
    holds: list[float] = []
    assert probe.detect(pid).harness == "unknown"  # walked
    while not holds or holds[-1] < WALK_MOST:
        assert probe.detect(pid).harness == "unknown"  # put off: owed once the hold is over
        waited = 0.0
        while not probe.owed():
            clock.advance(1.0)
            waited += 1.0
        holds.append(waited)
        assert probe.detect(pid).harness == "unknown"  # walked again: nothing new
    assert holds == [WALK_EVERY, 2 * WALK_EVERY, WALK_MOST]
    server.keys(pane, "Enter")
    wait_until(lambda: ProcessProbe().detect(pid).harness == "opencode", what="the harness")
    assert probe.detect(pid).harness == "unknown"  # as walked a moment ago
    clock.advance(WALK_MOST - 1.0)
    assert probe.owed() == set()
    clock.advance(1.0)
    assert probe.owed() == {pid}
    assert probe.detect(pid).harness == "opencode"


def test_a_walk_asked_for_at_once_starts_the_hold_over(server: TmuxServer, tmp_path: Path) -> None:
    _, pid = wrapped_harness(server, tmp_path)
    clock = FixedClock()
    probe = ProcessProbe(clock=clock)
    wait_until(lambda: "sh" in probe_comm(pid), what="the wrapper shell")
    for _ in range(4):  # walked, and walked again each time its hold is over: WALK_MOST now
        probe.detect(pid)
        clock.advance(WALK_MOST)
    assert probe.detect(pid, walk_now=True).harness == "unknown"
    probe.detect(pid)  # put off: owed once WALK_EVERY has passed
    clock.advance(WALK_EVERY)
    assert probe.owed() == {pid}


def probe_comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read()


@pytest.mark.parametrize(
    ("argv", "comm", "expected"),
    [
        (["node", "/usr/lib/node_modules/@anthropic-ai/claude-code/cli.js"], "node", "claude"),
        (["/home/u/.local/share/claude/versions/2.1.197"], "2.1.197", "claude"),
        (["node", "/x/node_modules/.bin/codex"], "node", "codex"),
        (["node", "/x/@openai/codex/bin/codex.js", "resume"], "node", "codex"),
        (["opencode"], "opencode", "opencode"),
        (["omp"], "omp", "omp"),
        (["bun", "/x/node_modules/@oh-my-pi/pi-coding-agent/dist/cli.js"], "omp", "omp"),
        (["bun", "/x/node_modules/@oh-my-pi/pi-coding-agent/dist/cli.js"], "bun", "omp"),
        (["/x/node_modules/.bin/opencode"], "opencode", "opencode"),
        (["node", "/x/node_modules/.bin/gemini", "-m", "m"], "node", "gemini"),
        (["node", "/usr/bin/gemini"], "node", "gemini"),
        (["-bash"], "bash", "shell"),
        (["/usr/bin/fish"], "fish", "shell"),
        (["vim", "claude.md"], "vim", None),
        (["grep", "-r", "claude", "."], "grep", None),
    ],
)
def test_process_names_map_to_harnesses(argv: list[str], comm: str, expected: str | None) -> None:
    assert classify_argv(argv, comm) == expected
