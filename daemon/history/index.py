"""The history index: its own SQLite database (``history.db``, WAL) with FTS5 and bm25.

Theory of operation
-------------------
Tables: ``sessions`` (one row per (harness, session id): the entry), ``sessions_fts`` (FTS5
over title, prompts, repo, cwd, branches, PRs; rowid = ``sessions.id``) and ``files`` (one
row per transcript file seen: its (size, mtime_ns, inode) at the last parse, and the session
it produced).

* ``reconcile`` walks the sources and re-parses only files whose (size, mtime_ns, inode)
  changed since the last pass; a file that disappeared leaves its entry in place but without
  a transcript (so without a resume argv). Codex thread names are re-read from each home's
  ``session_index.jsonl`` and re-title the entries they name.
* ``push`` indexes one transcript now (Claude Code's Stop, SessionEnd and SubagentStop hooks
  pass its path as ``transcript_path`` / ``agent_transcript_path``).
* ``search`` tokenises the query itself (words only, stopwords dropped; every term is
  quoted, so user text is never FTS syntax) and ranks by bm25 with column weights:
  sessions holding *all* the terms first, then sessions holding *any*, scored and marked in
  one statement. When more than ``CANDIDATES`` sessions match, the most recently indexed ones
  are ranked (rowids grow as sessions are indexed; reconcile indexes changed files oldest
  first), which bounds the work at 100k sessions. The repo
  filter is a conjunct of the ``MATCH`` in the SQL ``WHERE`` (``repokeys`` holds one hashed
  token per repo key: identity, toplevel path, owner/name), so it narrows the candidates
  before anything is ranked or limited. Each hit carries the query terms its entry holds.
* ``expunge`` removes an entry, its transcript file(s) (for a Claude session also its
  subagents' transcripts and entries) and its lines in the harness's prompt history and
  thread-name index.

One connection, shared by the daemon's event loop and a reconcile thread under a lock; each
file's update is its own short transaction, so a search waits at most one file.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import json
import os
import re
import shutil
import sqlite3
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from openbus.daemon.core.clock import Clock
from openbus.daemon.core.errors import BadRequest, Conflict, NotFound, Unavailable
from openbus.daemon.history.liveness import LivenessProbe, PaneForPid
from openbus.daemon.history.model import (
    HARNESSES,
    PENDING_HARNESSES,
    Hit,
    Liveness,
    LiveState,
    ParsedSession,
    SessionEntry,
)
from openbus.daemon.history.parse import (
    make_title,
    parse_claude,
    parse_codex,
    parse_codex_thread_names,
    resume_argv,
)
from openbus.daemon.history.repo import RepoInfo, RepoResolver, normalize_repo_query
from openbus.daemon.history.sources import CLAUDE, CODEX, Sources, Transcript

Progress = Callable[[int, int], None]

DB_NAME = "history.db"
MAX_QUERY_TERMS = 16
MAX_LIMIT = 100
# bm25 weights: title, prompts, repo, cwd, branches, prs, repokeys (filter only)
WEIGHTS = (4.0, 1.0, 2.0, 1.0, 3.0, 3.0, 0.0)
TEXT_COLUMNS = "{title prompts repo cwd branches prs}"
# When more sessions than this match, the most recently indexed ones are ranked (rowids grow
# as sessions are (re)indexed, and reconcile indexes changed files oldest first).
CANDIDATES = 1000
# Every write transaction adds a segment to the full-text index and a search reads them all;
# after this many sessions written the segments are merged into one (at 100k sessions that
# takes half a second and makes searches about a quarter faster).
MERGE_AFTER = 1000
SCHEMA_VERSION = 2

STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "please",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "this",
        "to",
        "us",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY,
    harness TEXT NOT NULL,
    session_id TEXT NOT NULL,
    repo TEXT,
    repo_root TEXT,
    repo_short TEXT,
    origin TEXT,
    cwd TEXT,
    branches TEXT NOT NULL,
    prs TEXT NOT NULL,
    title TEXT,
    prompts TEXT NOT NULL,
    started REAL,
    last_active REAL,
    subagent INTEGER NOT NULL,
    parent_session_id TEXT,
    transcript TEXT,
    UNIQUE (harness, session_id)
);
CREATE INDEX IF NOT EXISTS sessions_repo ON sessions (repo);
CREATE INDEX IF NOT EXISTS sessions_repo_root ON sessions (repo_root);
CREATE INDEX IF NOT EXISTS sessions_repo_short ON sessions (repo_short);
CREATE INDEX IF NOT EXISTS sessions_parent ON sessions (harness, parent_session_id);
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    harness TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    session_id TEXT
);
CREATE VIRTUAL TABLE IF NOT EXISTS sessions_fts USING fts5(
    title, prompts, repo, cwd, branches, prs, repokeys,
    tokenize = 'unicode61 remove_diacritics 2'
);
"""

