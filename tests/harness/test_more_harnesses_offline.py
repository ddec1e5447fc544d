"""OpenCode, omp and Gemini CLI, every pinned version, run a full turn against the stub model
with no network beyond 127.0.0.1."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.harnesses import Pin, pin_params, workdir
from tests.support.more_harnesses import make_harness
from tests.support.stub_model import StubModel, reply

pytestmark = pytest.mark.harness

API = {"opencode": "chat", "omp": "chat", "gemini": "gemini"}


@pytest.mark.parametrize("pin", pin_params("opencode", "omp", "gemini"))
def test_a_one_shot_prompt_gets_the_stub_reply_over_the_harness_s_own_wire_protocol(
    pin: Pin, tmp_path: Path, stub_model: StubModel
) -> None:
    harness = make_harness(pin.name, tmp_path, stub_model, workdir(tmp_path), pin.version)  # type: ignore[arg-type]
    stub_model.script(reply("STUB-REPLY: offline turn"), match="hello offline")
    done = subprocess.run(
        harness.print_argv("hello offline please"),
        env=harness.env(),
        cwd=harness.cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "STUB-REPLY: offline turn" in done.stdout
    turns = stub_model.turns(API[pin.name])  # type: ignore[arg-type]
    # ``opencode run`` quotes a message that has spaces in it
    assert [t.prompt.strip('"') for t in turns] == ["hello offline please"]
    assert all(r.kind != "other" for r in stub_model.requests), [
        (r.method, r.path) for r in stub_model.requests if r.kind == "other"
    ]
