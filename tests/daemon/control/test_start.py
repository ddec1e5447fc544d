"""Which launchers can run control: connected (for its tools) and given the charter as a
first prompt; any other is refused at start, naming why."""

from __future__ import annotations

from openbus.daemon.config import Launcher
from openbus.daemon.control.service import control_unfit


def test_structured_claude_code_codex_and_gemini_cli_launchers_can_run_control() -> None:
    assert control_unfit(Launcher("boss", "claude", ("claude",))) is None
    assert control_unfit(Launcher("boss", "codex", ("codex",))) is None
    assert control_unfit(Launcher("boss", "gemini", ("gemini",))) is None


def test_an_opaque_command_a_harness_that_cannot_connect_or_a_one_shot_run_cannot() -> None:
    opaque = control_unfit(Launcher("boss", "claude", command="claude --foo"))
    assert opaque is not None and "opaque" in opaque.lower()
    opencode = control_unfit(Launcher("boss", "opencode", ("opencode",)))
    assert opencode is not None and "OpenCode" in opencode
    for argv in (("claude", "-p"), ("codex", "exec"), ("gemini", "-p", "hi")):
        one = control_unfit(Launcher("boss", argv[0], argv))
        assert one is not None and "one-shot" in one