_COLUMNS = (
    "id, harness, session_id, repo, repo_root, origin, cwd, branches, prs, title, prompts, "
    "started, last_active, subagent, parent_session_id, transcript"
)
_TOKEN = re.compile(r"[^\W_]+")


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


def tokens(text: str) -> list[str]:
    """Words as the index sees them (close to FTS5's unicode61 with diacritics removed)."""
    if text.isascii():
        return _TOKEN.findall(text.lower())
    return _TOKEN.findall(_fold(text))


def query_terms(query: str) -> list[str]:
    """The search terms of a query: words, deduplicated, stopwords dropped unless that
    leaves nothing, at most ``MAX_QUERY_TERMS``."""
    seen: list[str] = []
    for term in tokens(query):
        if term not in seen:
            seen.append(term)
    content = [t for t in seen if t not in STOPWORDS]
    return (content or seen)[:MAX_QUERY_TERMS]


def fts_query(terms: Sequence[str], op: str = "OR") -> str:
    """Every term quoted as an FTS5 string, joined by AND or OR: user text never becomes
    FTS syntax."""
    assert op in ("AND", "OR")
    return f" {op} ".join('"' + t.replace('"', '""') + '"' for t in terms)


def repo_token(key: str) -> str:
    """One opaque word standing for a repo key (identity, toplevel path or owner/name)."""
    return "r" + hashlib.sha256(key.encode()).hexdigest()[:24]


def _repo_short(repo: str | None) -> str | None:
    if not repo or repo.startswith("/"):
        return None
    parts = repo.split("/")
    return "/".join(parts[-2:]) if len(parts) >= 3 else None


@dataclass
class ReconcileStats:
    scanned: int = 0
    changed: int = 0
    indexed: int = 0
    skipped: int = 0  # changed but not a session (empty, unparseable)
    gone: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "scanned": self.scanned,
            "changed": self.changed,
            "indexed": self.indexed,
            "skipped": self.skipped,
            "gone": self.gone,
            "errors": list(self.errors),
            "seconds": round(self.seconds, 3),
            "pending_harnesses": list(PENDING_HARNESSES),
        }


