"""Where transcripts live: the Claude Code config dirs, Codex homes, omp agent dirs and Gemini
CLI dirs the index reads.

``[history] claude_config_dirs`` and ``codex_homes`` when set, else the harnesses' own
defaults (``$CLAUDE_CONFIG_DIR`` or ``~/.claude``; ``$CODEX_HOME`` or ``~/.codex``), plus every
dir a launcher sets in its ``env`` (``CLAUDE_CONFIG_DIR``, ``CODEX_HOME``), deduplicated.

Under a config dir, Claude Code keeps ``projects/<project>/<session id>.jsonl`` (subagents in
``<session id>/subagents/agent-<id>.jsonl`` or, older, ``agent-<id>.jsonl``); under a Codex
home, Codex keeps ``sessions/`` and ``archived_sessions/`` of ``rollout-*<session id>.jsonl``.
An omp agent dir (``$PI_CODING_AGENT_DIR`` or ``~/.omp/agent``, plus a launcher's
``PI_CODING_AGENT_DIR``) keeps ``sessions/<cwd>/<time>_<session id>.jsonl``. A Gemini CLI dir
(``$GEMINI_CLI_HOME/.gemini`` or ``~/.gemini``, plus ``.gemini`` under a launcher's
``GEMINI_CLI_HOME`` or a Gemini launcher's ``HOME``) keeps
``tmp/<project>/chats/session-<time>-<first 8 of the id>.jsonl``. An OpenCode data dir
(``$XDG_DATA_HOME/opencode`` or ``~/.local/share/opencode``, plus ``opencode`` under a
launcher's ``XDG_DATA_HOME`` or ``.local/share/opencode`` under an OpenCode launcher's
``HOME``) keeps every session in ``opencode.db``; each is named by a reference path
``opencode.db#<session id>`` (see ``opencode``) carrying its key. A transcript outside every
root is known by its name alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from openbus.daemon.config import Config
from openbus.daemon.history import opencode
from openbus.daemon.history.model import CLAUDE, CODEX, GEMINI, OMP, OPENCODE
from openbus.kernel import json_text
from openbus.kernel.errors import Unavailable
from openbus.kernel.regular_files import read_regular


@dataclass(frozen=True)
class Transcript:
    harness: str
    path: Path
    root: Path  # the config dir / Codex home it was found under
    key: opencode.SessionKey | None = None  # a session in a database: its key, not a stat


# a transcript as ``Sources.listing`` gives it: harness, path (text), root, database key
Listed = tuple[str, str, Path, opencode.SessionKey | None]
CODEX_FOLDERS = ("sessions", "archived_sessions")  # of a Codex home: where rollouts are


def _dedupe(paths: list[Path]) -> tuple[Path, ...]:
    seen: set[str] = set()
    out: list[Path] = []
    for path in paths:
        key = os.path.normpath(os.path.expanduser(str(path)))
        if key not in seen:
            seen.add(key)
            out.append(Path(key))
    return tuple(out)


@dataclass(frozen=True)
class Sources:
    claude_dirs: tuple[Path, ...] = ()
    codex_homes: tuple[Path, ...] = ()
    omp_dirs: tuple[Path, ...] = ()
    gemini_dirs: tuple[Path, ...] = ()
    opencode_dirs: tuple[Path, ...] = ()

    @classmethod
    def from_config(
        cls, config: Config, environ: Mapping[str, str] | None = None, home: Path | None = None
    ) -> Sources:
        env = os.environ if environ is None else environ
        base = home or Path.home()
        claude = list(config.history.claude_config_dirs) or [
            Path(env["CLAUDE_CONFIG_DIR"]) if env.get("CLAUDE_CONFIG_DIR") else base / ".claude"
        ]
        codex = list(config.history.codex_homes) or [
            Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else base / ".codex"
        ]
        omp = [
            Path(env["PI_CODING_AGENT_DIR"])
            if env.get("PI_CODING_AGENT_DIR")
            else base / ".omp" / "agent"
        ]
        gemini = [
            Path(env["GEMINI_CLI_HOME"]) / ".gemini"
            if env.get("GEMINI_CLI_HOME")
            else base / ".gemini"
        ]
        opencode_dirs = [
            Path(env["XDG_DATA_HOME"]) / "opencode"
            if env.get("XDG_DATA_HOME")
            else base / ".local" / "share" / "opencode"
        ]
        for launcher in config.launchers.values():
            if launcher.env.get("XDG_DATA_HOME"):
                opencode_dirs.append(Path(launcher.env["XDG_DATA_HOME"]) / "opencode")
            elif launcher.harness == OPENCODE and launcher.env.get("HOME"):
                opencode_dirs.append(Path(launcher.env["HOME"]) / ".local" / "share" / "opencode")
            gemini_home = launcher.env.get("GEMINI_CLI_HOME") or (
                launcher.env.get("HOME") if launcher.harness == GEMINI else None
            )
            if gemini_home:
                gemini.append(Path(gemini_home) / ".gemini")
            if launcher.env.get("CLAUDE_CONFIG_DIR"):
                claude.append(Path(launcher.env["CLAUDE_CONFIG_DIR"]))
            if launcher.env.get("CODEX_HOME"):
                codex.append(Path(launcher.env["CODEX_HOME"]))
            if launcher.env.get("PI_CODING_AGENT_DIR"):
                omp.append(Path(launcher.env["PI_CODING_AGENT_DIR"]))
        return cls(
            _dedupe(claude), _dedupe(codex), _dedupe(omp), _dedupe(gemini), _dedupe(opencode_dirs)
        )

    def roots(self) -> Iterator[tuple[str, Path]]:
        for path in self.claude_dirs:
            yield CLAUDE, path
        for path in self.codex_homes:
            yield CODEX, path
        for path in self.omp_dirs:
            yield OMP, path
        for path in self.gemini_dirs:
            yield GEMINI, path
        for path in self.opencode_dirs:
            yield OPENCODE, path

    def open_file_trees(self) -> tuple[Path, ...]:
        """The folders under which liveness answers for files by their holders (Codex rollouts,
        a folder a day): what ``open_watch`` watches, every folder under them."""
        return tuple(root / sub for root in self.codex_homes for sub in CODEX_FOLDERS)

    def transcripts(self, errors: list[str] | None = None) -> Iterator[Transcript]:
        """Every transcript file under every root, in a stable order; a database that cannot
        be read is skipped, its error added to ``errors``."""
        for harness, path, root, key in self.listing(errors):
            yield Transcript(harness, Path(path), root, key)

    def listing(self, errors: list[str] | None = None) -> Iterator[Listed]:
        """``transcripts`` as plain values, each path as text: a reconcile walks every file
        each pass and makes a ``Transcript`` only of those that changed."""
        for root in self.claude_dirs:
            for path in _walk(root / "projects", lambda name: name.endswith(".jsonl")):
                yield CLAUDE, path, root, None
        for root in self.codex_homes:
            for sub in CODEX_FOLDERS:
                for path in _walk(
                    root / sub, lambda n: n.startswith("rollout-") and n.endswith(".jsonl")
                ):
                    yield CODEX, path, root, None
        for root in self.omp_dirs:
            for path in _walk(root / "sessions", _is_omp_session):
                yield OMP, path, root, None
        for root in self.gemini_dirs:
            for chat in _gemini_chats(root):
                yield GEMINI, str(chat), root, None
        for root in self.opencode_dirs:
            db = root / opencode.DB_FILE
            try:
                keys = opencode.session_keys(db)
            except Unavailable as exc:
                if errors is not None:
                    errors.append(str(exc))
                continue
            for session_id, key in keys:
                yield OPENCODE, str(opencode.ref(db, session_id)), root, key

    def root_of(self, path: Path) -> tuple[str, Path] | None:
        """The harness and root a transcript path belongs to, if it is under one."""
        text = os.path.normpath(str(path))
        for harness, root in self.roots():
            prefix = os.path.normpath(str(root)) + os.sep
            if text.startswith(prefix):
                return harness, root
        return None

    def transcript_at(self, path: Path) -> Transcript | None:
        """The transcript at ``path``: under the root it is in, else, when its name says
        which harness wrote it, under its own folder."""
        owner = self.root_of(path)
        if owner is None:
            harness = _guess_harness(path)
            if harness is None:
                return None
            owner = (harness, path.parent)
        return Transcript(owner[0], path, owner[1])

    def find_transcript(self, harness: str, session_id: str) -> Transcript | None:
        """A session's transcript, looked for under every root of its harness."""
        if harness == CLAUDE:
            for root in self.claude_dirs:
                projects = root / "projects"
                if not projects.is_dir():
                    continue
                for proj in sorted(projects.iterdir()):
                    for candidate in (
                        proj / f"{session_id}.jsonl",
                        proj / f"agent-{session_id}.jsonl",
                    ):
                        if candidate.is_file():
                            return Transcript(CLAUDE, candidate, root)
                    for candidate in proj.glob(f"*/subagents/agent-{session_id}.jsonl"):
                        return Transcript(CLAUDE, candidate, root)
        elif harness == CODEX:
            for root in self.codex_homes:
                for sub in CODEX_FOLDERS:
                    base = root / sub
                    if base.is_dir():
                        for candidate in sorted(base.rglob(f"rollout-*{session_id}.jsonl")):
                            return Transcript(CODEX, candidate, root)
        elif harness == OMP:
            for root in self.omp_dirs:
                base = root / "sessions"
                if base.is_dir():
                    for candidate in sorted(base.glob(f"*/*_{session_id}.jsonl")):
                        return Transcript(OMP, candidate, root)
        elif harness == GEMINI:
            for root in self.gemini_dirs:
                for candidate in _gemini_chats(root, session_id[:8]):
                    if _gemini_session_id(candidate) == session_id:
                        return Transcript(GEMINI, candidate, root)
        elif harness == OPENCODE:
            for root in self.opencode_dirs:
                db = root / opencode.DB_FILE
                key = opencode.session_key(db, session_id)
                if key is not None:
                    return Transcript(OPENCODE, opencode.ref(db, session_id), root, key)
        return None

    def still_there(self, path: Path) -> bool:
        """Whether a transcript indexed before is still there: its file, or its session in
        OpenCode's database (kept as there when the database cannot be read now)."""
        found = opencode.split_ref(path)
        if found is None:
            return path.exists()
        db, session_id = found
        try:
            return opencode.session_key(db, session_id) is not None
        except Unavailable:
            return True


