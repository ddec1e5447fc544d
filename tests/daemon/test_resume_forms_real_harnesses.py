"""The resume forms openbus offers for omp and Gemini CLI, run with the real CLIs (each pin)
against the stub model.

A session is resumed by its full id, never by "latest" or a list index: a newer session in the
same project (the one "latest" or index 1 would now pick) is left alone. The arguments are the
ones ``plan_resume`` builds from a structured launcher, run in the CLI's one-prompt mode so the
run ends by itself.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from openbus.daemon.config import Launcher
from openbus.daemon.history.parse import parse_omp
from openbus.daemon.history.sources import Sources
from openbus.daemon.launch_plan import plan_resume, resume_unavailable
from openbus.kernel.scopes import Preset
from tests.support.harnesses import Pin, pin_params, workdir
from tests.support.more_harnesses import Harness, make_harness, run_print
from tests.support.stub_model import StubModel, reply

pytestmark = pytest.mark.harness


def resumed_turn_history(harness: Harness, stub: StubModel, session_id: str) -> str:
    """Resume ``session_id`` through openbus's plan (launcher Off), send one prompt, and return
    the request the model got for it (the whole conversation the CLI sent, as text)."""
    launcher = Launcher(name="agent", harness=harness.name, argv=tuple(harness.command))
    assert resume_unavailable(launcher) is None
    plan = plan_resume(launcher, session_id=session_id, preset=Preset.OFF, mcp_url="")
    command = tuple(harness.command)
    assert plan.argv == (*command, "--resume", session_id)
    api = "gemini" if harness.name == "gemini" else None
    stub.script(reply("RESUMED-OK"), match="THIRD-PROMPT", api=api)
    done = run_print(harness, "THIRD-PROMPT says the resumed one", *plan.argv[len(command) :])
    assert "RESUMED-OK" in done.stdout
    [turn] = [t for t in stub.turns() if "THIRD-PROMPT" in t.prompt]
    return str(turn.body)


@pytest.mark.parametrize("pin", pin_params("gemini"))
def test_a_gemini_session_is_resumed_by_its_id_past_a_newer_session(
    pin: Pin, tmp_path: Path, stub: StubModel
) -> None:
    harness = make_harness("gemini", tmp_path, stub, workdir(tmp_path), pin.version)
    first, newer = str(uuid.uuid4()), str(uuid.uuid4())
    stub.script(reply("ok one"), match="FIRST-PROMPT", api="gemini")
    run_print(harness, "FIRST-PROMPT of the old session", "--session-id", first)
    stub.script(reply("ok two"), match="NEWER-PROMPT", api="gemini")
    run_print(harness, "NEWER-PROMPT of the latest session", "--session-id", newer)

    history = resumed_turn_history(harness, stub, first)
    assert "FIRST-PROMPT" in history and "NEWER-PROMPT" not in history


@pytest.mark.parametrize("pin", pin_params("omp"))
def test_an_omp_session_is_resumed_by_its_id_past_a_newer_session(
    pin: Pin, tmp_path: Path, stub: StubModel
) -> None:
    harness = make_harness("omp", tmp_path, stub, workdir(tmp_path), pin.version)
    stub.script(reply("ok one"), match="FIRST-PROMPT")
    run_print(harness, "FIRST-PROMPT of the old session")
    stub.script(reply("ok two"), match="NEWER-PROMPT")
    run_print(harness, "NEWER-PROMPT of the latest session")
    ids = {}
    for found in Sources(omp_dirs=(harness.data_dir,)).transcripts():
        parsed = parse_omp(found.path.read_text().splitlines())
        assert parsed is not None
        ids[parsed.prompts[0].split()[0]] = parsed.session_id
    assert set(ids) == {"FIRST-PROMPT", "NEWER-PROMPT"}

    history = resumed_turn_history(harness, stub, ids["FIRST-PROMPT"])
    assert "FIRST-PROMPT" in history and "NEWER-PROMPT" not in history
