"""The real Claude Code and Codex CLIs run against the stub model in private tmux panes.

These prove the test infrastructure other tests build on: the seeded config homes get each TUI
straight to its prompt, the stub's scripts drive turns (held busy, tool calls, replies), and
the MCP wiring (token from the environment, never argv) reaches a server.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.harnesses import (
    CLAUDE_BUSY,
    CLAUDE_IDLE,
    CLAUDE_PERMISSION,
    CODEX_BUSY,
    CODEX_IDLE,
    ClaudeHarness,
    CodexHarness,
    answer_dialog,
    make_codex,
    submit_prompt,
    wait_for_codex_ready,
    workdir,
)
from tests.support.stub_model import StubModel, call_tool, hold, reply
from tests.support.tmux import TmuxServer
from tests.support.wait import wait_until

pytestmark = [pytest.mark.harness, pytest.mark.timeout(90)]

MCP_TOKEN = "obtest-secret-token-0123456789"


def test_claude_tui_idles_then_a_typed_prompt_runs_a_turn_held_busy_by_the_stub(
    claude: ClaudeHarness, stub_model: StubModel, harness_tmux: TmuxServer
) -> None:
    pane = harness_tmux.new_window(claude.tui_argv(), claude.env(), claude.cwd, remain_on_exit=True)
    harness_tmux.wait_for(pane, CLAUDE_IDLE)

    turn = stub_model.script(hold(), reply("STUB-REPLY held then released"), match="slow turn")
    submit_prompt(harness_tmux, pane, "hello slow turn please")
    turn.wait_holding()
    busy = harness_tmux.wait_for(pane, CLAUDE_BUSY)
    assert CLAUDE_IDLE not in busy
    wait_until(
        lambda: [s for s in claude.live_status() if s.get("status") == "busy"],
        what="the live status file to say busy",
    )

    turn.release()
    done = harness_tmux.wait_for(pane, "STUB-REPLY held then released", CLAUDE_IDLE)
    assert "❯ hello slow turn please" in done
    assert [r.prompt for r in stub_model.turns("anthropic")] == ["hello slow turn please"]
    titles = [r for r in stub_model.requests if r.kind == "title"]
    if claude.version == "2.1.197":  # later versions name the session without a side call
        assert titles, "the TUI asks for a session title as JSON"


def test_claude_tui_asks_permission_for_an_mcp_tool_whose_token_comes_from_the_environment(
    claude: ClaudeHarness, stub_model: StubModel, harness_tmux: TmuxServer
) -> None:
    stub_model.mcp_token = MCP_TOKEN
    argv = claude.tui_argv(*claude.mcp_args("stubmcp", stub_model.mcp_url, "STUB_MCP_TOKEN"))
    assert MCP_TOKEN not in " ".join(argv)
    pane = harness_tmux.new_window(
        argv, claude.env(STUB_MCP_TOKEN=MCP_TOKEN), claude.cwd, remain_on_exit=True
    )
    harness_tmux.wait_for(pane, CLAUDE_IDLE)
    # The TUI idles before its MCP servers are connected; a prompt typed earlier finds no tool.
    wait_until(
        lambda: stub_model.mcp_calls("tools/list"), timeout=30, what="Claude to list MCP tools"
    )

    turn = stub_model.script(
        call_tool("mcp__stubmcp__echo", {"text": "from-claude"}),
        reply("STUB-FINAL: tool returned: {tool_result}"),
        match="run echo",
    )
    submit_prompt(harness_tmux, pane, "please run echo")
    menu = harness_tmux.wait_for(pane, CLAUDE_PERMISSION, "1. Yes")
    assert "echo" in menu
    wait_until(
        lambda: [s for s in claude.live_status() if s.get("status") == "waiting"],
        what="the live status file to say waiting",
    )

    answer_dialog(harness_tmux, pane, CLAUDE_PERMISSION)
    harness_tmux.wait_for(pane, "STUB-FINAL: tool returned: echo: from-claude", CLAUDE_IDLE)
    turn.wait_finished()
    assert turn.tool_results == ["echo: from-claude"]
    offered = stub_model.turns("anthropic")[0].offered_tools
    if claude.version == "2.1.197":
        assert "mcp__stubmcp__echo" in offered
    else:  # later versions may hold MCP tools back behind a tool search; the call ran all same
        assert "mcp__stubmcp__echo" in offered or any("search" in t.lower() for t in offered), (
            offered
        )
    calls = stub_model.mcp_calls("tools/call")
    assert [c.headers.get("authorization") for c in calls] == [f"Bearer {MCP_TOKEN}"]


def test_claude_print_mode_answers_and_round_trips_an_allowed_mcp_tool(
    claude: ClaudeHarness, stub_model: StubModel
) -> None:
    stub_model.script(reply("STUB-REPLY plain"), match="say something")
    done = subprocess.run(
        claude.print_argv("say something"),
        env=claude.env(),
        cwd=claude.cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "STUB-REPLY plain"), done.stderr

    stub_model.mcp_token = MCP_TOKEN
    stub_model.script(
        call_tool("mcp__stubmcp__echo", {"text": "printed"}),
        reply("STUB-FINAL: {tool_result}"),
        match="run echo",
    )
    mcp = claude.mcp_args("stubmcp", stub_model.mcp_url, "STUB_MCP_TOKEN", allow=True)
    done = subprocess.run(
        claude.print_argv("please run echo", *mcp),
        env=claude.env(STUB_MCP_TOKEN=MCP_TOKEN),
        cwd=claude.cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "STUB-FINAL: echo: printed"), done.stderr


def test_codex_tui_idles_then_a_typed_prompt_runs_a_turn_held_busy_by_the_stub(
    codex: CodexHarness, stub_model: StubModel, harness_tmux: TmuxServer
) -> None:
    pane = harness_tmux.new_window(codex.tui_argv(), codex.env(), codex.cwd, remain_on_exit=True)
    wait_for_codex_ready(harness_tmux, pane)

    turn = stub_model.script(hold(), reply("STUB-REPLY codex released"), match="slow turn")
    submit_prompt(harness_tmux, pane, "hello codex slow turn")
    turn.wait_holding()
    harness_tmux.wait_for(pane, "Working", CODEX_BUSY)

    turn.release()
    harness_tmux.wait_for(pane, "STUB-REPLY codex released", "Worked for", CODEX_IDLE)
    assert [r.prompt for r in stub_model.turns("openai")] == ["hello codex slow turn"]


def test_codex_tui_asks_approval_for_an_mcp_tool_whose_token_comes_from_the_environment(
    codex: CodexHarness, stub_model: StubModel, harness_tmux: TmuxServer
) -> None:
    stub_model.mcp_token = MCP_TOKEN
    argv = codex.tui_argv(*codex.mcp_args("stubmcp", stub_model.mcp_url, "STUB_MCP_TOKEN"))
    assert MCP_TOKEN not in " ".join(argv)
    pane = harness_tmux.new_window(
        argv, codex.env(STUB_MCP_TOKEN=MCP_TOKEN), codex.cwd, remain_on_exit=True
    )
    wait_for_codex_ready(harness_tmux, pane)

    turn = stub_model.script(
        call_tool("mcp__stubmcp__echo", {"text": "from-codex"}),
        reply("STUB-FINAL: {tool_result}"),
        match="run echo",
    )
    submit_prompt(harness_tmux, pane, "please run echo")
    harness_tmux.wait_for(pane, 'Allow the stubmcp MCP server to run tool "echo"?', "1. Allow")
    harness_tmux.keys(pane, "Enter")
    turn.wait_finished()
    harness_tmux.wait_for(pane, "Called stubmcp.echo", "Worked for", CODEX_IDLE)
    assert turn.last_tool_result is not None
    assert turn.last_tool_result.endswith("echo: from-codex")
    assert "mcp__stubmcp__echo" in stub_model.turns("openai")[0].offered_tools
    calls = stub_model.mcp_calls("tools/call")
    assert [c.headers.get("authorization") for c in calls] == [f"Bearer {MCP_TOKEN}"]


def test_codex_exec_answers_and_calls_an_mcp_tool_approved_in_config(
    codex: CodexHarness, stub_model: StubModel
) -> None:
    stub_model.mcp_token = MCP_TOKEN
    stub_model.script(
        call_tool("mcp__stubmcp__echo", {"text": "exec"}),
        reply("STUB-FINAL: {tool_result}"),
        match="run echo",
    )
    mcp = codex.mcp_args("stubmcp", stub_model.mcp_url, "STUB_MCP_TOKEN", approval="approve")
    done = subprocess.run(
        codex.exec_argv("please run echo", *mcp),
        env=codex.env(STUB_MCP_TOKEN=MCP_TOKEN),
        cwd=codex.cwd,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("STUB-FINAL: Wall time:")
    assert done.stdout.strip().endswith("echo: exec")
    assert [c.body["method"] for c in stub_model.mcp_calls() if isinstance(c.body, dict)][:3] == [
        "initialize",
        "notifications/initialized",
        "tools/list",
    ]
    assert codex.rollouts(), "codex exec writes a rollout transcript"


def test_codex_with_paste_burst_disabled_submits_a_long_prompt_sent_with_enter_at_once(
    tmp_path: Path, stub_model: StubModel, harness_tmux: TmuxServer
) -> None:
    codex = make_codex(tmp_path, stub_model, workdir(tmp_path), disable_paste_burst=True)
    pane = harness_tmux.new_window(codex.tui_argv(), codex.env(), codex.cwd, remain_on_exit=True)
    wait_for_codex_ready(harness_tmux, pane)
    text = "a long prompt, well past forty characters, typed and sent at once"
    harness_tmux.run("send-keys", "-t", pane, "-l", text, ";", "send-keys", "-t", pane, "Enter")
    wait_until(lambda: stub_model.turns("openai"), what="the prompt to reach the model")
    assert stub_model.turns("openai")[0].prompt == text
