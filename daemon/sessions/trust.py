"""The folders the harnesses themselves record as trusted or untrusted.

Claude Code keeps per-project trust in ``.claude.json`` (``projects.<path>.
hasTrustDialogAccepted``) in the home directory or its ``CLAUDE_CONFIG_DIR``; Codex keeps
``[projects."<path>"] trust_level = "trusted" | "untrusted"`` in ``config.toml`` under its
``CODEX_HOME``. Each becomes a ``TrustMark`` for ``core.sessions.folder_verdict``. A file that
is missing or cannot be parsed gives no marks (so nothing is trusted through it).
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from openbus.daemon.config import Config
from openbus.daemon.core.sessions import Trust, TrustMark
from openbus.kernel import json_text, toml
from openbus.kernel.regular_files import read_regular


def _launcher_dirs(config: Config, variable: str) -> list[Path]:
    return [Path(x.env[variable]) for x in config.launchers.values() if x.env.get(variable)]


def _claude_files(config: Config) -> list[Path]:
    dirs = [*config.history.claude_config_dirs, *_launcher_dirs(config, "CLAUDE_CONFIG_DIR")]
    return list(dict.fromkeys([Path.home() / ".claude.json", *(d / ".claude.json" for d in dirs)]))


def _codex_files(config: Config) -> list[Path]:
    homes = [Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")]
    homes += [*config.history.codex_homes, *_launcher_dirs(config, "CODEX_HOME")]
    return list(dict.fromkeys(h / "config.toml" for h in homes))


def claude_marks(path: Path) -> list[TrustMark]:
    try:
        data = json_text.loads(read_regular(path))
    except (OSError, ValueError):
        return []
    projects = data.get("projects") if isinstance(data, dict) else None
    if not isinstance(projects, dict):
        return []
    return [
        TrustMark(PurePosixPath(folder), Trust.TRUSTED, "Claude Code's trust of this folder")
        for folder, entry in projects.items()
        if isinstance(entry, dict)
        and entry.get("hasTrustDialogAccepted") is True
        and folder.startswith("/")
    ]


def codex_marks(path: Path) -> list[TrustMark]:
    try:
        data = toml.loads(read_regular(path).decode())
    except (OSError, ValueError):
        return []
    projects = data.get("projects")
    if not isinstance(projects, dict):
        return []
    out = []
    for folder, entry in projects.items():
        level = entry.get("trust_level") if isinstance(entry, dict) else None
        if level in ("trusted", "untrusted") and folder.startswith("/"):
            trust = Trust.TRUSTED if level == "trusted" else Trust.UNTRUSTED
            out.append(TrustMark(PurePosixPath(folder), trust, f"Codex trust_level {level}"))
    return out


def harness_marks(config: Config) -> list[TrustMark]:
    marks: list[TrustMark] = []
    for path in _claude_files(config):
        marks += claude_marks(path)
    for path in _codex_files(config):
        marks += codex_marks(path)
    return marks
