"""The documented hooks snippet with the real Claude Code, and a real Codex rollout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from openbus.daemon.history.index import HistoryIndex
from openbus.daemon.history.sources import Sources
from openbus.kernel.clock import SystemClock
from tests.support.daemon import running_daemon
from tests.support.harnesses import MANUAL_MODE, ClaudeHarness, CodexHarness
from tests.support.stub_model import StubModel, reply

pytestmark = pytest.mark.harness

DOC = Path(__file__).resolve().parents[3] / "docs" / "history-hooks.md"


def _snippet(command: str) -> dict[str, object]:
    """The settings.json snippet from docs/history-hooks.md, with our command in it."""
    text = DOC.read_text()
    block = text.split("```json", 1)[1].split("```", 1)[0]
    settings = json.loads(block)
    for groups in settings["hooks"].values():
        for group in groups:
            for hook in group["hooks"]:
                assert hook["command"] == "openbus history push"
                hook["command"] = command
    return settings


def test_the_documented_hooks_index_a_real_claude_print_session_as_it_ends(
    tmp_path: Path, claude: ClaudeHarness, stub_model: StubModel
) -> None:
    history = {"claude_config_dirs": [str(claude.config_dir)], "codex_homes": []}
    with running_daemon(tmp_path, {"history": history}) as daemon:
        command = (
            f"{sys.executable} -m openbus.daemon.cli history push --config {daemon.config_path}"
        )
        (claude.config_dir / "settings.json").write_text(
            json.dumps({**MANUAL_MODE, **_snippet(command)})
        )
        stub_model.script(reply("done, see https://github.com/acme/app/pull/31"), match="marmalade")
        done = subprocess.run(
            claude.print_argv("rename the marmalade module"),
            env=claude.env(),
            cwd=claude.cwd,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        with daemon.human() as human:
            pushes = [r for r in daemon.audit() if r["action"] == "history.push"]
            assert pushes and all(r["outcome"] == "ok" for r in pushes), pushes
            found = human.get("/api/history/search", params={"q": "marmalade"}).json()
    [hit] = found["results"]
    assert hit["prompts"] == ["rename the marmalade module"]
    assert hit["cwd"] == str(claude.cwd.resolve())
    assert hit["prs"] == ["https://github.com/acme/app/pull/31"]
    assert hit["resume_argv"] == ["claude", "--resume", hit["session_id"]]
    assert pushes[-1]["target"] == f"claude:{hit['session_id']}"


def test_a_real_codex_exec_rollout_is_found_by_reconcile(
    tmp_path: Path, codex: CodexHarness, stub_model: StubModel
) -> None:
    done = subprocess.run(
        codex.exec_argv("tidy the quince importer"),
        env=codex.env(),
        cwd=codex.cwd,
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    index = HistoryIndex(
        tmp_path / "history.db", Sources((), (codex.codex_home,)), clock=SystemClock()
    )
    try:
        assert index.reconcile().indexed == 1
        [hit] = index.search("quince")
        assert hit.entry.harness == "codex"
        assert hit.entry.prompts == ("tidy the quince importer",)
        assert hit.entry.resume_argv == ("codex", "resume", hit.entry.session_id)
    finally:
        index.close()
