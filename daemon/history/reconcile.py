"""Keeping the history index in step with the transcripts.

``reconcile`` walks the sources and re-parses only the files whose (size, mtime_ns, inode)
changed since the last pass, oldest first so the newest sessions get the highest rowids (the
store ranks the most recently indexed first), ``WRITE_BATCH`` files parsed (outside the
store's lock) and then written in one transaction (a failing write costs only its own file);
a pass of ``HELPER_MIN`` files or more has a helper process read some of them meanwhile
(``parallel``; started as soon as the walk has found that many, so it boots while the walk
goes on), and its commits are checkpointed once, at its end. A
file that disappeared leaves its entry in place but without a transcript (so without a resume
argv). Codex thread names are re-read from each home's ``session_index.jsonl`` and re-title the
entries they name, whether or not their rollouts changed. One pass runs at a time.

A push indexes one transcript now, found by its path or by its harness and session id:
Claude Code's Stop, SessionEnd and SubagentStop hooks pass its path as ``transcript_path`` /
``agent_transcript_path``, or only the session id.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from openbus.daemon.history import opencode
from openbus.daemon.history.files import FileKey, file_key, read_file
from openbus.daemon.history.model import (
    CLAUDE,
    CODEX,
    OPENCODE,
    PENDING_HARNESSES,
    ParsedSession,
    SessionEntry,
    valid_text,
)
from openbus.daemon.history.parallel import (
    HELPER_MIN,
    UNIT,
    ParseHelper,
    parse_units,
    start_helper,
)
from openbus.daemon.history.parse import (
    make_title,
    parse_codex_thread_names,
    parse_opencode,
    resume_argv,
    split_lines,
)
from openbus.daemon.history.parse_helper import Result
from openbus.daemon.history.repo import RepoInfo, RepoResolver
from openbus.daemon.history.sources import Listed, Sources, Transcript
from openbus.daemon.history.store import HistoryStore, KnownFile, KnownRepo
from openbus.kernel.clock import Clock
from openbus.kernel.errors import BadRequest, NotFound, Unavailable
from openbus.kernel.regular_files import read_regular

Progress = Callable[[int, int], None]
# transcripts parsed (outside the store's lock) before they are written in one transaction
WRITE_BATCH = 256
Resolve = Callable[[str | None], RepoInfo | None]


@dataclass
class ReconcileStats:
    scanned: int = 0
    changed: int = 0
    indexed: int = 0
    skipped: int = 0  # changed but not a session (empty, unparseable)
    gone: int = 0
    read_by_helper: int = 0  # of the changed, read by a parse helper (``parallel``)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "scanned": self.scanned,
            "changed": self.changed,
            "indexed": self.indexed,
            "skipped": self.skipped,
            "gone": self.gone,
            "read_by_helper": self.read_by_helper,
            "errors": list(self.errors),
            "seconds": round(self.seconds, 3),
            "pending_harnesses": list(PENDING_HARNESSES),
        }


class Reconciler:
    def __init__(self, store: HistoryStore, sources: Sources, *, clock: Clock) -> None:
        self.store = store
        self.sources = sources
        self.clock = clock
        self.last: float | None = None  # clock.monotonic() at the end of the last full pass
        self._running = threading.Lock()

    def reconcile(
        self,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
        *,
        full: bool = False,
    ) -> ReconcileStats:
        """Re-parse the transcripts that changed since the last pass (``full``: every one);
        one pass at a time. ``progress(done, total)`` is called as files are parsed;
        ``cancel`` stops early. A full pass forgets the files once the pass before it has
        ended: forgotten while one runs, the files that pass writes after would be skipped."""
        with self._running, self.store.checkpoints_held(), contextlib.ExitStack() as helpers:
            if full:
                self.store.forget_files()
            return self._reconcile(progress, cancel, helpers)

    def running(self) -> bool:
        return self._running.locked()

    def _reconcile(
        self,
        progress: Progress | None,
        cancel: threading.Event | None,
        helpers: contextlib.ExitStack,
    ) -> ReconcileStats:
        """The pass; a parse helper it starts is closed by ``helpers``."""
        started = time.monotonic()
        stats = ReconcileStats()
        known = self.store.files()
        names = {str(home): thread_names(home) for home in self.sources.codex_homes}
        helper: ParseHelper | None = None
        changed: list[tuple[int, Listed]] = []
        seen: set[str] = set()
        for listed in self.sources.listing(stats.errors):
            path, db_key = listed[1], listed[3]
            if db_key is not None:
                key = db_key
            else:
                try:
                    key = file_key(os.stat(path))
                except OSError:
                    continue
            stats.scanned += 1
            seen.add(path)
            was = known.get(path)
            if was is None or was[:3] != key:
                if not path.isascii() and not _is_text(path):
                    stats.errors.append(f"{_shown(path)}: its name is not UTF-8; not indexed")
                    continue
                changed.append((key[1], listed))
                if len(changed) == HELPER_MIN:  # it boots while the walk goes on
                    helper = start_helper(names)
                    if helper is not None:
                        helpers.callback(helper.close)
        changed.sort(key=lambda pair: pair[0])  # oldest first: newest sessions get top rowids
        stats.changed = len(changed)
        resolve = RepoResolver()
        total = len(changed)
        if progress:
            progress(0, total)
        counted = _Counted(stats, total, progress)

        def here(listed: Listed) -> Result:
            try:
                return read_listed(listed, names.get(str(listed[2]), {}))
            except (OSError, sqlite3.Error, Unavailable) as exc:
                return str(exc)

        units = [[t for _mtime, t in changed[i : i + UNIT]] for i in range(0, total, UNIT)]
        read: list[tuple[str, str, FileKey, ParsedSession | None]] = []
        cancelled = False
        with contextlib.closing(parse_units(units, here, helper)) as parsed_units:
            for unit, results in zip(units, parsed_units, strict=True):
                for (harness, path, _root, _key), result in zip(unit, results, strict=True):
                    if isinstance(result, str):
                        counted.failed(f"{path}: {result}")
                    else:
                        read.append((path, harness, result[1], result[0]))
                cancelled = cancel is not None and cancel.is_set()
                while len(read) >= WRITE_BATCH and not cancelled:
                    self._write_batch(read[:WRITE_BATCH], resolve, counted)
                    del read[:WRITE_BATCH]
                    cancelled = cancel is not None and cancel.is_set()
                if cancelled:  # what is read and not written is read again next time
                    break
        if read and not cancelled:
            self._write_batch(read, resolve, counted)
        stats.read_by_helper = helper.files_read if helper is not None else 0
        if cancelled:
            stats.seconds = time.monotonic() - started
            return stats
        stats.gone = self._forget_gone(known, seen)
        self._retitle_codex(names)
        self.store.merge_segments()  # searches meanwhile go off the event loop (a reconcile runs)
        self.last = self.clock.monotonic()
        stats.seconds = time.monotonic() - started
        return stats

    def _write_batch(
        self,
        read: Sequence[tuple[str, str, FileKey, ParsedSession | None]],
        resolve: Resolve,
        counted: _Counted,
    ) -> None:
        """The sessions of these files (path, harness, key, session read), and the files'
        keys, in one transaction."""
        try:
            known_repos = self._known_repos([p for _path, _h, _k, p in read], resolve)
        except sqlite3.Error as exc:
            for path, _harness, _key, _parsed in read:
                counted.failed(f"{path}: {exc}")
            return
        batch = [
            (path, harness, key, self._entry_from(p, path, resolve, known_repos) if p else None)
            for path, harness, key, p in read
        ]
        try:
            errors = self.store.record_files(batch)
        except sqlite3.Error as exc:
            errors = [str(exc)] * len(batch)
        for (path, _harness, _key, entry), error in zip(batch, errors, strict=True):
            if error is not None:
                counted.failed(f"{path}: {error}")
            else:
                counted.written(entry is not None)

    def _forget_gone(self, known: Mapping[str, KnownFile], seen: set[str]) -> int:
        gone = 0
        for path, (_s, _m, _i, harness, session_id) in known.items():
            if path in seen or self.sources.root_of(Path(path)) is None:
                continue
            if self.sources.still_there(Path(path)):
                continue
            gone += 1
            self.store.forget_file(path, harness, session_id)
        return gone

    def _retitle_codex(self, names: Mapping[str, Mapping[str, str]]) -> None:
        for home_names in names.values():
            for session_id, name in home_names.items():
                old = self.store.find(CODEX, session_id)
                if old is None:
                    continue
                title = make_title(valid_text(name), old.prompts)  # as ``_entry_from``'s
                if title != old.title:
                    self.store.upsert(replace(old, title=title))

    # ---------------------------------------------------------------- push (hooks)

    def push_path(self, transcript_path: str | Path) -> SessionEntry | None:
        """Index the transcript at a path now."""
        path = Path(transcript_path).expanduser()
        found = self.sources.transcript_at(path)
        if found is None:
            raise BadRequest(
                f"{path} is not a transcript of a harness the index reads",
                field="transcript_path",
            )
        return self._push(found)

    def push_session(self, harness: str | None, session_id: str | None) -> SessionEntry | None:
        """Index a session's transcript now, found by its harness and session id."""
        if not harness or not session_id:
            raise BadRequest("give a transcript path, or a harness and a session id")
        found = self.sources.find_transcript(harness, session_id)
        if found is None:
            raise NotFound(f"no transcript for {harness} session {session_id}")
        return self._push(found)

    def _push(self, t: Transcript) -> SessionEntry | None:
        if t.harness == OPENCODE:
            if t.key is None:  # named by its path: look it up now
                found = self.sources.find_transcript(OPENCODE, _opencode_id(t.path))
                if found is None:
                    raise NotFound(f"no OpenCode session at {t.path}", field="transcript_path")
                t = found
        elif not t.path.is_file():
            raise NotFound(f"no transcript at {t.path}", field="transcript_path")
        names = thread_names(t.root) if t.harness == CODEX else {}
        return self._index_file(t, names, RepoResolver())

    def push_hook(self, hook: Mapping[str, Any]) -> list[SessionEntry]:
        """The JSON a Claude Code hook passes on stdin (Stop, SessionEnd, SubagentStop)."""
        if not isinstance(hook, Mapping):
            raise BadRequest("the hook input must be a JSON object")
        paths: list[str] = []
        for key in ("agent_transcript_path", "transcript_path"):
            value = hook.get(key)
            if isinstance(value, str) and value and value not in paths:
                paths.append(value)
        entries: list[SessionEntry] = []
        if paths:
            present = [p for p in paths if Path(p).expanduser().is_file()]
            if not present:
                raise NotFound(
                    "no transcript at " + " nor at ".join(paths),
                    field="transcript_path",
                )
            for p in present:
                entry = self.push_path(p)
                if entry is not None:
                    entries.append(entry)
            return entries
        session_id = hook.get("session_id")
        if isinstance(session_id, str) and session_id:
            entry = self.push_session(CLAUDE, session_id)
            return [entry] if entry else []
        raise BadRequest("the hook input names no transcript_path or session_id")

    # ---------------------------------------------------------------- one file

    def _index_file(
        self, t: Transcript, names: Mapping[str, str], resolve: Resolve
    ) -> SessionEntry | None:
        parsed, key = parse_transcript(t, names)
        entry = None
        if parsed is not None:
            entry = self._entry_from(parsed, t.path, resolve, self._known_repos([parsed], resolve))
        self.store.record_file(t.path, t.harness, key, entry)
        return entry

    def _known_repos(
        self, parsed: Sequence[ParsedSession | None], resolve: Resolve
    ) -> dict[tuple[str, str], KnownRepo]:
        """What the index holds of the repos of the sessions whose cwd is in no repo now (a
        folder since removed), by key: looked up once for them all."""
        keys = [_key(p) for p in parsed if p and resolve(p.cwd) is None]
        return self.store.known_repos(keys) if keys else {}

    def _entry_from(
        self,
        parsed: ParsedSession,
        transcript: str | Path,
        resolve: Resolve,
        known_repos: Mapping[tuple[str, str], KnownRepo],
    ) -> SessionEntry:
        """The entry of a session read: its repo that of its cwd, else (its cwd in no repo
        now) the one the index holds for it when it was read with the same cwd (``_known_repos``),
        else its own origin's."""
        info = resolve(parsed.cwd)
        repo = repo_root = None
        origin = parsed.origin
        if info is not None:
            repo, repo_root, origin = info.repo, info.root, info.origin or parsed.origin
        else:
            old = known_repos.get(_key(parsed))
            if old is not None and old.cwd == parsed.cwd:
                repo, repo_root, origin = old.repo, old.repo_root, old.origin or origin
            elif origin:
                repo = RepoInfo(root="", origin=origin).repo
        text = valid_text  # a transcript's strings as the index can hold them
        return SessionEntry(
            harness=parsed.harness,
            session_id=text(parsed.session_id),
            repo=repo,
            repo_root=repo_root,
            origin=origin,
            cwd=parsed.cwd and text(parsed.cwd),
            branches=tuple(map(text, parsed.branches)),
            prs=tuple(map(text, parsed.prs)),
            title=parsed.title and text(parsed.title),
            prompts=tuple(map(text, parsed.prompts)),
            started=parsed.started,
            last_active=parsed.last_active,
            resume_argv=resume_argv(parsed.harness, parsed.session_id, subagent=parsed.subagent),
            subagent=parsed.subagent,
            parent_session_id=parsed.parent_session_id and text(parsed.parent_session_id),
            transcript=str(transcript),
        )