def _file_key(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _read_lines(path: Path) -> list[bytes]:
    with path.open("rb") as handle:
        return handle.readlines()


class HistoryIndex:
    def __init__(
        self,
        path: Path,
        sources: Sources,
        *,
        clock: Clock,
        pane_for_pid: PaneForPid | None = None,
        liveness: LivenessProbe | None = None,
    ) -> None:
        self.path = path
        self.sources = sources
        self.clock = clock
        self.liveness_probe = liveness or LivenessProbe(
            sources.claude_dirs, clock=clock, pane_for_pid=pane_for_pid
        )
        self._lock = threading.RLock()
        self._reconciling = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._db = sqlite3.connect(
                str(path), check_same_thread=False, isolation_level=None, timeout=10.0
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=10000")
            with self._tx():
                self._create()
        except sqlite3.Error as exc:
            raise Unavailable(f"cannot open the history index {path}: {exc}") from None
        with contextlib.suppress(OSError):
            os.chmod(path, 0o600)
        self.last_reconcile: float | None = None
        self._unmerged = 0  # sessions written since the full-text segments were last merged

    def _create(self) -> None:
        """The schema; an index of an older schema is dropped and rebuilt by reconcile (it
        holds only what the transcripts can give again)."""
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            for table in ("sessions_fts", "sessions", "files"):
                self._db.execute(f"DROP TABLE IF EXISTS {table}")
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                self._db.execute(statement)
        self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    # ---------------------------------------------------------------- plumbing

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _tx(self) -> _Transaction:
        return _Transaction(self._db, self._lock)

    def count(self) -> int:
        with self._lock:
            row = self._db.execute("SELECT count(*) FROM sessions").fetchone()
        return int(row[0])

    def _row_entry(self, row: Sequence[Any]) -> SessionEntry:
        (
            _id,
            harness,
            session_id,
            repo,
            repo_root,
            origin,
            cwd,
            branches,
            prs,
            title,
            prompts,
            started,
            last_active,
            subagent,
            parent,
            transcript,
        ) = row
        return SessionEntry(
            harness=harness,
            session_id=session_id,
            repo=repo,
            repo_root=repo_root,
            origin=origin,
            cwd=cwd,
            branches=tuple(json.loads(branches)),
            prs=tuple(json.loads(prs)),
            title=title,
            prompts=tuple(json.loads(prompts)),
            started=started,
            last_active=last_active,
            resume_argv=resume_argv(harness, session_id, subagent=bool(subagent))
            if transcript
            else None,
            subagent=bool(subagent),
            parent_session_id=parent,
            transcript=transcript,
        )

    # ---------------------------------------------------------------- writing

    def upsert(self, entry: SessionEntry) -> None:
        with self._tx():
            self._upsert(entry)

    def upsert_many(self, entries: Iterable[SessionEntry]) -> int:
        n = 0
        with self._tx():
            for entry in entries:
                self._upsert(entry)
                n += 1
        self._merge_segments()
        return n

    def _merge_segments(self) -> None:
        """Merge the full-text index into one segment once ``MERGE_AFTER`` sessions were
        written since the last merge (FTS5's ``optimize``)."""
        with self._lock:
            if self._unmerged < MERGE_AFTER:
                return
            with self._tx():
                self._db.execute("INSERT INTO sessions_fts (sessions_fts) VALUES ('optimize')")
            self._unmerged = 0

    def _upsert(self, e: SessionEntry) -> None:
        """Replace the entry; it gets a fresh (highest) rowid, so rowid order is the order
        sessions were last indexed in."""
        db = self._db
        self._delete(*e.key)
        values = (
            e.repo,
            e.repo_root,
            _repo_short(e.repo),
            e.origin,
            e.cwd,
            json.dumps(list(e.branches)),
            json.dumps(list(e.prs)),
            e.title,
            json.dumps(list(e.prompts)),
            e.started,
            e.last_active,
            int(e.subagent),
            e.parent_session_id,
            e.transcript,
        )
        cur = db.execute(
            "INSERT INTO sessions (harness, session_id, repo, repo_root, repo_short, origin,"
            " cwd, branches, prs, title, prompts, started, last_active, subagent,"
            " parent_session_id, transcript) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (*e.key, *values),
        )
        rowid = cur.lastrowid
        self._unmerged += 1
        keys = {k for k in (e.repo, e.repo_root, _repo_short(e.repo)) if k}
        db.execute(
            "INSERT INTO sessions_fts (rowid, title, prompts, repo, cwd, branches, prs, repokeys)"
            " VALUES (?,?,?,?,?,?,?,?)",
            (
                rowid,
                e.title or "",
                "\n".join(e.prompts),
                " ".join(x for x in (e.repo, e.repo_root, e.origin) if x),
                e.cwd or "",
                " ".join(e.branches),
                " ".join(e.prs),
                " ".join(sorted(repo_token(k) for k in keys)),
            ),
        )

    def _delete(self, harness: str, session_id: str) -> None:
        row = self._db.execute(
            "SELECT id FROM sessions WHERE harness = ? AND session_id = ?", (harness, session_id)
        ).fetchone()
        if row is None:
            return
        self._db.execute("DELETE FROM sessions_fts WHERE rowid = ?", (row[0],))
        self._db.execute("DELETE FROM sessions WHERE id = ?", (row[0],))

    def _existing(self, harness: str, session_id: str) -> SessionEntry | None:
        row = self._db.execute(
            f"SELECT {_COLUMNS} FROM sessions WHERE harness = ? AND session_id = ?",
            (harness, session_id),
        ).fetchone()
        return self._row_entry(row) if row else None

    def _entry_from(
        self,
        parsed: ParsedSession,
        transcript: Path,
        resolve: Callable[[str | None], RepoInfo | None],
    ) -> SessionEntry:
        info = resolve(parsed.cwd)
        repo = repo_root = None
        origin = parsed.origin
        if info is not None:
            repo, repo_root, origin = info.repo, info.root, info.origin or parsed.origin
        else:
            with self._lock:
                old = self._existing(parsed.harness, parsed.session_id)
            if old is not None and old.cwd == parsed.cwd:
                repo, repo_root, origin = old.repo, old.repo_root, old.origin or origin
            elif origin:
                repo = RepoInfo(root="", origin=origin).repo
        return SessionEntry(
            harness=parsed.harness,
            session_id=parsed.session_id,
            repo=repo,
            repo_root=repo_root,
            origin=origin,
            cwd=parsed.cwd,
            branches=parsed.branches,
            prs=parsed.prs,
            title=parsed.title,
            prompts=parsed.prompts,
            started=parsed.started,
            last_active=parsed.last_active,
            resume_argv=resume_argv(parsed.harness, parsed.session_id, subagent=parsed.subagent),
            subagent=parsed.subagent,
            parent_session_id=parsed.parent_session_id,
            transcript=str(transcript),
        )

    # ---------------------------------------------------------------- parsing one file

    def _thread_names(self, home: Path) -> dict[str, str]:
        try:
            return parse_codex_thread_names(_read_lines(home / "session_index.jsonl"))
        except OSError:
            return {}

    def _parse(
        self, t: Transcript, names: Mapping[str, str]
    ) -> tuple[ParsedSession | None, tuple[int, int, int]]:
        st = t.path.stat()
        lines = _read_lines(t.path)
        parsed: ParsedSession | None
        if t.harness == CLAUDE:
            parsed = parse_claude(lines, file_name=t.path.name)
        else:
            parsed = parse_codex(lines, thread_names=names)
        if parsed is not None and parsed.last_active is None:
            parsed = _with_times(parsed, st.st_mtime)
        return parsed, _file_key(st)

    def _index_file(
        self,
        t: Transcript,
        names: Mapping[str, str],
        resolve: Callable[[str | None], RepoInfo | None],
    ) -> SessionEntry | None:
        parsed, key = self._parse(t, names)
        entry = self._entry_from(parsed, t.path, resolve) if parsed is not None else None
        with self._tx():
            if entry is not None:
                self._upsert(entry)
            self._db.execute(
                "INSERT INTO files (path, harness, size, mtime_ns, inode, session_id)"
                " VALUES (?,?,?,?,?,?) ON CONFLICT(path) DO UPDATE SET size=excluded.size,"
                " mtime_ns=excluded.mtime_ns, inode=excluded.inode,"
                " session_id=excluded.session_id",
                (str(t.path), t.harness, *key, entry.session_id if entry else None),
            )
        return entry

    # ---------------------------------------------------------------- reconcile

    def reconcile(
        self, progress: Progress | None = None, cancel: threading.Event | None = None
    ) -> ReconcileStats:
        """Re-parse the transcripts that changed since the last pass; one pass at a time.
        ``progress(done, total)`` is called as files are parsed; ``cancel`` stops early."""
        with self._reconciling:
            return self._reconcile(progress, cancel)

    def forget_files(self) -> None:
        """Make the next reconcile re-parse every transcript."""
        with self._tx():
            self._db.execute("DELETE FROM files")

    def reconcile_running(self) -> bool:
        return self._reconciling.locked()

    def _reconcile(
        self, progress: Progress | None, cancel: threading.Event | None
    ) -> ReconcileStats:
        started = time.monotonic()
        stats = ReconcileStats()
        with self._lock:
            known = {
                row[0]: (row[1], row[2], row[3], row[4], row[5])
                for row in self._db.execute(
                    "SELECT path, size, mtime_ns, inode, harness, session_id FROM files"
                )
            }
        found: list[tuple[Transcript, tuple[int, int, int]]] = []
        seen: set[str] = set()
        for t in self.sources.transcripts():
            try:
                st = t.path.stat()
            except OSError:
                continue
            seen.add(str(t.path))
            found.append((t, _file_key(st)))
        stats.scanned = len(found)
        changed = [
            (key[1], t) for t, key in found if known.get(str(t.path), (None,) * 5)[:3] != key
        ]
        changed.sort(key=lambda pair: pair[0])  # oldest first: newest sessions get top rowids
        stats.changed = len(changed)
        names = {str(home): self._thread_names(home) for home in self.sources.codex_homes}
        resolve = RepoResolver()
        total = len(changed)
        if progress:
            progress(0, total)
        for done, (_mtime, t) in enumerate(changed, 1):
            if cancel is not None and cancel.is_set():
                stats.seconds = time.monotonic() - started
                return stats
            try:
                entry = self._index_file(t, names.get(str(t.root), {}), resolve)
            except (OSError, sqlite3.Error) as exc:
                stats.errors.append(f"{t.path}: {exc}")
            else:
                if entry is None:
                    stats.skipped += 1
                else:
                    stats.indexed += 1
            if progress:
                progress(done, total)
        stats.gone = self._forget_gone(known, seen)
        self._retitle_codex(names)
        self._merge_segments()  # searches meanwhile go off the event loop (a reconcile runs)
        self.last_reconcile = self.clock.monotonic()
        stats.seconds = time.monotonic() - started
        return stats

    def _forget_gone(self, known: Mapping[str, tuple[Any, ...]], seen: set[str]) -> int:
        gone = 0
        for path, (_s, _m, _i, harness, session_id) in known.items():
            if path in seen or self.sources.root_of(Path(path)) is None:
                continue
            if os.path.exists(path):
                continue
            gone += 1
            with self._tx():
                self._db.execute("DELETE FROM files WHERE path = ?", (path,))
                if session_id:
                    self._db.execute(
                        "UPDATE sessions SET transcript = NULL"
                        " WHERE harness = ? AND session_id = ? AND transcript = ?",
                        (harness, session_id, path),
                    )
        return gone

    def _retitle_codex(self, names: Mapping[str, Mapping[str, str]]) -> None:
        for home_names in names.values():
            for session_id, name in home_names.items():
                with self._lock:
                    old = self._existing(CODEX, session_id)
                if old is None:
                    continue
                title = make_title(name, old.prompts)
                if title != old.title:
                    self.upsert(_replace_title(old, title))

    # ---------------------------------------------------------------- push (hooks)

    def push(
        self,
        *,
        transcript_path: str | Path | None = None,
        harness: str | None = None,
        session_id: str | None = None,
    ) -> SessionEntry | None:
        """Index one transcript now: by its path, or by harness and session id."""
        if transcript_path is not None:
            path = Path(transcript_path).expanduser()
            owner = self.sources.root_of(path)
            if owner is None:
                guessed = _guess_harness(path)
                if guessed is None:
                    raise BadRequest(
                        f"{path} is not a Claude Code or Codex transcript", field="transcript_path"
                    )
                owner = (guessed, path.parent)
            t = Transcript(owner[0], path, owner[1])
        else:
            if not harness or not session_id:
                raise BadRequest("give a transcript path, or a harness and a session id")
            found = self.find_transcript(harness, session_id)
            if found is None:
                raise NotFound(f"no transcript for {harness} session {session_id}")
            t = found
        if not t.path.is_file():
            raise NotFound(f"no transcript at {t.path}", field="transcript_path")
        names = self._thread_names(t.root) if t.harness == CODEX else {}
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
            for p in paths:
                if Path(p).expanduser().is_file():
                    entry = self.push(transcript_path=p)
                    if entry is not None:
                        entries.append(entry)
            return entries
        session_id = hook.get("session_id")
        if isinstance(session_id, str) and session_id:
            entry = self.push(harness=CLAUDE, session_id=session_id)
            return [entry] if entry else []
        raise BadRequest("the hook input names no transcript_path or session_id")

    def find_transcript(self, harness: str, session_id: str) -> Transcript | None:
        if harness == CLAUDE:
            for root in self.sources.claude_dirs:
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
            for root in self.sources.codex_homes:
                for sub in ("sessions", "archived_sessions"):
                    base = root / sub
                    if base.is_dir():
                        for candidate in sorted(base.rglob(f"rollout-*{session_id}.jsonl")):
                            return Transcript(CODEX, candidate, root)
        return None

    # ---------------------------------------------------------------- reading

    def get(self, harness: str, session_id: str) -> SessionEntry:
        _check_key(harness, session_id)
        with self._lock:
            entry = self._existing(harness, session_id)
        if entry is None:
            raise NotFound(f"no {harness} session {session_id} in the history index")
        return entry

    def search(self, query: str, repo: str | None = None, limit: int = 10) -> list[Hit]:
        if not isinstance(query, str):
            raise BadRequest("the query must be text", field="q")
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
            raise BadRequest(f"limit must be between 1 and {MAX_LIMIT}", field="limit")
        terms = query_terms(query)
        if not terms:
            raise BadRequest("the query has no words to search for", field="q")
        repo_filter = ""
        if repo is not None and repo.strip():
            repo_filter = f' AND repokeys : "{repo_token(normalize_repo_query(repo))}"'
        anyterm = f"{TEXT_COLUMNS} : ({fts_query(terms, 'OR')})" + repo_filter
        every = f"{TEXT_COLUMNS} : ({fts_query(terms, 'AND')})" + repo_filter
        with self._lock:
            ranked = self._ranked(anyterm, every if len(terms) > 1 else None, limit)
            rows = self._rows(list(ranked))
        hits: list[Hit] = []
        for rowid, score in ranked.items():
            entry = rows[rowid]
            hits.append(Hit(entry, score, matched_terms(entry, terms)))
        return hits

    def _ranked(self, anyterm: str, every: str | None, limit: int) -> dict[int, float]:
        """The ``limit`` best rowids with their bm25 scores: sessions matching every term
        first, then those matching some, each group by score.

        Candidates are the newest ``CANDIDATES`` sessions matching any term (the repo filter
        is part of both queries, so it narrows them before anything is ranked or limited),
        scored and marked full or partial in one statement. When that cut something off, the
        full matches are instead the newest ``CANDIDATES`` sessions matching every term,
        scored on their own: full matches reach as far back as if they were ranked alone."""
        weights = ", ".join(str(w) for w in WEIGHTS)
        score = f"bm25(sessions_fts, {weights})"
        if every is None:  # one term: every match is a full one
            rows = self._db.execute(
                f"SELECT rowid, {score}, 1 FROM sessions_fts WHERE sessions_fts MATCH ?"
                " ORDER BY rowid DESC LIMIT ?",
                (anyterm, CANDIDATES),
            ).fetchall()
        else:
            rows = self._db.execute(
                f"SELECT rowid, {score}, rowid IN (SELECT rowid FROM sessions_fts"
                " WHERE sessions_fts MATCH ?) FROM sessions_fts WHERE sessions_fts MATCH ?"
                " ORDER BY rowid DESC LIMIT ?",
                (every, anyterm, CANDIDATES),
            ).fetchall()
        full = [(s, -r) for r, s, is_full in rows if is_full]
        partial = [(s, -r) for r, s, is_full in rows if not is_full]
        if every is not None and len(rows) == CANDIDATES:
            full = [
                (s, -r)
                for r, s in self._db.execute(
                    f"SELECT rowid, {score} FROM sessions_fts WHERE sessions_fts MATCH ?"
                    " ORDER BY rowid DESC LIMIT ?",
                    (every, CANDIDATES),
                )
            ]
        best = heapq.nsmallest(limit, full)
        best += heapq.nsmallest(limit - len(best), partial)
        return {-r: float(s) for s, r in best}

    def _rows(self, rowids: Sequence[int]) -> dict[int, SessionEntry]:
        if not rowids:
            return {}
        marks = ",".join("?" * len(rowids))
        found = self._db.execute(
            f"SELECT {_COLUMNS} FROM sessions WHERE id IN ({marks})",
            list(rowids),
        ).fetchall()
        return {row[0]: self._row_entry(row) for row in found}

    def liveness(self, entry: SessionEntry) -> Liveness:
        return self.liveness_probe.of(entry)

    def recent(self, limit: int = 20) -> list[SessionEntry]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM sessions ORDER BY last_active DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [self._row_entry(r) for r in rows]

    # ---------------------------------------------------------------- expunge

    def expunge(self, harness: str, session_id: str) -> list[str]:
        """Remove the entry and its transcript file(s); returns the paths removed."""
        entry = self.get(harness, session_id)
        if self.liveness(entry).state is LiveState.RUNNING:
            raise Conflict(f"{harness} session {session_id} is running; end it before expunging it")
        doomed: list[SessionEntry] = [entry]
        if harness == CLAUDE and not entry.subagent:
            with self._lock:
                rows = self._db.execute(
                    f"SELECT {_COLUMNS} FROM sessions"
                    " WHERE harness = ? AND parent_session_id = ? AND subagent = 1",
                    (CLAUDE, session_id),
                ).fetchall()
            doomed += [self._row_entry(r) for r in rows]
        removed: list[str] = []
        for victim in doomed:
            for path in _transcript_files(victim):
                try:
                    if path.is_dir():
                        shutil.rmtree(path)
                    else:
                        path.unlink()
                except FileNotFoundError:
                    continue
                removed.append(str(path))
        with self._tx():
            for victim in doomed:
                self._delete(victim.harness, victim.session_id)
                if victim.transcript:
                    self._db.execute("DELETE FROM files WHERE path = ?", (victim.transcript,))
            self._db.execute(
                "DELETE FROM files WHERE session_id = ? AND harness = ?", (session_id, harness)
            )
        self._drop_history_lines(entry)
        return removed

    def _drop_history_lines(self, entry: SessionEntry) -> None:
        """The session's lines in the harness's prompt history and thread-name index."""
        sid = entry.session_id
        if entry.harness == CLAUDE:
            for root in self.sources.claude_dirs:
                _drop_lines(root / "history.jsonl", lambda rec: rec.get("sessionId") == sid)
        elif entry.harness == CODEX:
            for root in self.sources.codex_homes:
                _drop_lines(root / "history.jsonl", lambda rec: rec.get("session_id") == sid)
                _drop_lines(root / "session_index.jsonl", lambda rec: rec.get("id") == sid)


class _Transaction:
    def __init__(self, db: sqlite3.Connection, lock: threading.RLock) -> None:
        self.db = db
        self.lock = lock
        self.depth_outer = False

    def __enter__(self) -> None:
        self.lock.acquire()
        self.depth_outer = not self.db.in_transaction
        if self.depth_outer:
            self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        try:
            if self.depth_outer:
                self.db.execute("ROLLBACK" if kind is not None else "COMMIT")
        finally:
            self.lock.release()


def matched_terms(entry: SessionEntry, terms: Sequence[str]) -> tuple[str, ...]:
    words: set[str] = set()
    for text in (
        entry.title or "",
        *entry.prompts,
        entry.repo or "",
        entry.repo_root or "",
        entry.origin or "",
        entry.cwd or "",
        *entry.branches,
        *entry.prs,
    ):
        words.update(tokens(text))
    return tuple(t for t in terms if t in words)


def in_repo(entry: SessionEntry, repo: str) -> bool:
    """Whether ``entry`` is in ``repo`` (an identity, toplevel path or owner/name), by the
    same keys the search filter uses."""
    key = normalize_repo_query(repo)
    return key in {k for k in (entry.repo, entry.repo_root, _repo_short(entry.repo)) if k}


def _check_key(harness: str, session_id: str) -> None:
    if harness not in HARNESSES:
        raise BadRequest(
            f"harness must be one of {', '.join(HARNESSES)}"
            + (f" ({harness} is pending)" if harness in PENDING_HARNESSES else ""),
            field="harness",
        )
    if not isinstance(session_id, str) or not re.fullmatch(
        r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}", session_id
    ):
        raise BadRequest("not a valid session id", field="session_id")


def _guess_harness(path: Path) -> str | None:
    if path.name.startswith("rollout-") and path.suffix == ".jsonl":
        return CODEX
    if path.suffix == ".jsonl" and "projects" in path.parts:
        return CLAUDE
    return None


def _transcript_files(entry: SessionEntry) -> list[Path]:
    if not entry.transcript:
        return []
    path = Path(entry.transcript)
    files = [path]
    if entry.harness == CLAUDE and not entry.subagent:
        companion = path.with_suffix("")  # <session>/ holds subagents and tool results
        if companion.is_dir() and companion.name == entry.session_id:
            files.append(companion)
    return files


def _with_times(parsed: ParsedSession, mtime: float) -> ParsedSession:
    return replace(parsed, last_active=mtime, started=parsed.started or mtime)


def _replace_title(entry: SessionEntry, title: str | None) -> SessionEntry:
    return replace(entry, title=title)


def _drop_lines(path: Path, doomed: Callable[[dict[str, Any]], bool], attempts: int = 5) -> None:
    """Rewrite a JSONL file without the doomed lines, atomically, and only if nobody
    appended meanwhile (else try again)."""
    for _ in range(attempts):
        try:
            before = path.stat()
            raw = path.read_bytes()
        except OSError:
            return
        kept: list[bytes] = []
        dropped = False
        for line in raw.splitlines(keepends=True):
            try:
                rec = json.loads(line)
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
