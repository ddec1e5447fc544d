"""Which Claude Code config dirs and Codex homes the index reads."""

from __future__ import annotations

from pathlib import Path

from openbus.daemon.config import parse_config
from openbus.daemon.history.sources import Sources, Transcript
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


def test_a_sessions_transcript_is_found_by_its_id_under_its_harnesss_roots(
    tmp_path: Path,
) -> None:
    claude = ClaudeHome(tmp_path / "claude")
    codex = CodexHome(tmp_path / "codex")
    top = claude.session("s", "/w", ["x"])
    sub = claude.subagent("s", "a1", "/w", "task")
    old_sub = claude.subagent("s", "a2", "/w", "task", nested=False)
    roll = codex.rollout("t", "/w", ["y"], day="2026/01/02")
    sources = Sources((claude.root,), (codex.root,))
    assert sources.find_transcript("claude", "s") == Transcript("claude", top, claude.root)
    assert sources.find_transcript("claude", "a1") == Transcript("claude", sub, claude.root)
    assert sources.find_transcript("claude", "a2") == Transcript("claude", old_sub, claude.root)
    assert sources.find_transcript("codex", "t") == Transcript("codex", roll, codex.root)
    assert sources.find_transcript("codex", "s") is None
    assert sources.find_transcript("claude", "nope") is None


def test_a_transcript_outside_every_root_is_known_by_its_name(tmp_path: Path) -> None:
    claude = ClaudeHome(tmp_path / "claude")
    top = claude.session("s", "/w", ["x"])
    sources = Sources((claude.root,), ())
    assert sources.transcript_at(top) == Transcript("claude", top, claude.root)
    elsewhere = tmp_path / "elsewhere"
    rollout = elsewhere / "rollout-2026-01-02T03-04-05-t.jsonl"
    project = elsewhere / "projects" / "-w" / "s.jsonl"
    assert sources.transcript_at(rollout) == Transcript("codex", rollout, rollout.parent)
    assert sources.transcript_at(project) == Transcript("claude", project, project.parent)
    assert sources.transcript_at(elsewhere / "notes.jsonl") is None


def test_opencode_data_dirs_follow_xdg_data_home_and_an_opencode_launchers_home(
    tmp_path: Path,
) -> None:
    launchers = {
        "oc": {"harness": "opencode", "argv": ["opencode"], "env": {"HOME": "/home/oc"}},
        "xdg": {"harness": "opencode", "argv": ["opencode"], "env": {"XDG_DATA_HOME": "/d"}},
        "cl": {"harness": "claude", "argv": ["claude"], "env": {"HOME": "/home/cl"}},
    }
    config = parse_config({"launchers": launchers}, "<test>")
    sources = Sources.from_config(config, environ={}, home=tmp_path)
    assert sources.opencode_dirs == (
        tmp_path / ".local" / "share" / "opencode",
        Path("/home/oc/.local/share/opencode"),
        Path("/d/opencode"),
    )
    xdg = Sources.from_config(parse_config({}, "<test>"), environ={"XDG_DATA_HOME": "/x"})
    assert xdg.opencode_dirs == (Path("/x/opencode"),)