class _Counted:
    """A pass's files as they are done: its stats, and ``progress(done, total)``."""

    def __init__(self, stats: ReconcileStats, total: int, progress: Progress | None) -> None:
        self.stats = stats
        self.total = total
        self.progress = progress
        self.done = 0

    def failed(self, error: str) -> None:
        self.stats.errors.append(error)
        self._one()

    def written(self, indexed: bool) -> None:
        if indexed:
            self.stats.indexed += 1
        else:
            self.stats.skipped += 1
        self._one()

    def _one(self) -> None:
        self.done += 1
        if self.progress:
            self.progress(self.done, self.total)


def parse_transcript(
    t: Transcript, names: Mapping[str, str]
) -> tuple[ParsedSession | None, FileKey]:
    """The session a transcript holds (``None`` if none), and the file's key as read."""
    return read_listed((t.harness, str(t.path), t.root, t.key), names)


def read_listed(listed: Listed, names: Mapping[str, str]) -> tuple[ParsedSession | None, FileKey]:
    """``parse_transcript`` of a transcript as ``Sources.listing`` gives it."""
    harness, path, root, db_key = listed
    if harness == OPENCODE:
        return _parse_opencode(Transcript(harness, Path(path), root, db_key))
    return read_file(harness, path, names)


def _is_text(path: str) -> bool:
    """A path the index can hold: its name UTF-8 (a name that is not reads with surrogates)."""
    try:
        path.encode()
    except UnicodeEncodeError:
        return False
    return True


def _shown(path: str) -> str:
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _key(parsed: ParsedSession) -> tuple[str, str]:
    """The key of the entry of a session read."""
    return parsed.harness, valid_text(parsed.session_id)


def _opencode_id(path: Path) -> str:
    found = opencode.split_ref(path)
    return found[1] if found else ""


def _parse_opencode(t: Transcript) -> tuple[ParsedSession | None, FileKey]:
    """A session in OpenCode's database, read in one snapshot with its key; a session gone
    from it meanwhile is none (under the key it was listed with)."""
    found = opencode.split_ref(t.path)
    rows = opencode.read_session(*found) if found else None
    if rows is None:
        return None, t.key or (0, 0, 0)
    return parse_opencode(rows.session, rows.messages, rows.parts), rows.key


def thread_names(home: Path) -> dict[str, str]:
    """Codex's thread names of a home, by session id (none when it has no index)."""
    try:
        return parse_codex_thread_names(_read_lines(home / "session_index.jsonl"))
    except OSError:
        return {}


def _read_lines(path: Path) -> list[bytes]:
    return split_lines(read_regular(path))
