"""omp's session files, as each pinned version writes them against the stub, are found under its
agent dir and read as one history entry each."""

from __future__ import annotations

from pathlib import Path

import pytest

from openbus.daemon.history.model import OMP
from openbus.daemon.history.parse import parse_omp, resume_argv
from openbus.daemon.history.sources import Sources
from tests.support.harnesses import Pin, pin_params, workdir
from tests.support.more_harnesses import make_harness, run_print
from tests.support.stub_model import StubModel, reply

pytestmark = pytest.mark.harness


@pytest.mark.parametrize("pin", pin_params("omp"))
def test_an_omp_session_is_found_and_read_with_its_id_cwd_prompt_pr_and_times(
    pin: Pin, tmp_path: Path, stub_model: StubModel
) -> None:
    cwd = workdir(tmp_path)
    harness = make_harness("omp", tmp_path, stub_model, cwd, pin.version)
    stub_model.script(reply("opened https://github.com/acme/widgets/pull/42"), match="index")
    run_print(harness, "index this omp session please")

    sources = Sources(omp_dirs=(harness.data_dir,))
    [found] = list(sources.transcripts())
    assert found.harness == OMP
    parsed = parse_omp(found.path.read_text().splitlines())
    assert parsed is not None
    assert found.path.name.endswith(f"_{parsed.session_id}.jsonl")
    assert parsed.cwd == str(cwd)
    assert parsed.prompts == ("index this omp session please",)
    assert parsed.title == "index this omp session please"
    assert parsed.prs == ("https://github.com/acme/widgets/pull/42",)
    assert parsed.started is not None and parsed.last_active is not None
    assert parsed.started <= parsed.last_active
    assert not parsed.subagent
    assert sources.find_transcript(OMP, parsed.session_id) == found
    assert resume_argv(OMP, parsed.session_id, subagent=False) == (
        "omp",
        "--resume",
        parsed.session_id,
    )


def test_an_omp_file_without_a_session_line_is_no_session() -> None:
    assert parse_omp(['{"type":"title","title":"x"}', "not json"]) is None
