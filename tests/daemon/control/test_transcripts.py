"""Control's transcript, found by its session id and read as it grows: Claude Code's JSONL
under its config dir, Codex's rollout under its home (a real Codex rollout's records), Gemini
CLI's chat file under its home."""

from __future__ import annotations

import json
from pathlib import Path

from openbus.daemon.config import Launcher
from openbus.daemon.control.reseed import TranscriptFollower
from openbus.daemon.grants import CONTROL_ROLE, Principal
from openbus.kernel.scopes import Preset

ROLLOUT = Path(__file__).parents[1] / "history" / "data" / "codex-interactive-rollout.jsonl"
SESSION = "01a22b31-0cef-7aa2-8a25-ebb9968b60fa"  # the rollout's session_meta id


def control(harness: str, session_id: str | None) -> Principal:
    return Principal(
        id="p_control",
        harness=harness,
        launcher="boss",
        owner="alice",
        session_id=session_id,
        pane_id="%1",
        pid=None,
        pid_start=None,
        incarnation="inc_1",
        preset=Preset.COLLABORATE,
        state="active",
        created=0.0,
        updated=0.0,
        role=CONTROL_ROLE,
    )


def test_a_codex_controls_rollout_is_found_under_its_home_and_its_token_counts_read(
    tmp_path: Path,
) -> None:
    home = tmp_path / "codex-home"
    launcher = Launcher("boss", "codex", ("codex",), env={"CODEX_HOME": str(home)})
    assert TranscriptFollower.of(control("codex", None), launcher) is None  # not bound yet
    follower = TranscriptFollower.of(control("codex", SESSION), launcher)
    assert follower is not None
    assert follower.read().context_tokens == 0  # no rollout yet

    day = home / "sessions" / "2026" / "11" / "30"
    day.mkdir(parents=True)
    path = day / f"rollout-2026-11-30T06-42-44-{SESSION}.jsonl"
    lines = ROLLOUT.read_text().splitlines(keepends=True)
    half = len(lines) // 2
    path.write_text("".join(lines[:half]) + lines[half][:20])  # a line still being written
    early = follower.read().context_tokens
    with path.open("a") as handle:
        handle.write(lines[half][20:] + "".join(lines[half + 1 :]))
    watch = follower.read()
    last = [json.loads(line) for line in lines if '"token_count"' in line][-1]
    assert watch.context_tokens == last["payload"]["info"]["last_token_usage"]["total_tokens"]
    assert 0 < early <= watch.context_tokens
    assert watch.first_context == early  # the stub's requests are all alike
    assert watch.verdict(10**6) is None


def test_a_claude_controls_transcript_is_found_under_its_config_dir(tmp_path: Path) -> None:
    config = tmp_path / "claude-config"
    launcher = Launcher("boss", "claude", ("claude",), env={"CLAUDE_CONFIG_DIR": str(config)})
    follower = TranscriptFollower.of(control("claude", "s-1"), launcher)
    assert follower is not None
    (config / "projects" / "-w").mkdir(parents=True)
    usage = {"input_tokens": 7, "cache_read_input_tokens": 3}
    record = {"type": "assistant", "message": {"usage": usage, "content": []}}
    (config / "projects" / "-w" / "s-1.jsonl").write_text(json.dumps(record) + "\n")
    assert follower.read().context_tokens == 10
    opencode = Launcher("o", "opencode", ("opencode",))
    assert TranscriptFollower.of(control("opencode", "s-2"), opencode) is None


def test_a_gemini_cli_controls_chat_file_is_found_by_its_session_id_under_its_home(
    tmp_path: Path,
) -> None:
    session = "38383c96-7030-42a1-8320-7d56a43b8ab5"
    launcher = Launcher("boss", "gemini", ("gemini",), env={"HOME": str(tmp_path)})
    follower = TranscriptFollower.of(control("gemini", session), launcher)
    assert follower is not None
    chats = tmp_path / ".gemini" / "tmp" / "project" / "chats"
    chats.mkdir(parents=True)
    other = {"type": "gemini", "tokens": {"input": 99999}}
    (chats / "session-2026-12-02T05-27-0ther000.jsonl").write_text(json.dumps(other) + "\n")
    mine = chats / f"session-2026-12-02T05-27-{session[:8]}.jsonl"
    mine.write_text(json.dumps({"sessionId": session, "kind": "main"}) + "\n")
    assert follower.read().context_tokens == 0
    with mine.open("a") as handle:
        handle.write(json.dumps({"type": "gemini", "tokens": {"input": 4200}}) + "\n")
    assert follower.read().context_tokens == 4200
