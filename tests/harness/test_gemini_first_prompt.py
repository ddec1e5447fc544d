"""Gemini CLI, every pinned version, takes a launch's first prompt the way ``plan_launch``
gives it to an unconnected interactive launch (``--prompt-interactive=PROMPT``, a leading
``-`` included): the TUI runs it as its first turn and then stays interactive."""

from __future__ import annotations

from pathlib import Path

import pytest

from openbus.daemon.config import Launcher
from openbus.daemon.launch_plan import plan_launch
from openbus.kernel.scopes import Preset
from tests.support.harnesses import Pin, pin_params, workdir
from tests.support.more_harnesses import MARKERS, make_harness
from tests.support.stub_model import StubModel, reply
from tests.support.tmux import TmuxServer

pytestmark = [pytest.mark.harness, pytest.mark.timeout(120)]


@pytest.mark.parametrize("pin", pin_params("gemini"))
def test_the_planned_first_prompt_is_the_tui_s_first_turn_and_it_stays_interactive(
    pin: Pin, tmp_path: Path, stub: StubModel, tmux: TmuxServer
) -> None:
    gemini = make_harness("gemini", tmp_path, stub, workdir(tmp_path), pin.version)
    script = stub.script(reply("STUB-FIRST-TURN-DONE"), match="-first words", api="gemini")
    launcher = Launcher("g", "gemini", tuple(gemini.tui_argv()))
    plan = plan_launch(
        launcher, preset=Preset.OFF, prompt="-first words", mcp_url="http://x/", session_id=None
    )
    pane = tmux.new_window(plan.argv, env=gemini.env(), cwd=gemini.cwd)
    script.wait_finished(timeout=90)
    tmux.wait_for(pane, "STUB-FIRST-TURN-DONE", timeout=30)
    tmux.wait_for(pane, *MARKERS["gemini"].ready, timeout=30)  # still interactive
