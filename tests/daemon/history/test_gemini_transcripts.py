"""Gemini CLI's chat files, as each pinned version writes them against the stub, are found under
its ``.gemini`` dir and read as one history entry each, its cwd from the project's root file."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from openbus.daemon.history.model import GEMINI
from openbus.daemon.history.parse import parse_gemini, resume_argv
from openbus.daemon.history.reconcile import parse_transcript
from openbus.daemon.history.sources import Sources
from tests.support.harnesses import Pin, pin_params, workdir
from tests.support.more_harnesses import make_harness, run_print
from tests.support.stub_model import StubModel, reply

pytestmark = pytest.mark.harness


@pytest.mark.parametrize("pin", pin_params("gemini"))
def test_a_gemini_session_is_found_and_read_with_its_id_cwd_prompt_pr_and_times(
    pin: Pin, tmp_path: Path, stub_model: StubModel
) -> None:
    cwd = workdir(tmp_path)
    harness = make_harness("gemini", tmp_path, stub_model, cwd, pin.version)
    stub_model.script(
        reply("opened https://github.com/acme/widgets/pull/42"), match="index", api="gemini"
    )
    session_id = str(uuid.uuid4())
    run_print(harness, "index this gemini session please", "--session-id", session_id)

    sources = Sources(gemini_dirs=(harness.data_dir,))
    [found] = list(sources.transcripts())
    assert found.harness == GEMINI
    parsed, _ = parse_transcript(found, {})
    assert parsed is not None
    assert parsed.harness == GEMINI and parsed.session_id == session_id
    assert parsed.cwd == str(cwd)
    assert parsed.prompts == ("index this gemini session please",)  # not the injected context
    assert parsed.title == "index this gemini session please"
    assert parsed.prs == ("https://github.com/acme/widgets/pull/42",)
    assert parsed.started is not None and parsed.last_active is not None
    assert parsed.started <= parsed.last_active
    assert not parsed.subagent
    assert sources.find_transcript(GEMINI, session_id) == found
    assert sources.find_transcript(GEMINI, session_id[:8] + "-0000-4000-8000-000000000000") is None
    assert resume_argv(GEMINI, session_id, subagent=False) == ("gemini", "--resume", session_id)


def test_a_gemini_file_without_a_header_line_is_no_session() -> None:
    assert parse_gemini(['{"type":"user","content":"x"}', "not json"], cwd=None) is None