def _gemini_chats(root: Path, short_id: str = "") -> list[Path]:
    """Gemini CLI's chat files under a ``.gemini`` dir (``tmp/<project>/chats/session-*``)."""
    tmp = root / "tmp"
    if not tmp.is_dir():
        return []
    return sorted(tmp.glob(f"*/chats/session-*{short_id}.jsonl"))


def _gemini_session_id(path: Path) -> str | None:
    """The session id on a chat file's header line."""
    try:
        first = json_text.loads(read_regular(path, 65536).split(b"\n", 1)[0] or b"{}")
    except (OSError, ValueError):
        return None
    found = first.get("sessionId") if isinstance(first, dict) else None
    return found if isinstance(found, str) else None


def _is_omp_session(name: str) -> bool:
    return name.endswith(".jsonl") and "_" in name


def _guess_harness(path: Path) -> str | None:
    if opencode.split_ref(path) is not None:
        return OPENCODE
    if path.name.startswith("rollout-") and path.suffix == ".jsonl":
        return CODEX
    if path.suffix == ".jsonl" and "projects" in path.parts:
        return CLAUDE
    return None


def _walk(top: Path, keep: Callable[[str], bool]) -> Iterator[str]:
    """The paths (text, as ``str(Path)`` writes them) of the files under ``top`` whose names
    ``keep`` keeps, folder by folder in name order."""
    if not top.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(str(top), followlinks=False):
        dirnames.sort()
        folder = dirpath + os.sep
        for name in sorted(filenames):
            if keep(name):
                yield folder + name
