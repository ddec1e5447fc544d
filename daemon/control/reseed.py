"""Reading the control session's transcript for its re-seed (``core.reseed``): the file found
by its session id (Claude Code's ``<config dir>/projects/*/<id>.jsonl`` under the launcher's
``CLAUDE_CONFIG_DIR``; Codex's ``<home>/sessions/YYYY/MM/DD/rollout-*-<id>.jsonl`` under its
``CODEX_HOME``, the id known once launch has bound it from the rollout; Gemini CLI's
``<home>/.gemini/tmp/<project>/chats/session-<time>-<first 8 of the id>.jsonl`` under the
launcher's ``GEMINI_CLI_HOME`` or ``HOME``), read from where it was left."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from openbus.daemon.config import Launcher
from openbus.daemon.core.reseed import ReseedWatch
from openbus.daemon.grants import Principal
from openbus.kernel import json_text

MAX_READ = 4 * 1024 * 1024  # per look: a huge transcript is read over several ticks


def claude_config_dir(launcher: Launcher) -> Path:
    configured = launcher.env.get("CLAUDE_CONFIG_DIR")
    if configured:
        return Path(configured)
    return Path(os.path.expanduser("~")) / ".claude"


def codex_home(launcher: Launcher) -> Path:
    configured = launcher.env.get("CODEX_HOME") or os.environ.get("CODEX_HOME")
    if configured:
        return Path(configured)
    return Path(os.path.expanduser("~")) / ".codex"


def gemini_dir(launcher: Launcher) -> Path:
    home = launcher.env.get("GEMINI_CLI_HOME") or launcher.env.get("HOME")
    return Path(home or os.path.expanduser("~")) / ".gemini"


def _transcript_glob(harness: str, session_id: str) -> str:
    if harness == "codex":
        return f"sessions/*/*/*/rollout-*-{session_id}.jsonl"
    if harness == "gemini":
        return f"tmp/*/chats/session-*-{session_id[:8]}.jsonl"
    return f"projects/*/{session_id}.jsonl"


@dataclass
class TranscriptFollower:
    principal: str
    session_id: str
    config_dir: Path  # Claude Code's config dir, Codex's home, or Gemini CLI's .gemini
    harness: str = "claude"
    watch: ReseedWatch = field(default_factory=ReseedWatch)
    path: Path | None = None
    offset: int = 0
    partial: bytes = b""
    told: bool = False  # control's thread was told it is too large to re-seed for size

    @classmethod
    def of(cls, principal: Principal, launcher: Launcher) -> TranscriptFollower | None:
        if not principal.session_id:
            return None  # a Codex session's id is bound once its rollout is found
        if principal.harness == "claude":
            return cls(principal.id, principal.session_id, claude_config_dir(launcher))
        if principal.harness == "codex":
            return cls(principal.id, principal.session_id, codex_home(launcher), "codex")
        if principal.harness == "gemini":
            return cls(principal.id, principal.session_id, gemini_dir(launcher), "gemini")
        return None  # only these harnesses' transcripts carry usage records

    def read(self) -> ReseedWatch:
        """Read what was appended since the last look; the watch holds what it showed."""
        if self.path is None:
            found = sorted(self.config_dir.glob(_transcript_glob(self.harness, self.session_id)))
            if not found:
                return self.watch
            self.path = found[0]
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read(MAX_READ)
        except OSError:
            return self.watch
        self.offset += len(chunk)
        data = self.partial + chunk
        lines = data.split(b"\n")
        self.partial = lines.pop()
        for line in lines:
            try:
                record = json_text.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                self.watch.observe(record)
        if len(chunk) < MAX_READ:
            self.watch.read_to_end()
        return self.watch
