"""Expunging a session: its entry, its transcript file(s) and its lines in the harness's files.

A running session is refused. For a Claude Code session its subagents go too (their entries
and transcripts, and the ``<session id>/`` folder beside its transcript, which also holds tool
results). Then the session's lines leave the harness's prompt history (``history.jsonl``) and,
for Codex, the thread-name index (``session_index.jsonl``): each file is rewritten without
them through a temporary file, and replaced only if nobody appended meanwhile (else the
rewrite starts again).

OpenCode keeps its sessions in its own database, whose rows OpenCode removes through its own
event log (``opencode session delete``); the index does not write that database. Expunging an
OpenCode session (and its child sessions) removes their entries only, and keeps them out of
the index until OpenCode's copy changes (a file row under the session's current key, without a
session); ``harness_keeps`` says how to delete OpenCode's copy.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openbus.daemon.history import opencode
from openbus.daemon.history.model import CLAUDE, CODEX, OPENCODE, Liveness, LiveState, SessionEntry
from openbus.daemon.history.sources import Sources
from openbus.daemon.history.store import HistoryStore
from openbus.kernel import json_text
from openbus.kernel.errors import Conflict, Unavailable
from openbus.kernel.regular_files import read_regular


def expunge_entry(
    store: HistoryStore, sources: Sources, entry: SessionEntry, liveness: Liveness
) -> list[str]:
    """Remove the entry and its transcript file(s); returns the paths removed."""
    harness, session_id = entry.key
    if liveness.state is LiveState.RUNNING:
        raise Conflict(f"{harness} session {session_id} is running; end it before expunging it")
    subagents: list[SessionEntry] = []
    if harness in (CLAUDE, OPENCODE) and not entry.subagent:
        subagents = store.subagents(harness, session_id)
    if harness == OPENCODE:
        _forget_opencode(store, (entry, *subagents))
        return []
    removed: list[str] = []
    for victim in (entry, *subagents):
        for path in transcript_files(victim):
            try:
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            except FileNotFoundError:
                continue
            removed.append(str(path))
    wiped = store.remove(entry, subagents)
    drop_history_lines(sources, entry)
    if not wiped:
        raise _kept_in_wal(entry)
    return removed


def _kept_in_wal(entry: SessionEntry) -> Unavailable:
    return Unavailable(
        f"{entry.harness} session {entry.session_id} is expunged, but its text may stay in the "
        "history index's write-ahead log (history.db-wal) until the daemon stops or the next "
        "expunge: another reader of the index held it"
    )


def _forget_opencode(store: HistoryStore, victims: tuple[SessionEntry, ...]) -> None:
    """The entries go; each session's reference keeps its current key, so a reconcile passes
    it by until OpenCode's copy changes."""
    keys: list[tuple[Path, opencode.SessionKey]] = []
    for victim in victims:
        found = opencode.split_ref(Path(victim.transcript)) if victim.transcript else None
        key = opencode.session_key(*found) if found else None
        if found and key is not None:
            keys.append((opencode.ref(*found), key))
    wiped = store.remove(victims[0], victims[1:])
    store.record_files([(path, OPENCODE, key, None) for path, key in keys])
    if not wiped:
        raise _kept_in_wal(victims[0])


def harness_keeps(harness: str, session_id: str) -> str | None:
    """What the harness still keeps of an expunged session, and how to delete it, if any."""
    if harness == OPENCODE:
        return (
            "OpenCode keeps the session in its own database, which openbus does not write; "
            f"delete it there with: opencode session delete {session_id}"
        )
    return None


def transcript_files(entry: SessionEntry) -> list[Path]:
    """The files and folders holding a session's transcript (none in a database)."""
    if not entry.transcript or entry.harness == OPENCODE:
        return []
    path = Path(entry.transcript)
    files = [path]
    if entry.harness == CLAUDE and not entry.subagent:
        companion = path.with_suffix("")  # <session>/ holds subagents and tool results
        if companion.is_dir() and companion.name == entry.session_id:
            files.append(companion)
    return files


def drop_history_lines(sources: Sources, entry: SessionEntry) -> None:
    """The session's lines in the harness's prompt history and thread-name index."""
    sid = entry.session_id
    if entry.harness == CLAUDE:
        for root in sources.claude_dirs:
            _drop_lines(root / "history.jsonl", lambda rec: rec.get("sessionId") == sid)
    elif entry.harness == CODEX:
        for root in sources.codex_homes:
            _drop_lines(root / "history.jsonl", lambda rec: rec.get("session_id") == sid)
            _drop_lines(root / "session_index.jsonl", lambda rec: rec.get("id") == sid)


def _drop_lines(path: Path, doomed: Callable[[dict[str, Any]], bool], attempts: int = 5) -> None:
    """Rewrite a JSONL file without the doomed lines, atomically, and only if nobody
    appended meanwhile (else try again)."""
    for _ in range(attempts):
        try:
            before = path.stat()
            raw = read_regular(path)
        except OSError:
            return
        kept: list[bytes] = []
        dropped = False
        for line in raw.splitlines(keepends=True):
            try:
                rec = json_text.loads(line)
            except ValueError:
                kept.append(line)
                continue
            if isinstance(rec, dict) and doomed(rec):
                dropped = True
            else:
                kept.append(line)
        if not dropped:
            return
        tmp = path.with_name(f".{path.name}.openbus-expunge")
        tmp.write_bytes(b"".join(kept))
        os.chmod(tmp, before.st_mode & 0o7777)
        try:
            after = path.stat()
        except OSError:
            tmp.unlink(missing_ok=True)
            return
        if (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns):
            os.replace(tmp, path)
            return
        tmp.unlink(missing_ok=True)
