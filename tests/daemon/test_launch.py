"""Launch: the command lines it builds (pure), its field errors, the CLI over the real daemon."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import termios
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon.config import Launcher, builtin_launchers
from openbus.daemon.launch_exec import CURSOR_QUERY, FAILED_STATUS, settled
from openbus.daemon.launch_exec import main as exec_main
from openbus.daemon.launch_plan import (
    TOKEN_ENV,
    as_pool_user,
    check_cwd,
    check_prompt,
    gemini_settings_refusal,
    plan_launch,
    plan_resume,
    resume_unavailable,
)
from openbus.daemon.launch_proc import identity_of
from openbus.kernel.errors import BadRequest
from openbus.kernel.scopes import Preset
from tests.daemon.mcp.conftest import Fleet, make_fleet
from tests.daemon.mcp.test_endpoint import raw
from tests.support.daemon import restart_daemon
from tests.support.wait import wait_until

URL = "http://127.0.0.1:7707/mcp"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    with make_fleet(tmp_path) as made:
        yield made


SID = "5f1c3c1e-8d1c-4a57-9d53-8f8f4c3b2a10"


def test_a_connected_claude_launch_gets_its_session_id_the_endpoint_and_the_allowed_tools() -> None:
    plan = plan_launch(
        builtin_launchers()["claude"],
        preset=Preset.OBSERVE,
        prompt="hi",
        mcp_url=URL,
        session_id=SID,
    )
    argv = list(plan.argv)
    assert plan.connect and plan.session_id == SID
    assert argv[argv.index("--session-id") + 1] == SID
    config = json.loads(argv[argv.index("--mcp-config") + 1])
    server = config["mcpServers"]["openbus"]
    assert server == {
        "type": "http",
        "url": URL,
        "headers": {"Authorization": "Bearer ${OPENBUS_TOKEN}"},
    }
    assert argv[argv.index("--allowedTools") + 1] == "mcp__openbus"
    assert "--strict-mcp-config" not in argv
    # the TUI would send an argv prompt before loading the openbus server: it is typed instead
    assert "hi" not in argv and plan.typed_prompt == "hi"


def test_a_one_shot_or_unconnected_launch_takes_its_prompt_in_argv() -> None:
    printing = Launcher("p", "claude", ("claude", "-p"))
    executing = Launcher("x", "codex", ("codex", "exec"))
    for launcher, preset in (
        (printing, Preset.OBSERVE),
        (executing, Preset.OBSERVE),
        (builtin_launchers()["claude"], Preset.OFF),
    ):
        plan = plan_launch(launcher, preset=preset, prompt="hi", mcp_url=URL, session_id=SID)
        assert plan.argv[-2:] == ("--", "hi") and plan.typed_prompt is None, launcher
    gemini = Launcher("g", "gemini", ("gemini",))
    plan = plan_launch(gemini, preset=Preset.OFF, prompt="-hi", mcp_url=URL, session_id=SID)
    assert plan.argv[-1] == "--prompt-interactive=-hi" and "--" not in plan.argv


def test_a_connected_gemini_tui_has_its_prompt_typed_and_a_one_shot_gemini_takes_no_other() -> None:
    gemini = Launcher("g", "gemini", ("gemini",))
    plan = plan_launch(gemini, preset=Preset.OBSERVE, prompt="hi", mcp_url=URL, session_id=SID)
    assert "hi" not in plan.argv and plan.typed_prompt == "hi"
    with pytest.raises(BadRequest) as exc:
        check_prompt("hi", Launcher("g", "gemini", ("gemini", "-p", "already")))
    assert exc.value.field == "prompt" and "-p" in exc.value.message


def test_a_connected_codex_launch_reads_its_token_from_the_environment() -> None:
    plan = plan_launch(
        builtin_launchers()["codex"],
        preset=Preset.COLLABORATE,
        prompt=None,
        mcp_url=URL,
        session_id=SID,
    )
    assert plan.connect and plan.session_id is None
    overrides = [plan.argv[i + 1] for i, a in enumerate(plan.argv) if a == "-c"]
    assert overrides == [
        f'mcp_servers.openbus.url="{URL}"',
        f'mcp_servers.openbus.bearer_token_env_var="{TOKEN_ENV}"',
        'mcp_servers.openbus.default_tools_approval_mode="approve"',
    ]


@pytest.mark.parametrize("name", ["opencode", "omp", "shell"])
def test_other_harnesses_launch_unconnected_and_say_why(name: str) -> None:
    plan = plan_launch(
        builtin_launchers()[name], preset=Preset.OBSERVE, prompt=None, mcp_url=URL, session_id=SID
    )
    assert not plan.connect and plan.reason and "unavailable" in plan.reason
    assert plan.argv == builtin_launchers()[name].argv


def test_an_opaque_launcher_runs_its_command_in_a_shell_and_is_never_connectable() -> None:
    opaque = Launcher("mine", "claude", command="claude --model x")
    plan = plan_launch(opaque, preset=Preset.OBSERVE, prompt=None, mcp_url=URL, session_id=SID)
    assert plan.argv == ("/bin/sh", "-c", "claude --model x") and not plan.connect
    assert plan.reason is not None and "structured" in plan.reason


def test_an_off_launch_injects_no_endpoint_only_its_session_id() -> None:
    plan = plan_launch(
        builtin_launchers()["claude"], preset=Preset.OFF, prompt=None, mcp_url=URL, session_id=SID
    )
    assert plan.argv == ("claude", "--session-id", SID) and not plan.connect
    assert plan.reason is None
    codex = plan_launch(
        builtin_launchers()["codex"], preset=Preset.OFF, prompt=None, mcp_url=URL, session_id=SID
    )
    assert codex.argv == ("codex",) and not codex.connect


def test_a_resume_runs_the_launchers_resume_form_with_the_endpoint_when_connected() -> None:
    claude = plan_resume(
        builtin_launchers()["claude"], session_id=SID, preset=Preset.OBSERVE, mcp_url=URL
    )
    assert claude.argv[:3] == ("claude", "--resume", SID) and claude.connect
    assert "--mcp-config" in claude.argv and "--session-id" not in claude.argv
    codex = plan_resume(
        Launcher("cx", "codex", ("codex", "-m", "x")),
        session_id=SID,
        preset=Preset.OFF,
        mcp_url=URL,
    )
    assert codex.argv == ("codex", "-m", "x", "resume", SID) and not codex.connect
    # OpenCode continues a session with --session; it cannot be connected, so it resumes Off
    opencode = plan_resume(
        builtin_launchers()["opencode"], session_id=SID, preset=Preset.OBSERVE, mcp_url=URL
    )
    assert opencode.argv == ("opencode", "--session", SID) and not opencode.connect
    assert opencode.reason is not None and "OpenCode" in opencode.reason
    assert resume_unavailable(builtin_launchers()["opencode"]) is None
    for harness in ("gemini", "omp"):  # by the session's full id (a real-CLI test shows it)
        launcher = Launcher(harness, harness, (harness,))
        assert resume_unavailable(launcher) is None
        resumed = plan_resume(launcher, session_id=SID, preset=Preset.OFF, mcp_url=URL)
        assert resumed.argv == (harness, "--resume", SID) and not resumed.connect
    mine = Launcher("mine", "claude", ("claude",), resume=("claude", "-r", "{session_id}"))
    templated = plan_resume(mine, session_id=SID, preset=Preset.OFF, mcp_url=URL)
    assert templated.argv == ("claude", "-r", SID)
    for refused, word in (
        (Launcher("o", "claude", command="claude"), "opaque"),
        (builtin_launchers()["shell"], "shell"),
    ):
        with pytest.raises(BadRequest) as exc:
            plan_resume(refused, session_id=SID, preset=Preset.OFF, mcp_url=URL)
        assert word in exc.value.message and exc.value.field == "launcher"


def test_bad_prompts_and_directories_name_their_field(tmp_path: Path) -> None:
    claude = builtin_launchers()["claude"]
    for bad in (3, "", "x\x07", "a" * 40000):
        with pytest.raises(BadRequest) as exc:
            check_prompt(bad, claude)
        assert exc.value.field == "prompt"
    with pytest.raises(BadRequest):
        check_prompt("hello", builtin_launchers()["shell"])
    for bad_cwd in ("relative/dir", str(tmp_path / "missing"), str(tmp_path / "f")):
        (tmp_path / "f").write_text("")
        with pytest.raises(BadRequest) as exc:
            check_cwd(bad_cwd, None)
        assert exc.value.field == "cwd"
    assert check_cwd(str(tmp_path), None) == tmp_path


def test_the_exec_wrapper_refuses_an_env_file_others_can_read_and_removes_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "env.json"
    path.write_text(json.dumps({"env": {"X": "1"}}))
    os.chmod(path, 0o644)
    assert exec_main([str(path), "--", "/bin/true"]) == 127
    assert not path.exists()


def test_the_exec_wrapper_names_its_exit_status_on_screen_where_tmux_may_lose_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "env.json"
    path.write_text(json.dumps({"env": {}}))
    os.chmod(path, 0o600)
    assert exec_main([str(path), "--", "openbus-no-such-harness"]) == 127
    line = capsys.readouterr().err
    found = FAILED_STATUS.search("Pane is dead\n" + line)
    assert found is not None and found.group(1) == "127", line
    assert "cannot start openbus-no-such-harness" in line


def read_until(fd: int, wanted: bytes) -> bytes:
    """What the terminal side ``fd`` of a pty reads up to and including ``wanted``."""
    seen = b""

    def arrived() -> bool:
        nonlocal seen
        if select.select([fd], [], [], 0)[0]:
            seen += os.read(fd, 4096)
        return wanted in seen

    wait_until(arrived, what=f"{wanted!r} on the terminal")
    return seen


def test_the_exec_wrapper_exits_on_failure_only_once_its_terminal_has_read_why(
    tmp_path: Path,
) -> None:
    # tmux 3.3a drops a pane's unread output when it reaps the exit first: the wrapper asks the
    # terminal (here the test) where its cursor is and exits once answered
    path = tmp_path / "env.json"
    path.write_text(json.dumps({"env": {}}))
    os.chmod(path, 0o600)
    terminal, pane = os.openpty()
    argv = [sys.executable, "-m", "openbus.daemon.launch_exec", str(path)]
    wrapper = subprocess.Popen(
        [*argv, "--", "openbus-no-such-harness"], stdin=pane, stdout=pane, stderr=pane
    )
    os.close(pane)
    try:
        shown = read_until(terminal, CURSOR_QUERY)
        assert b"cannot start openbus-no-such-harness" in shown.split(CURSOR_QUERY)[0]
        assert wrapper.poll() is None  # still there, waiting for the answer
        os.write(terminal, b"\x1b[7;1R")
        assert wrapper.wait(timeout=30) == 127
    finally:
        wrapper.kill()
        wrapper.wait()
        os.close(terminal)


def test_a_terminal_is_settled_when_it_answers_and_left_as_it_was_either_way() -> None:
    terminal, pane = os.openpty()
    try:
        before = termios.tcgetattr(pane)
        answered: list[bool] = []
        waiting = threading.Thread(target=lambda: answered.append(settled(pane, pane, 60)))
        waiting.start()
        read_until(terminal, CURSOR_QUERY)
        os.write(terminal, b"\x1b[1;")
        os.write(terminal, b"1R")  # an answer may come in pieces
        waiting.join(timeout=30)
        assert answered == [True]
        assert settled(pane, pane, 0.01) is False  # nobody answers: bounded
        assert termios.tcgetattr(pane) == before
    finally:
        os.close(terminal)
        os.close(pane)
    with open(os.devnull, "rb") as not_a_tty:
        assert settled(not_a_tty.fileno(), not_a_tty.fileno(), 60) is False


def test_launch_field_errors_come_back_naming_the_field(fleet: Fleet) -> None:
    with fleet.daemon.human() as client:
        for body, field in (
            ({"launcher": "nope"}, "launcher"),
            ({"launcher": "fakeclaude", "cwd": "relative"}, "cwd"),
            ({"launcher": "fakeclaude", "preset": "max"}, "preset"),
            ({"launcher": "fakeclaude", "prompt": ""}, "prompt"),
            ({"launcher": "fakeclaude", "bogus": 1}, "bogus"),
        ):
            response = client.post("/api/launch", json=body)
            assert response.status_code == 400 and response.json()["field"] == field, (
                body,
                response.text,
            )


def test_the_cli_prints_the_pane_and_incarnation_and_why_connect_is_unavailable(
    fleet: Fleet,
) -> None:
    done = fleet.daemon.cli(
        "launch", "fakeopencode", "--preset", "observe", "--cwd", str(fleet.project), check=True
    )
    first, state, second = done.stdout.strip().splitlines()
    pane, incarnation = first.split(" ")
    assert pane.startswith("%") and incarnation.startswith("inc_")
    assert state.startswith("state: ")
    assert second.startswith("not connected: Connect is unavailable for OpenCode")
    bad = fleet.daemon.cli("launch", "fakeclaude", "--cwd", "/no/such/dir")
    assert bad.returncode == 1 and "(cwd)" in bad.stderr and "Traceback" not in bad.stderr


def _spawn_at(pid: int) -> subprocess.Popen[bytes] | None:
    """A process of our own at ``pid`` (root: the kernel's next pid set just below it)."""
    Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
    process = subprocess.Popen(["sleep", "600"])
    if process.pid == pid:
        return process
    process.kill()
    process.wait()
    return None


@pytest.mark.root
def test_a_recycled_pid_after_a_daemon_restart_does_not_keep_the_token_alive(
    fleet: Fleet,
) -> None:
    launched = fleet.launch("fakeclaude", "observe")
    token = fleet.token_of(launched["pid"])
    assert raw(fleet, token).status_code == 200
    fleet.daemon.stop()
    # the agent exits while the daemon is down, and another process takes over its pid
    os.kill(launched["pid"], signal.SIGKILL)
    wait_until(
        lambda: fleet.tmux.reaped(launched["pid"]), timeout=30, what="the agent's process to go"
    )
    impostor = wait_until(
        lambda: _spawn_at(launched["pid"]), timeout=20, what="a process at the agent's old pid"
    )
    try:
        fleet.daemon = restart_daemon(fleet.daemon)
        try:
            assert raw(fleet, token).status_code == 401
            # bound to its session: suspended (its grant waits for a resume), not deleted
            ended = [r for r in fleet.audit() if r["action"] == "agent.suspended"]
            assert [r["details"]["principal"] for r in ended] == [launched["connect"]["principal"]]
        finally:
            fleet.daemon.stop()
    finally:
        impostor.kill()
        impostor.wait()


def test_the_pool_command_is_sudo_running_the_harness_itself_with_the_named_variables() -> None:
    argv = as_pool_user(["claude", "--x"], user="openbus-agent-2", env_names=["OPENBUS_TOKEN"])
    assert argv[:5] == ["sudo", "--non-interactive", "--set-home", "--user", "openbus-agent-2"]
    keep = next(a for a in argv if a.startswith("--preserve-env="))
    assert "OPENBUS_TOKEN" in keep.split("=", 1)[1].split(",")
    assert argv[argv.index("--") + 1 :] == ["claude", "--x"]


def test_a_connected_gemini_gets_its_session_id_and_a_settings_file_naming_the_endpoint() -> None:
    gemini = builtin_launchers()["gemini"]
    plan = plan_launch(gemini, preset=Preset.OBSERVE, prompt=None, mcp_url=URL, session_id=SID)
    assert plan.connect and plan.session_id == SID
    assert plan.argv == (*gemini.argv, "--session-id", SID)
    assert plan.settings_env == "GEMINI_CLI_SYSTEM_SETTINGS_PATH" and plan.settings is not None
    server = json.loads(plan.settings)["mcpServers"]["openbus"]
    assert server == {
        "httpUrl": URL,
        "headers": {"Authorization": f"Bearer ${TOKEN_ENV}"},
        "trust": True,
    }
    off = plan_launch(gemini, preset=Preset.OFF, prompt=None, mcp_url=URL, session_id=SID)
    assert off.settings is None and not off.connect and off.argv == plan.argv


def test_gemini_settings_are_refused_unless_root_owns_every_directory_and_none_is_shared() -> None:
    good = [("/", 0, 0o40755), ("/var", 0, 0o40755), ("/var/lib/openbus", 0, 0o40700)]
    assert gemini_settings_refusal(good, root=True) is None
    assert "does not run as root" in (gemini_settings_refusal(good, root=False) or "")
    shared = [("/", 0, 0o40755), ("/tmp", 0, 0o41777)]
    assert "/tmp is not (owner uid 0, mode 1777)" in (
        gemini_settings_refusal(shared, root=True) or ""
    )
    mine = [("/", 0, 0o40755), ("/home/ann", 1000, 0o40755)]
    assert "/home/ann is not (owner uid 1000" in (gemini_settings_refusal(mine, root=True) or "")


def test_an_agent_that_dies_at_once_is_reported_failed_with_its_status_and_last_screen(
    tmp_path: Path,
) -> None:
    missing = {"harness": "claude", "argv": ["openbus-no-such-harness"]}
    with make_fleet(tmp_path, {"launchers.missing": missing}) as fleet:
        done = fleet.daemon.cli(
            "launch", "missing", "--preset", "observe", "--cwd", str(fleet.project)
        )
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert "connected" not in done.stdout + done.stderr
        assert "exited at once with status 127" in done.stderr
        assert "cannot start openbus-no-such-harness" in done.stderr  # its last screen
        as_json = fleet.daemon.cli(
            "launch", "missing", "--preset", "observe", "--cwd", str(fleet.project), "--json"
        )
        assert json.loads(as_json.stdout)["error"] == "launch_failed"
        failed = [r for r in fleet.audit() if r["action"] == "launch"]
        assert [(r["outcome"], r["details"]["reason"]) for r in failed] == [
            ("refused", "launch_failed")
        ] * 2
        with fleet.daemon.human() as client:  # no token was committed for it
            assert client.get("/api/connections").json()["connections"] == []
        # the dead pane was read, then closed
        panes = fleet.tmux.run("list-panes", "-a", "-F", "#{pane_dead}").split()
        assert "1" not in panes


def script_agent(path: Path, source: str, **env: str) -> dict[str, Any]:
    """A launcher running the Python ``source`` (written to ``path``) as Claude Code."""
    path.write_text(source)
    return {"harness": "claude", "argv": [sys.executable, str(path)], "env": env}


EARLY_AGENT = """
import json, os, signal, sys, urllib.error, urllib.request
url = json.loads(sys.argv[sys.argv.index("--mcp-config") + 1])["mcpServers"]["openbus"]["url"]
info = {"name": "t", "version": "0"}
hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": info}}
headers = {"Authorization": "Bearer " + os.environ["OPENBUS_TOKEN"],
           "Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
try:
    status = urllib.request.urlopen(
        urllib.request.Request(url, json.dumps(hello).encode(), headers), timeout=60).status
except urllib.error.HTTPError as exc:
    status = exc.code
open(os.environ["ANSWERED"], "w").write(str(status))
signal.pause()  # stays an agent until its pane is killed
"""


def test_an_agent_presenting_its_token_before_its_launch_has_committed_is_answered_once_it_has(
    tmp_path: Path,
) -> None:
    # the launch commits once the directory has seen the pane run Claude Code (or two seconds
    # passed): this agent, not recognisably Claude Code, calls the endpoint well before that,
    # as a restored TUI can while the directory is still catching up with a new tmux server
    answered = tmp_path / "answered"
    early = script_agent(tmp_path / "early.py", EARLY_AGENT, ANSWERED=str(answered))
    with make_fleet(tmp_path, {"launchers.early": early}) as fleet:
        launched = fleet.launch("early", "observe")
        wait_until(answered.exists, timeout=60, what="the agent's first MCP request answered")
        assert answered.read_text() == "200"
        records = [r for r in fleet.audit() if r["action"] == "launch"]
        assert [r["details"]["pid"] for r in records] == [launched["pid"]]


HANGUP_PROOF_AGENT = """
import os, signal, subprocess, sys
signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as Gemini CLI: tmux's hangup does not end it
child = subprocess.Popen([sys.executable, "-c",
    "import signal; signal.signal(signal.SIGHUP, signal.SIG_IGN); signal.pause()"])
open(os.environ["CHILD"], "w").write(str(child.pid))
signal.pause()
"""


@pytest.mark.parametrize("close", [["kill-pane", "-t", "{pane}"], ["kill-server"]])
def test_an_agent_whose_pane_is_closed_while_it_runs_on_loses_its_grant_and_is_ended(
    tmp_path: Path, close: list[str]
) -> None:
    child_file = tmp_path / "child"
    proof = script_agent(tmp_path / "proof.py", HANGUP_PROOF_AGENT, CHILD=str(child_file))
    with make_fleet(tmp_path, {"launchers.proof": proof}) as fleet:
        launched = fleet.launch("proof", "observe")
        token = fleet.token_of(launched["pid"])
        assert raw(fleet, token).status_code == 200
        child = int(wait_until(child_file.read_text, what="the agent's child process"))
        agent, child_start = identity_of(launched["pid"]), identity_of(child)
        assert agent is not None and child_start is not None

        fleet.tmux.run(*(word.format(pane=launched["pane"]) for word in close))
        # the hangup ended neither; the daemon does, and the token is dead from then on
        wait_until(
            lambda: identity_of(agent.pid) != agent and identity_of(child) != child_start,
            timeout=30,
            what="the agent and its child to be ended",
        )
        assert raw(fleet, token).status_code == 401
        # bound to its session: suspended (a resume gives the grant back)
        ended = [r for r in fleet.audit() if r["action"] == "agent.suspended"]
        assert [(r["details"]["principal"], r["details"]["reason"]) for r in ended] == [
            (launched["connect"]["principal"], "its pane was closed; what ran in it is ended")
        ]
