"""Which Claude Code config dirs and Codex homes the index reads."""

from __future__ import annotations

from pathlib import Path

from openbus.daemon.config import parse_config
from openbus.daemon.history.sources import Sources
from tests.daemon.history.homes import ClaudeHome, CodexHome


def test_defaults_follow_the_harnesses_env_and_add_the_launchers_dirs(tmp_path: Path) -> None:
    config = parse_config(
        {
            "launchers": {
                "work": {
                    "harness": "claude",
                    "argv": ["claude"],
                    "env": {"CLAUDE_CONFIG_DIR": "/srv/claude-work"},
                },
                "cx": {"harness": "codex", "argv": ["codex"], "env": {"CODEX_HOME": "/srv/cx"}},
            }
        },
        "<test>",
    )
    sources = Sources.from_config(config, environ={"CLAUDE_CONFIG_DIR": "/e/claude"}, home=tmp_path)
    assert sources.claude_dirs == (Path("/e/claude"), Path("/srv/claude-work"))
    assert sources.codex_homes == (tmp_path / ".codex", Path("/srv/cx"))


def test_configured_dirs_replace_the_defaults(tmp_path: Path) -> None:
    config = parse_config(
        {"history": {"claude_config_dirs": ["/a", "/a/"], "codex_homes": ["/b"]}}, "<test>"
    )
    sources = Sources.from_config(config, environ={}, home=tmp_path)
    assert sources.claude_dirs == (Path("/a"),)
    assert sources.codex_homes == (Path("/b"),)


def test_transcripts_are_found_under_projects_subagents_and_dated_session_dirs(
    tmp_path: Path,
) -> None:
    claude = ClaudeHome(tmp_path / "claude")
    codex = CodexHome(tmp_path / "codex")
    top = claude.session("s", "/w", ["x"])
    sub = claude.subagent("s", "a1", "/w", "task")
    roll = codex.rollout("t", "/w", ["y"], day="2026/01/02")
    (codex.root / "sessions" / "2026" / "01" / "02" / "notes.txt").write_text("not a rollout")
    found = {(t.harness, t.path) for t in Sources((claude.root,), (codex.root,)).transcripts()}
    assert found == {("claude", top), ("claude", sub), ("codex", roll)}
