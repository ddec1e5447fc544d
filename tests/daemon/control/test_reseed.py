"""Re-seed with the real daemon: a control session whose transcript shows its context past
``[control] reseed_tokens`` is closed and started again, fresh, in tmux session ``control``
with the charter; the restart is a ``control.reseed`` audit record and a line in control's
thread. (The control pane is the fake Claude Code TUI; its transcript is written where Claude
Code writes it, under the launcher's ``CLAUDE_CONFIG_DIR``.)"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon.control.charter import MARK
from tests.daemon.messaging.conftest import FAKE_AGENT
from tests.support.daemon import RunningDaemon, running_daemon
from tests.support.tmux import TmuxServer
from tests.support.wait import wait_until

pytestmark = pytest.mark.timeout(120)


def cli_json(daemon: RunningDaemon, *args: str) -> Any:
    return json.loads(daemon.cli(*args, "--json", check=True, timeout=90).stdout)


def fake_control(tmp_path: Path, tmux: TmuxServer, limit: int) -> dict[str, dict[str, Any]]:
    """The daemon's config: control is the fake Claude Code TUI, its transcripts under
    ``<tmp>/claude-config``, re-seeded past ``limit`` tokens."""
    script = tmp_path / "agent" / "bin" / "claude"
    script.parent.mkdir(parents=True)
    shutil.copy(FAKE_AGENT, script)
    received = tmp_path / "agent" / "control"
    received.mkdir()
    (tmp_path / "d").mkdir()
    return {
        "tmux": {"socket": str(tmux.socket)},
        "history": {"claude_config_dirs": [], "codex_homes": []},
        "launchers.boss": {
            "harness": "claude",
            "argv": [sys.executable, str(script), str(received)],
            "env": {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude-config")},
            "cwd": str(tmp_path),
        },
        "control": {"launcher": "boss", "reseed_tokens": limit},
    }


def write_transcript(tmp_path: Path, session: str, *contexts: int) -> None:
    transcript = tmp_path / "claude-config" / "projects" / "-somewhere" / f"{session}.jsonl"
    transcript.parent.mkdir(parents=True, exist_ok=True)
    with transcript.open("a") as handle:
        for tokens in contexts:
            usage = {"input_tokens": 40, "cache_read_input_tokens": tokens - 40}
            line = {"type": "assistant", "message": {"usage": usage, "content": []}}
            handle.write(json.dumps(line) + "\n")


def audit_of(daemon: RunningDaemon, action: str) -> list[Any]:
    return [r for r in daemon.audit() if r["action"] == action]


def recorded(daemon: RunningDaemon, action: str) -> tuple[Any, str]:
    """The one ``action`` record, once it is there, and the last line of control's thread."""
    [record] = wait_until(lambda: audit_of(daemon, action), timeout=30, what=action)
    with daemon.human() as client:
        thread = client.get("/api/threads", params={"thread": "control"}).json()
    return record, str(thread["entries"][-1]["text"])


def test_a_control_whose_first_request_is_past_the_limit_is_kept_and_its_thread_told(
    tmp_path: Path, tmux: TmuxServer
) -> None:
    with running_daemon(tmp_path / "d", fake_control(tmp_path, tmux, 100)) as daemon:
        first = cli_json(daemon, "control", "start")
        write_transcript(tmp_path, first["connect"]["session_id"], 440, 900)
        told, line = recorded(daemon, "control.too_large")
        assert "440 tokens" in told["details"]["reason"]
        assert "not re-seeded for size" in line
        assert audit_of(daemon, "control.reseed") == []
        assert cli_json(daemon, "control", "start")["pane"] == first["pane"]


def test_a_control_whose_context_passes_the_limit_is_restarted_fresh(
    tmp_path: Path, tmux: TmuxServer
) -> None:
    with running_daemon(tmp_path / "d", fake_control(tmp_path, tmux, 1000)) as daemon:
        first = cli_json(daemon, "control", "start")
        session = first["connect"]["session_id"]
        write_transcript(tmp_path, session, 440)
        assert cli_json(daemon, "control", "start")["started"] is False  # under the limit

        write_transcript(tmp_path, session, 4040)
        record, line = recorded(daemon, "control.reseed")
        assert "4040 tokens" in record["details"]["reason"]
        assert "re-seeded" in line

        def new_control() -> Any:
            panes = cli_json(daemon, "directory")["panes"]
            return next((p for p in panes if p.get("control") and p["pane"] != first["pane"]), None)

        fresh = wait_until(new_control, timeout=30, what="a fresh control pane")
        assert fresh["session"] == "control"
        assert all(p["pane"] != first["pane"] for p in cli_json(daemon, "directory")["panes"])
        # seeded with the charter again: its launch carries the charter as its first prompt
        # (a connected TUI has it typed once it lists its tools, so it is not in the argv)
        starts = [
            r
            for r in daemon.audit()
            if r["action"] == "control.start" and r["details"].get("started")
        ]
        assert len(starts) == 2 and starts[-1]["details"]["prompt_chars"] >= len(MARK)
        assert starts[-1]["details"]["pane"] == fresh["pane"]
