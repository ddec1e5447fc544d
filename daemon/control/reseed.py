"""Reading the control session's transcript for its re-seed (``core.reseed``): the file found
by its session id under the launcher's Claude Code config dir, read from where it was left."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from openbus.daemon.config import Launcher
from openbus.daemon.core.reseed import ReseedWatch
from openbus.daemon.grants import Principal

MAX_READ = 4 * 1024 * 1024  # per look: a huge transcript is read over several ticks


def claude_config_dir(launcher: Launcher) -> Path:
    configured = launcher.env.get("CLAUDE_CONFIG_DIR")
    if configured:
        return Path(configured)
    return Path(os.path.expanduser("~")) / ".claude"


@dataclass
class TranscriptFollower:
    principal: str
    session_id: str
    config_dir: Path
    watch: ReseedWatch = field(default_factory=ReseedWatch)
    path: Path | None = None
    offset: int = 0
    partial: bytes = b""

    @classmethod
    def of(cls, principal: Principal, launcher: Launcher) -> TranscriptFollower | None:
        if principal.harness != "claude" or not principal.session_id:
            return None  # only Claude Code's transcript usage is read
        return cls(principal.id, principal.session_id, claude_config_dir(launcher))

    def read(self) -> ReseedWatch:
        """Read what was appended since the last look; the watch holds what it showed."""
        if self.path is None:
            found = sorted((self.config_dir / "projects").glob(f"*/{self.session_id}.jsonl"))
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
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                self.watch.observe(record)
        return self.watch
