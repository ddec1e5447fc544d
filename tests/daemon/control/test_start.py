"""Which launchers can run control: connected (for its tools) and given the charter as a
first prompt; any other is refused at start, naming why."""

from __future__ import annotations

from openbus.daemon.config import Launcher
from openbus.daemon.control.service import control_unfit


def test_structured_claude_code_and_codex_launchers_can_run_control() -> None:
    assert control_unfit(Launcher("boss", "claude", ("claude",))) is None
    assert control_unfit(Launcher("boss", "codex", ("codex",))) is None


def test_an_opaque_command_or_a_harness_without_a_first_prompt_cannot() -> None:
    opaque = control_unfit(Launcher("boss", "claude", command="claude --foo"))
    assert opaque is not None and "opaque" in opaque.lower()
    gemini = control_unfit(Launcher("boss", "gemini", ("gemini",)))
    assert gemini == "gemini takes no first prompt, which carries control's charter"
    assert control_unfit(Launcher("boss", "opencode", ("opencode",))) is not None
