"""The folders Claude Code and Codex themselves record as trusted or untrusted become marks."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import pytest

from openbus.daemon.config import parse_config
from openbus.daemon.core.sessions import Trust, folder_verdict
from openbus.daemon.sessions import trust
from openbus.kernel.errors import Forbidden


def test_claude_codes_accepted_trust_dialogs_are_trusted_folders(tmp_path: Path) -> None:
    path = tmp_path / ".claude.json"
    path.write_text(
        json.dumps(
            {
                "projects": {
                    "/src/app": {"hasTrustDialogAccepted": True},
                    "/src/other": {"hasTrustDialogAccepted": False},
                    "relative": {"hasTrustDialogAccepted": True},
                }
            }
        )
    )
    assert [(str(m.folder), m.trust) for m in trust.claude_marks(path)] == [
        ("/src/app", Trust.TRUSTED)
    ]


def test_codex_trust_levels_mark_folders_both_ways(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        '[projects."/src"]\ntrust_level = "trusted"\n'
        '[projects."/src/vendor"]\ntrust_level = "untrusted"\n'
    )
    marks = trust.codex_marks(path)
    assert [(str(m.folder), m.trust) for m in marks] == [
        ("/src", Trust.TRUSTED),
        ("/src/vendor", Trust.UNTRUSTED),
    ]
    assert folder_verdict(PurePosixPath("/src/app"), None, marks).source.startswith("Codex")
    with pytest.raises(Forbidden, match="marked untrusted"):
        folder_verdict(PurePosixPath("/src/vendor/lib"), None, marks)


def test_unreadable_or_malformed_records_trust_nothing(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "bad.toml").write_text("[[[")
    (tmp_path / "deep.json").write_text("[" * 100_000)
    (tmp_path / "deep.toml").write_text("a = " + "[" * 100_000)
    assert trust.claude_marks(tmp_path / "bad.json") == []
    assert trust.codex_marks(tmp_path / "bad.toml") == []
    assert trust.claude_marks(tmp_path / "deep.json") == []
    assert trust.codex_marks(tmp_path / "deep.toml") == []
    assert trust.claude_marks(tmp_path / "missing.json") == []


def test_a_launchers_own_config_dirs_are_read(tmp_path: Path) -> None:
    claude_dir, codex_home = tmp_path / "claude", tmp_path / "codex"
    claude_dir.mkdir()
    codex_home.mkdir()
    (claude_dir / ".claude.json").write_text(
        json.dumps({"projects": {"/w/a": {"hasTrustDialogAccepted": True}}})
    )
    (codex_home / "config.toml").write_text('[projects."/w/b"]\ntrust_level = "trusted"\n')
    config = parse_config(
        {
            "launchers": {
                "c": {
                    "harness": "claude",
                    "argv": ["claude"],
                    "env": {"CLAUDE_CONFIG_DIR": str(claude_dir)},
                },
                "x": {
                    "harness": "codex",
                    "argv": ["codex"],
                    "env": {"CODEX_HOME": str(codex_home)},
                },
            }
        },
        "<test>",
    )
    folders = {str(m.folder) for m in trust.harness_marks(config)}
    assert {"/w/a", "/w/b"} <= folders
