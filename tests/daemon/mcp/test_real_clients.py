"""The real Claude Code and Codex, launched through ``openbus launch`` into tmux against the stub
model, call ``list_panes`` and ``find_sessions``: the calls reach the daemon, are audited with
the right actor and return data."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import RunningDaemon, running_daemon
from tests.support.harnesses import (
    CLAUDE_IDLE,
    ClaudeHarness,
    CodexHarness,
    make_claude,
    make_codex,
)
from tests.support.stub_model import StubModel, call_tool, hold, reply
from tests.support.tmux import TmuxServer
from tests.support.wait import wait_until

pytestmark = [pytest.mark.harness, pytest.mark.timeout(180)]

SCRIPT_WORD = "openbus-fleet-check"


def calls(stub: StubModel, *extra: Any) -> Any:
    return stub.script(
        call_tool("mcp__openbus__list_panes", {}),
        call_tool("mcp__openbus__find_sessions", {"query": "widget"}),
        *extra,
        reply("FLEET-CHECKED {tool_result}"),
        match=SCRIPT_WORD,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(
        ["git", "-C", str(path), "remote", "add", "origin", "git@github.com:acme/widget.git"],
        check=True,
    )
    return path


def daemon_with(tmp_path: Path, tmux: TmuxServer, launchers: dict[str, dict[str, Any]]) -> Any:
    extra: dict[str, dict[str, Any]] = {"tmux": {"socket": str(tmux.socket)}}
    for name, values in launchers.items():
        extra[f"launchers.{name}"] = values
    (tmp_path / "d").mkdir(exist_ok=True)
    return running_daemon(tmp_path / "d", extra)


def launch(daemon: RunningDaemon, launcher: str, cwd: Path, prompt: str | None) -> dict[str, Any]:
    args = ["launch", launcher, "--preset", "observe", "--cwd", str(cwd), "--json"]
    if prompt is not None:
        args += ["--prompt", prompt]
    done = daemon.cli(*args, check=True, timeout=150)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def audit(daemon: RunningDaemon) -> list[dict[str, Any]]:
    return daemon.audit()


def agent_calls(daemon: RunningDaemon, prefix: str) -> list[tuple[str, str, str]]:
    return [
        (r["actor"], r["action"], r["outcome"])
        for r in audit(daemon)
        if r["actor"].startswith(prefix) and r["action"] in ("directory.list", "history.search")
    ]


def claude_launcher(claude: ClaudeHarness, *argv: str) -> dict[str, Any]:
    env = {k: v for k, v in claude.env().items() if k not in ("PATH",)}
    env["PATH"] = claude.env()["PATH"]
    return {"harness": "claude", "argv": [str(claude.binary), *argv], "env": env}


def test_claude_print_mode_launched_with_observe_lists_the_fleet_and_finds_sessions(
    tmp_path: Path, stub: StubModel, project: Path, tmux: TmuxServer
) -> None:
    claude = make_claude(tmp_path / "c", stub, project)
    script = calls(stub)
    with daemon_with(tmp_path, tmux, {"claudep": claude_launcher(claude, "-p")}) as daemon:
        launched = launch(daemon, "claudep", project, f"please run {SCRIPT_WORD}")
        actor = launched["connect"]["actor"]
        assert actor == f"agent:claude:{launched['connect']['session_id']}"
        script.wait_finished(timeout=90)
        got = wait_until(
            lambda: len(agent_calls(daemon, actor)) >= 2 and agent_calls(daemon, actor), timeout=30
        )
        assert got == [(actor, "directory.list", "ok"), (actor, "history.search", "ok")]
        assert any(
            '"source": "openbus directory"' in r or "openbus directory" in r
            for r in script.tool_results
        )
        offered = [
            t
            for req in stub.turns("anthropic")
            for t in req.offered_tools
            if t.startswith("mcp__openbus__")
        ]
        assert {"mcp__openbus__list_panes", "mcp__openbus__find_sessions"} <= set(offered)


def test_claude_tui_launched_with_observe_calls_the_tools_without_asking_the_human(
    tmp_path: Path, stub: StubModel, project: Path, tmux: TmuxServer
) -> None:
    claude = make_claude(tmp_path / "c", stub, project)
    script = calls(stub)
    with daemon_with(tmp_path, tmux, {"claudetui": claude_launcher(claude)}) as daemon:
        # the prompt is typed by the launch once Claude Code has listed its openbus tools (a
        # prompt typed at the first idle screen can beat the MCP server's loading)
        launched = launch(daemon, "claudetui", project, f"please run {SCRIPT_WORD}")
        actor = launched["connect"]["actor"]
        assert launched["prompt"] == "typed"
        # The turn's final text is the stub's business; what matters here is that both calls
        # ran without a permission prompt (the pane shows them done, no "Do you want to proceed?").
        tmux.wait_for(launched["pane"], "Called openbus 2 times", CLAUDE_IDLE, timeout=90)
        try:
            got = wait_until(
                lambda: len(agent_calls(daemon, actor)) >= 2 and agent_calls(daemon, actor),
                timeout=30,
            )
        except AssertionError:
            raise AssertionError(
                repr(script.tool_results)
                + json.dumps(
                    [
                        (r["actor"], r["action"], r["outcome"], r["details"])
                        for r in audit(daemon)
                        if r["action"] != "audit.read"
                    ],
                    indent=1,
                )
            ) from None
        assert [a for _, a, _ in got] == ["directory.list", "history.search"]
        tmux.kill_pane(launched["pane"])
        wait_until(  # bound to its session, its grant is suspended (a resume brings it back)
            lambda: any(r["action"] == "agent.suspended" for r in audit(daemon)),
            timeout=15,
            what="the exit suspension",
        )


def codex_launcher(codex: CodexHarness) -> dict[str, Any]:
    return {
        "harness": "codex",
        "argv": [str(codex.binary), "exec", "--skip-git-repo-check"],
        "env": codex.env(),
    }


def test_codex_exec_launched_with_observe_calls_the_tools_and_gets_bound_to_its_session(
    tmp_path: Path, stub: StubModel, project: Path, tmux: TmuxServer
) -> None:
    codex = make_codex(tmp_path / "x", stub, project)
    script = calls(stub, hold())
    with daemon_with(tmp_path, tmux, {"codexexec": codex_launcher(codex)}) as daemon:
        launched = launch(daemon, "codexexec", project, f"please run {SCRIPT_WORD}")
        assert launched["connect"]["connected"] and launched["connect"]["session_id"] is None
        script.wait_holding(timeout=90)
        got = wait_until(
            lambda: (
                len(agent_calls(daemon, "agent:codex:")) >= 2
                and agent_calls(daemon, "agent:codex:")
            ),
            timeout=30,
        )
        assert [a for _, a, o in got] == ["directory.list", "history.search"]
        bound = wait_until(
            lambda: [r for r in audit(daemon) if r["action"] == "agent.bind"],
            timeout=30,
            what="the Codex session binding",
        )
        session_id = bound[-1]["details"]["session_id"]
        rollouts = codex.rollouts()
        assert any(session_id in path.name for path in rollouts)
        assert bound[-1]["details"]["from"].startswith(f"agent:codex:pane:{launched['pane']}:")
        script.release()
        script.wait_finished(timeout=60)


def test_the_readme_launch_example_types_its_prompt_once_claude_listed_the_openbus_tools(
    tmp_path: Path, stub: StubModel, project: Path, tmux: TmuxServer
) -> None:
    """`openbus launch claude --preset observe --prompt "list the fleet"`: the model's first
    request already offers the openbus tools (the prompt waited for Claude Code's tools/list)."""
    claude = make_claude(tmp_path / "c", stub, project)
    script = stub.script(reply("FLEET-LISTED"), match="list the fleet")
    launcher = {"harness": "claude", "argv": ["claude"], "env": claude.env()}
    with daemon_with(tmp_path, tmux, {"claude": launcher}) as daemon:
        done = daemon.cli(
            "launch",
            "claude",
            "--preset",
            "observe",
            "--prompt",
            "list the fleet",
            "--cwd",
            str(project),
            timeout=150,
            check=True,
        )
        first, state, connected, prompt = done.stdout.strip().splitlines()
        pane, incarnation = first.split(" ")
        assert incarnation.startswith("inc_") and state == "state: idle"
        assert connected.startswith("connected: observe as agent:claude:")
        assert prompt == "prompt: typed"
        script.wait_finished(timeout=60)
        turns = [t for t in stub.turns("anthropic") if "list the fleet" in t.prompt]
        assert turns, "the prompt never reached the model"
        assert "mcp__openbus__list_panes" in turns[0].offered_tools
        assert [r["action"] for r in audit(daemon) if r["action"].startswith("launch")] == [
            "launch",
            "launch.prompt",
        ]
        tmux.kill_pane(pane)
