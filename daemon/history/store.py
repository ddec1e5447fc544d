"""The history index's own SQLite database (``history.db``, WAL) with FTS5 and bm25.

Tables: ``sessions`` (one row per (harness, session id): the entry, and what screening its
shown text for secrets found, under which masking rules), ``sessions_fts_<k>``
(the full-text index, FTS5 over title, prompts, repo, cwd, branches, PRs and the repo keys;
rowid = ``sessions.id``), ``sessions_scope_<k>`` (the repos' own terms: the same text columns
of each entry with a repo identity, every word prefixed with that repo's token), both
contentless (terms only: the text is the entry's, kept once, in ``sessions``),
``files`` (one row per transcript file seen: its (size, mtime_ns, inode) at the last parse,
and the session it produced) and ``meta`` (the shard size). An entry is written with a fresh,
highest rowid, so rowid order is the order sessions were last indexed in. An index of another
schema version or shard size is dropped and rebuilt by reconcile: it holds only what the
transcripts can give again (an index of schema 6 gains the screening's two columns instead:
its entries are screened again by the next pass).

Screening: an entry is written unscreened; a later pass (``unscreened``, ``mark_screened``,
a batch at a time, the masking outside the lock) asks the masker whether the text an agent is
shown of it (``project.shown_texts``) holds anything to mask, and keeps the answer with the
masker's fingerprint (``screened_under``, ``shown_clean``). A read gives it as the entry's
``clean_under``: that fingerprint when it was found clean, else None. So a reconcile writes
at the rate it did, and a search's hits need not be masked again on every answer. A pass
marks an entry only while it still holds the text that was screened (a rewritten entry is
unscreened again), and an entry screened under other rules counts as unscreened.

The full-text index is sharded by rowid range: shard ``k`` holds rowids ``k * shard_rows`` to
``(k + 1) * shard_rows - 1``, so the newest shard holds the newest sessions. An upsert deletes
the old row from its shard and writes the new one to the newest; a shard left empty is dropped.

A ranked search scores by bm25 with column weights the newest ``CANDIDATES`` sessions
matching every term and the newest ``CANDIDATES`` matching any term, each a walk down the
shards, newest first, that stops there, or earlier once the shards walked span the newest
``WINDOW`` sessions and what they gave fills the limit (an older match then ranks only when the
newer ones do not fill the page); full matches rank first, then partial ones (the second walk
only when fewer than the limit match every term), so the rows scored are bounded however many
sessions match (a million as a thousand). bm25 reads the whole list of each term once a
query in each shard it scores in (its document count): sharding bounds that by a shard's list
where a term is common, not the whole index's. Each shard's bm25 weighs a term by that shard's
own document counts, so scores from different shards are close but not strictly comparable:
the ranking keeps full matches before partial ones and the best score first within each.

A search within a repo identity (``scope_key``: ``host/owner/name``, which no toplevel path
nor owner/name can equal, so the sessions of that identity are exactly those the filter
finds) walks the scope tables instead, with the query's words prefixed the same way: a term's
list there holds only that repo's sessions, so bm25 reads a list the size of the repo's share
of a term rather than the shard's, with no repo conjunct; its document counts are the repo's
own. A scope row's rowid is its entry's id under its repo's bucket (``scope_rowid``:
22 bits of the repo token above the id's 40), so one repo's rows sit together, in id order:
bm25 looks up each candidate's column sizes by rowid, and a repo's candidates then share a
few pages of that table rather than each reading its own (a search's rows are scattered
across the whole fleet's otherwise). Any other repo filter is a conjunct on ``repokeys`` in
the full-text tables. The full-text tables keep no text: an entry leaves them by FTS5's
``delete`` with the values it was written with, made again from the stored entry
(``text_row``, ``scope_row``).

One connection, shared by the daemon's event loop and a reconcile thread under a lock; the
WAL's checkpoints run beside it (``checkpoint``). A
reconcile parses transcripts outside the lock and writes them a batch at a time
(``record_files``: one transaction, so one commit and one new full-text segment rather than
one per file, each kind of write one statement for the batch); a search waits at most one
batch's writes.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any, NamedTuple

from openbus.daemon.history.checkpoint import WRITER_PAGES, Checkpointer
from openbus.daemon.history.files import FileKey
from openbus.daemon.history.model import HARNESSES, PENDING_HARNESSES, SessionEntry
from openbus.daemon.history.parse import resume_argv
from openbus.daemon.history.project import SHOWN_TEXT_FIELDS
from openbus.daemon.history.query import (
    repo_bucket,
    repo_keys,
    repo_short,
    repo_token,
    scope_keys,
    scoped_words,
)
from openbus.kernel.errors import BadRequest, NotFound, Unavailable

KnownFile = tuple[int, int, int, str, str | None]  # FileKey, harness, session id
ScopeRow = tuple[int, tuple[str, ...]]  # a scope table's rowid (``scope_rowid``), its values


class KnownRepo(NamedTuple):
    """What an entry holds of its repo, and the cwd it was read with."""

    cwd: str | None
    repo: str | None
    repo_root: str | None
    origin: str | None


# a write: the transcript (None: an entry with no file row), its harness, its key, its entry
Written = tuple[str | Path | None, str, FileKey, SessionEntry | None]

DB_NAME = "history.db"
# bm25 weights: title, prompts, repo, cwd, branches, prs, repokeys (filter only)
WEIGHTS = (4.0, 1.0, 2.0, 1.0, 3.0, 3.0, 0.0)
SCOPE_WEIGHTS = WEIGHTS[:6]  # the same columns, without the repo keys
# When more sessions than this match, the most recently indexed ones are ranked.
CANDIDATES = 1000
# ... or, once this many of the newest sessions were searched, the matches found there if they
# fill the limit: a match older than this only ranks when the newer ones do not fill the page.
WINDOW = 200_000
# Every write transaction adds a segment to the full-text index and a search reads them all;
# merge after this many sessions written (bench/bench_history.py measures the trade).
MERGE_AFTER = 1000
# Sessions per full-text shard (bench/bench_history.py measures the trade).
SHARD_ROWS = 100_000
# 4: the repos' own terms (``sessions_scope_<k>``); 5: text not kept twice; 6: scope rows by
# repo; 7: what screening each entry's shown text found (kept from 6, the two columns added)
SCHEMA_VERSION = 7
_SCREENING = (
    "ALTER TABLE sessions ADD COLUMN screened_under INTEGER",
    "ALTER TABLE sessions ADD COLUMN shown_clean INTEGER",
)
FTS_PREFIX = "sessions_fts_"
# A scope row's rowid: its repo's bucket above the entry's id (``scope_rowid``). Ids stay below
# 2**40 (a trillion writes); the bucket's 22 bits keep the rowid below 2**62.
SCOPE_ID_BITS = 40
SCOPE_ID_MASK = (1 << SCOPE_ID_BITS) - 1
SCOPE_PREFIX = "sessions_scope_"
BUSY_TIMEOUT_MS = 10_000
CUT_WAL_WAIT_MS = 1000  # an expunge's WAL checkpoint waits this long for a reader holding it

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
    screened_under INTEGER,
    shown_clean INTEGER,
    UNIQUE (harness, session_id)
);
CREATE INDEX IF NOT EXISTS sessions_parent ON sessions (harness, parent_session_id);
CREATE INDEX IF NOT EXISTS sessions_screened ON sessions (screened_under);
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    harness TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    session_id TEXT
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""

_COLUMNS = (
    "id, harness, session_id, repo, repo_root, origin, cwd, branches, prs, title, prompts, "
    "started, last_active, subagent, parent_session_id, transcript,"
    " CASE WHEN shown_clean THEN screened_under END"
)
_COLUMNS_BUT_PROMPTS = _COLUMNS.replace(" prompts,", " '[]',")  # the same row, prompts empty


def shard_table(shard: int) -> str:
    """The full-text table of shard ``shard``."""
    return f"{FTS_PREFIX}{shard}"


def scope_table(shard: int) -> str:
    """The full-text table of the repos' own terms of shard ``shard``."""
    return f"{SCOPE_PREFIX}{shard}"


def create_shard(db: sqlite3.Connection, shard: int) -> None:
    """A shard's two full-text tables, both contentless (only terms: the text is the
    entries'): every entry's text, and the text of the entries with a repo identity as that
    repo's own terms (``scoped_words``)."""
    db.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {shard_table(shard)} USING fts5("
        " title, prompts, repo, cwd, branches, prs, repokeys, content = '',"
        " tokenize = 'unicode61 remove_diacritics 2')"
    )
    db.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {scope_table(shard)} USING fts5("
        " title, prompts, repo, cwd, branches, prs, content = '',"
        " tokenize = 'unicode61 remove_diacritics 2')"
    )


def shard_tables(db: sqlite3.Connection, prefix: str = FTS_PREFIX) -> list[int]:
    """The shards that exist (of the tables named ``prefix``), newest first."""
    rows = db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB ?",
        (prefix + "[0-9]*",),
    ).fetchall()
    names = (str(r[0])[len(prefix) :] for r in rows)
    return sorted((int(n) for n in names if n.isdigit()), reverse=True)


class HistoryStore:
    def __init__(self, path: Path, shard_rows: int = SHARD_ROWS) -> None:
        self._lock = threading.RLock()
        self.shard_rows = shard_rows
        self._unmerged = 0  # sessions written since the full-text segments were last merged
        self._written: set[int] = set()  # shards written since then
        self._shards: list[int] = []  # newest first
        self._schema_seen = -1  # PRAGMA schema_version when ``_shards`` was read
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._db = sqlite3.connect(
                str(path), check_same_thread=False, isolation_level=None, timeout=10.0
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA secure_delete=ON")  # whatever the build's default
            self._db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._db.execute(f"PRAGMA wal_autocheckpoint={WRITER_PAGES}")
        except sqlite3.Error as exc:
            raise Unavailable(f"cannot open the history index {path}: {exc}") from None
        self._checkpoints = Checkpointer(path)
        self._held = 0  # ``checkpoints_held`` blocks open
        try:
            with self._tx():
                self._create()
        except sqlite3.Error as exc:
            self.close()
            raise Unavailable(f"cannot open the history index {path}: {exc}") from None
        with contextlib.suppress(OSError):
            os.chmod(path, 0o600)

    def _create(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version in (6, SCHEMA_VERSION) and self._stored_shard_rows() != self.shard_rows:
            version = -1
        if version == 6:
            for statement in _SCREENING:
                self._db.execute(statement)
        elif version != SCHEMA_VERSION:
            tables = ["sessions_fts", "sessions", "files", "meta"]
            tables += [shard_table(k) for k in shard_tables(self._db)]
            tables += [scope_table(k) for k in shard_tables(self._db, SCOPE_PREFIX)]
            for table in tables:
                self._db.execute(f"DROP TABLE IF EXISTS {table}")
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                self._db.execute(statement)
        self._db.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('shard_rows', ?)",
            (str(self.shard_rows),),
        )
        self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _stored_shard_rows(self) -> int | None:
        try:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'shard_rows'").fetchone()
        except sqlite3.OperationalError:  # no meta table
            return None
        return int(row[0]) if row else None

    def _shard_list(self) -> list[int]:
        """The shards, newest first, read again when the schema changed (another connection
        may have added or dropped one)."""
        seen = self._db.execute("PRAGMA schema_version").fetchone()[0]
        if seen != self._schema_seen:
            self._shards = shard_tables(self._db)
            self._schema_seen = seen
        return self._shards

    def close(self) -> None:
        self._checkpoints.close()
        with self._lock:
            self._db.close()

    def _tx(self) -> _Transaction:
        return _Transaction(self._db, self._lock, self._committed)

    def _committed(self) -> None:
        if not self._held:
            self._checkpoints.committed()

    @contextlib.contextmanager
    def checkpoints_held(self) -> Iterator[None]:
        """The commits meanwhile checkpointed once, at the end, not one by one: a reconcile's
        batches copy their pages into the database file once (the writer's own checkpoint
        past ``WRITER_PAGES`` still bounds the WAL)."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            if not self._held:
                self._checkpoints.committed()

    # ---------------------------------------------------------------- reading

    def count(self) -> int:
        with self._lock:
            row = self._db.execute("SELECT count(*) FROM sessions").fetchone()
        return int(row[0])

    def get(self, harness: str, session_id: str) -> SessionEntry:
        _check_key(harness, session_id)
        entry = self.find(harness, session_id)
        if entry is None:
            raise NotFound(f"no {harness} session {session_id} in the history index")
        return entry

    def find(self, harness: str, session_id: str) -> SessionEntry | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE harness = ? AND session_id = ?",
                (harness, session_id),
            ).fetchone()
        return _row_entry(row) if row else None

    def ids_starting(self, harness: str, prefix: str, limit: int = 2) -> list[str]:
        """Session ids of ``harness`` that start with ``prefix`` (at most ``limit``)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT session_id FROM sessions "
                "WHERE harness = ? AND substr(session_id, 1, ?) = ? ORDER BY session_id LIMIT ?",
                (harness, len(prefix), prefix, limit),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def recent(self, limit: int = 20) -> list[SessionEntry]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM sessions ORDER BY last_active DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [_row_entry(r) for r in rows]

    def subagents(self, harness: str, session_id: str) -> list[SessionEntry]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM sessions"
                " WHERE harness = ? AND parent_session_id = ? AND subagent = 1",
                (harness, session_id),
            ).fetchall()
        return [_row_entry(r) for r in rows]

    def ranked(
        self,
        anyterm: str,
        every: str | None,
        limit: int,
        *,
        scoped: bool = False,
        prompts: bool = True,
    ) -> list[tuple[SessionEntry, float, bool]]:
        """The ``limit`` best entries with their bm25 scores (lower is better) for the
        ``MATCH`` expressions of any term and of every term (``None``: one term), over the
        repos' own terms when ``scoped`` (``scoped_expressions``), and whether each matched
        every term. Without ``prompts``, an entry that matched every term comes without its
        prompts (``()``): up to 20,000 characters a session, not read where no one shows
        them; a partial match's are read (what it holds is looked for in them)."""
        with self._lock, self._snapshot():
            ranked = self._ranked(anyterm, every, limit, scoped)
            bare = {r for r, (_, full) in ranked.items() if full and not prompts}
            rows = self._rows([r for r in ranked if r not in bare])
            rows |= self._rows(list(bare), prompts=False)
        return [(rows[rowid], score, full) for rowid, (score, full) in ranked.items()]

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[None]:
        """Several reads (under the lock) in one read transaction: one snapshot of the index,
        and the WAL's read locks taken once, not once per statement. Ended however the reads
        end, so no reader is left holding the WAL."""
        self._db.execute("BEGIN")
        try:
            yield
        finally:
            self._db.execute("COMMIT")

    def _ranked(
        self, anyterm: str, every: str | None, limit: int, scoped: bool
    ) -> dict[int, tuple[float, bool]]:
        # bounded walks down the full-text shards, newest first: every term, then any term. A
        # candidate matching every term is among the newest CANDIDATES full matches (they are
        # a subset of the candidates), so this is what marking each candidate would give,
        # without reading every full match to mark them.
        full = [(s, -r) for r, s in self._walk(every or anyterm, limit, scoped)]
        partial: list[tuple[float, int]] = []
        # one term: every match is a full one; ``limit`` full matches: no partial one ranks
        # among the best (bm25 reads the whole of each term's list in a shard: a walk is dear)
        if every is not None and len(full) < limit:
            whole = {-r for _, r in full}
            partial = [
                (s, -r)
                for r, s in self._walk(anyterm, limit - len(full), scoped, whole)
                if r not in whole
            ]
        best = [(s, r, True) for s, r in heapq.nsmallest(limit, full)]
        best += [(s, r, False) for s, r in heapq.nsmallest(limit - len(best), partial)]
        return {-r: (float(s), whole) for s, r, whole in best}

    def _walk(
        self,
        match: str,
        need: int,
        scoped: bool,
        skip: frozenset[int] | set[int] = frozenset(),
    ) -> list[tuple[int, float]]:
        """(rowid, bm25) of the newest ``CANDIDATES`` rows matching ``match``, shard by shard,
        newest first: it stops once there are that many, or once the shards walked span the
        newest ``WINDOW`` sessions and ``need`` of the rows found are not in ``skip``."""
        weights = ", ".join(str(w) for w in (SCOPE_WEIGHTS if scoped else WEIGHTS))
        rowid = f"rowid & {SCOPE_ID_MASK}" if scoped else "rowid"  # the session's id
        shards = self._shard_list()
        top = (shards[0] + 1) * self.shard_rows if shards else 0
        found: list[tuple[int, float]] = []
        kept = 0
        for shard in shards:
            table = scope_table(shard) if scoped else shard_table(shard)
            rows = self._db.execute(
                f"SELECT {rowid}, bm25({table}, {weights}) FROM {table}"
                f" WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT ?",
                (match, CANDIDATES - len(found)),
            ).fetchall()
            found += rows
            kept += sum(1 for r, _ in rows if r not in skip) if skip else len(rows)
            if len(found) >= CANDIDATES:
                break
            if top - shard * self.shard_rows >= WINDOW and kept >= need:
                break
        return found

    def _rows(self, rowids: Sequence[int], *, prompts: bool = True) -> dict[int, SessionEntry]:
        if not rowids:
            return {}
        marks = ",".join("?" * len(rowids))
        found = self._db.execute(
            f"SELECT {_COLUMNS if prompts else _COLUMNS_BUT_PROMPTS} FROM sessions"
            f" WHERE id IN ({marks})",
            list(rowids),
        ).fetchall()
        return {row[0]: _row_entry(row) for row in found}

    def known_repos(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], KnownRepo]:
        """The repos of the entries of these (harness, session id) keys that are held."""
        found: dict[tuple[str, str], KnownRepo] = {}
        with self._lock:
            for harness, chunk in _chunks_by_harness(keys):
                for row in self._db.execute(
                    "SELECT session_id, cwd, repo, repo_root, origin FROM sessions"
                    f" WHERE harness = ? AND session_id IN ({','.join('?' * len(chunk))})",
                    (harness, *chunk),
                ):
                    found[(harness, row[0])] = KnownRepo(*row[1:])
        return found

    def files(self) -> dict[str, KnownFile]:
        """Every transcript file seen, by path."""
        with self._lock:
            return {
                row[0]: (row[1], row[2], row[3], row[4], row[5])
                for row in self._db.execute(
                    "SELECT path, size, mtime_ns, inode, harness, session_id FROM files"
                )
            }

    # ---------------------------------------------------------------- screening

    def unscreened(self, fingerprint: int, limit: int) -> list[tuple[int, SessionEntry]]:
        """Up to ``limit`` entries (rowid, entry without its prompts) not yet screened under
        the rules of ``fingerprint``: never screened, or under other rules."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS_BUT_PROMPTS} FROM sessions WHERE {_UNSCREENED} LIMIT ?",
                (fingerprint, fingerprint, limit),
            ).fetchall()
        return [(row[0], _row_entry(row)) for row in rows]

    def count_unscreened(self, fingerprint: int) -> int:
        with self._lock:
            row = self._db.execute(
                f"SELECT count(*) FROM sessions WHERE {_UNSCREENED}", (fingerprint, fingerprint)
            ).fetchone()
        return int(row[0])

    def mark_screened(
        self, fingerprint: int, screened: Sequence[tuple[int, SessionEntry, bool]]
    ) -> int:
        """Keeps, for each (rowid, entry, clean) of ``unscreened``, that its shown text was
        found clean (or not) under the rules of ``fingerprint``, while the row still holds the
        text that was screened (a rowid written again since holds another entry, unscreened).
        Returns how many were marked."""
        with self._tx():
            before = self._db.total_changes
            self._db.executemany(
                "UPDATE sessions SET screened_under = ?, shown_clean = ? WHERE id = ? AND "
                + " AND ".join(f"{name} IS ?" for name in SHOWN_TEXT_FIELDS),
                (
                    (fingerprint, int(clean), rowid, *_stored_shown(e))
                    for rowid, e, clean in screened
                ),
            )
            return self._db.total_changes - before

    # ---------------------------------------------------------------- writing

    def upsert(self, entry: SessionEntry) -> None:
        with self._tx():
            self._write([(None, "", (0, 0, 0), entry)])

    def upsert_many(self, entries: Iterable[SessionEntry]) -> int:
        batch: list[Written] = [(None, "", (0, 0, 0), e) for e in entries]
        with self._tx():
            self._write(batch)
        self.merge_segments()
        return len(batch)

    def record_file(
        self, path: str | Path, harness: str, key: FileKey, entry: SessionEntry | None
    ) -> None:
        """The entry a transcript gave (if any) and the file's key, in one transaction."""
        with self._tx():
            self._write([(path, harness, key, entry)])

    def record_files(
        self, files: Sequence[tuple[str | Path, str, FileKey, SessionEntry | None]]
    ) -> list[str | None]:
        """``record_file`` for many transcripts in one transaction (one commit, one new
        full-text segment); per file, None or its error. When a write fails, the batch is
        rolled back and written again a file at a time, so only the failing file is lost."""
        try:
            with self._tx():
                self._write(files)
            return [None] * len(files)
        except sqlite3.Error:
            pass
        errors: list[str | None] = []
        for path, harness, key, entry in files:
            try:
                self.record_file(path, harness, key, entry)
            except sqlite3.Error as exc:
                errors.append(str(exc))
            else:
                errors.append(None)
        return errors

    def _write(self, files: Sequence[Written]) -> None:
        """Entries (each replacing the one of its key, the last of a key in ``files`` winning)
        with fresh rowids in their order, then the file rows (a path of None: no file), each
        kind of write one statement for the whole batch."""
        entries: dict[tuple[str, str], SessionEntry] = {}
        for _path, _harness, _key, entry in files:
            if entry is not None:
                entries.pop(entry.key, None)  # a later write of the key is the newer
                entries[entry.key] = entry
        if entries:
            self._delete_ids(self._ids(list(entries)))
            first = self._db.execute("SELECT coalesce(max(id), 0) + 1 FROM sessions").fetchone()[0]
            numbered = list(zip(range(first, first + len(entries)), entries.values(), strict=True))
            self._db.executemany(
                INSERT_SESSION_AT, ((rowid, *session_row(e)) for rowid, e in numbered)
            )
            shards = self._shard_list()
            texts = [(rowid, e, text_row(e)) for rowid, e in numbered]
            for shard, group in itertools.groupby(texts, key=lambda t: t[0] // self.shard_rows):
                if shard not in shards:
                    create_shard(self._db, shard)
                    shards = self._shard_list()
                self._written.add(shard)
                rows = ((rowid, *text) for rowid, _e, text in group)
                self._db.executemany(insert_text(shard), rows)
            self._scope(scope_row(rowid, e, text) for rowid, e, text in texts)
            self._unmerged += len(entries)
        self._db.executemany(
            "INSERT INTO files (path, harness, size, mtime_ns, inode, session_id)"
            " VALUES (?,?,?,?,?,?) ON CONFLICT(path) DO UPDATE SET size=excluded.size,"
            " mtime_ns=excluded.mtime_ns, inode=excluded.inode,"
            " session_id=excluded.session_id",
            (
                (str(path), harness, *key, entry.session_id if entry else None)
                for path, harness, key, entry in files
                if path is not None
            ),
        )

    def forget_file(self, path: str, harness: str, session_id: str | None) -> None:
        """A transcript file that is gone: its row, and its entry's transcript (the entry
        stays, without a resume argv)."""
        with self._tx():
            self._db.execute("DELETE FROM files WHERE path = ?", (path,))
            if session_id:
                self._db.execute(
                    "UPDATE sessions SET transcript = NULL"
                    " WHERE harness = ? AND session_id = ? AND transcript = ?",
                    (harness, session_id, path),
                )

    def forget_files(self) -> None:
        """Make the next reconcile re-parse every transcript."""
        with self._tx():
            self._db.execute("DELETE FROM files")

    def remove(self, entry: SessionEntry, subagents: Sequence[SessionEntry] = ()) -> bool:
        """The entry and its subagents' entries, with every file row of theirs, and what they
        leave in the index's files wiped (``_wipe``, in the same transaction; then the WAL cut):
        an expunged session's text is not in them afterwards. False when the WAL could not be
        cut (another reader of the index held it): their text may stay there until it is."""
        victims = (entry, *subagents)
        with self._tx():
            rowids = self._ids([victim.key for victim in victims])
            self._delete_ids(rowids)
            for victim in victims:
                if victim.transcript:
                    self._db.execute("DELETE FROM files WHERE path = ?", (victim.transcript,))
            self._db.execute(
                "DELETE FROM files WHERE session_id = ? AND harness = ?",
                (entry.session_id, entry.harness),
            )
            self._wipe({rowid // self.shard_rows for rowid in rowids})
        return self._cut_wal()

    def _cut_wal(self) -> bool:
        """The WAL, which holds pages as they were, checkpointed into the database file and
        cut to nothing, waiting at most ``CUT_WAL_WAIT_MS`` for a reader that holds it (this
        thread's own checkpoints held off meanwhile: they would make it fail at once)."""
        with self._lock, self._checkpoints.paused():
            self._db.execute(f"PRAGMA busy_timeout={CUT_WAL_WAIT_MS}")
            try:
                busy = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            finally:
                self._db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        return not busy

    def _wipe(self, shards: set[int]) -> None:
        """Each of these full-text shards merged into one segment (``_optimize``): a
        contentless table's ``delete`` only masks an entry, whose terms stay in the older
        segments until a merge. The pages the merge frees are zeroed (``secure_delete``, on
        for this connection whatever the build's default)."""
        for shard in sorted(shards & set(self._shard_list())):
            self._optimize(shard)

    def _optimize(self, shard: int) -> None:
        """A shard's two full-text tables each merged into one segment (FTS5's ``optimize``)."""
        for table in (shard_table(shard), scope_table(shard)):
            self._db.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")

    def merge_segments(self) -> None:
        """Merge each full-text shard written since the last merge into one segment (FTS5's
        ``optimize``) once ``MERGE_AFTER`` sessions were written; drop the shards left empty."""
        with self._lock:
            if self._unmerged < MERGE_AFTER:
                return
            with self._tx():
                shards = self._shard_list()
                newest = shards[0] if shards else None
                for shard in sorted(self._written & set(shards)):
                    table = shard_table(shard)
                    empty = self._db.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is None
                    scope = scope_table(shard)
                    if empty and shard != newest:
                        self._db.execute(f"DROP TABLE {table}")
                        self._db.execute(f"DROP TABLE IF EXISTS {scope}")
                    else:
                        self._optimize(shard)
            self._unmerged = 0
            self._written.clear()

    def _ids(self, keys: Sequence[tuple[str, str]]) -> list[int]:
        """The rowids of the entries of these (harness, session id) keys."""
        found: list[int] = []
        for harness, chunk in _chunks_by_harness(keys):
            found += [
                int(r[0])
                for r in self._db.execute(
                    "SELECT id FROM sessions WHERE harness = ? AND session_id IN"
                    f" ({','.join('?' * len(chunk))})",
                    (harness, *chunk),
                )
            ]
        return found

    def _scope(self, scoped: Iterable[ScopeRow | None], command: str = "") -> None:
        """Entries' ``scope_row`` (None: none), written to their shards' scope tables
        (``command`` ""), or taken out of them (``"delete"``, with the same values: the tables
        keep no text to find them by)."""
        rows = sorted((row for row in scoped if row is not None), key=self._scope_shard)
        shards = self._shard_list()
        for shard, group in itertools.groupby(rows, key=self._scope_shard):
            if shard in shards:
                values = ((rowid, *row) for rowid, row in group)
                self._db.executemany(insert_scope(shard, command), values)

    def _scope_shard(self, row: ScopeRow) -> int:
        return (row[0] & SCOPE_ID_MASK) // self.shard_rows

    def _delete_ids(self, rowids: Sequence[int]) -> None:
        """The entries of these rowids, from ``sessions`` and from their full-text shards."""
        if not rowids:
            return
        old = [(rowid, text_row(e), e) for rowid, e in sorted(self._rows(rowids).items())]
        self._scope((scope_row(rowid, e, text) for rowid, text, e in old), "delete")
        shards = self._shard_list()
        for shard, group in itertools.groupby(old, key=lambda r: r[0] // self.shard_rows):
            if shard in shards:
                values = ((rowid, *text) for rowid, text, _e in group)
                self._db.executemany(insert_text(shard, "delete"), values)
                self._written.add(shard)
        self._db.executemany("DELETE FROM sessions WHERE id = ?", ((r,) for r in rowids))


_SESSION_COLUMNS = (
    "harness, session_id, repo, repo_root, repo_short, origin, cwd, branches, prs, title,"
    " prompts, started, last_active, subagent, parent_session_id, transcript"
)
INSERT_SESSION = f"INSERT INTO sessions ({_SESSION_COLUMNS}) VALUES ({','.join('?' * 16)})"
# the same with the rowid first
INSERT_SESSION_AT = f"INSERT INTO sessions (id, {_SESSION_COLUMNS}) VALUES ({','.join('?' * 17)})"


# an entry not screened under the rules of a fingerprint (given twice): a range of the
# ``sessions_screened`` index each, so a pass with nothing left reads next to nothing
_UNSCREENED = "(screened_under IS NULL OR screened_under < ? OR screened_under > ?)"


def _fts_write(table: str, columns: str, command: str) -> str:
    """An ``INSERT`` of ``columns`` into a full-text table; with a ``command``, that FTS5
    command (``"delete"``) with the same values."""
    marks = ",".join("?" * (columns.count(",") + 1))
    if command:
        return f"INSERT INTO {table} ({table}, {columns}) VALUES ('{command}',{marks})"
    return f"INSERT INTO {table} ({columns}) VALUES ({marks})"


def insert_text(shard: int, command: str = "") -> str:
    """The statement writing (``command`` "") or deleting (``"delete"``) an entry's text
    (``text_row``, after its rowid) in a shard."""
    columns = "rowid, title, prompts, repo, cwd, branches, prs, repokeys"
    return _fts_write(shard_table(shard), columns, command)


def insert_scope(shard: int, command: str = "") -> str:
    """The statement writing (``command`` "") or deleting (``"delete"``) an entry's
    ``scope_row``, after its rowid, in a shard's scope table."""
    return _fts_write(
        scope_table(shard), "rowid, title, prompts, repo, cwd, branches, prs", command
    )


def session_row(e: SessionEntry) -> tuple[Any, ...]:
    """The values of ``INSERT_SESSION`` for an entry."""
    return (
        *e.key,
        e.repo,
        e.repo_root,
        repo_short(e.repo),
        e.origin,
        e.cwd,
        _json_strings(e.branches),
        _json_strings(e.prs),
        e.title,
        _json_strings(e.prompts),
        e.started,
        e.last_active,
        int(e.subagent),
        e.parent_session_id,
        e.transcript,
    )


def _stored_shown(e: SessionEntry) -> list[str | None]:
    """The ``SHOWN_TEXT_FIELDS`` columns of an entry as ``session_row`` stores them."""
    values = (getattr(e, name) for name in SHOWN_TEXT_FIELDS)
    return [_json_strings(v) if isinstance(v, tuple) else v for v in values]


def _json_strings(items: tuple[str, ...]) -> str:
    """``json.dumps`` of a list of strings (the same text), without building an encoder."""
    return "[" + ", ".join(map(encode_basestring_ascii, items)) + "]"


def scope_row(rowid: int, e: SessionEntry, text: tuple[str, ...]) -> ScopeRow | None:
    """The rowid and values of ``insert_scope`` for the entry of ``rowid``: its
    ``text_row``'s text columns as the words of the repo identities it has (none without
    one), under the bucket of the first (``scope_rowid``; an entry has one identity, its
    origin's: the other keys are a path and an owner/name)."""
    keys = scope_keys(e)
    if not keys:
        return None
    return scope_rowid(keys[0], rowid), tuple(scoped_words(keys, column) for column in text[:6])


def scope_rowid(key: str, rowid: int) -> int:
    """The scope-table rowid of the entry of ``rowid`` in repo ``key``: the repo's bucket
    above the id, so a repo's rows sit together, newest last (``SCOPE_ID_MASK`` takes the
    id back)."""
    if not 0 < rowid <= SCOPE_ID_MASK:
        raise ValueError(f"a session rowid out of the scope tables' range: {rowid}")
    return (repo_bucket(key) << SCOPE_ID_BITS) | rowid


def text_row(e: SessionEntry) -> tuple[str, ...]:
    """The values of ``insert_text`` for an entry, after its rowid."""
    return (
        e.title or "",
        "\n".join(e.prompts),
        " ".join(x for x in (e.repo, e.repo_root, e.origin) if x),
        e.cwd or "",
        " ".join(e.branches),
        " ".join(e.prs),
        " ".join(sorted(repo_token(k) for k in repo_keys(e))),
    )


class _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on an exception) under the store's
    lock, then ``committed()``; nested inside an open transaction it joins that one."""

    def __init__(
        self, db: sqlite3.Connection, lock: threading.RLock, committed: Callable[[], None]
    ) -> None:
        self.db = db
        self.lock = lock
        self.committed = committed
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
        if self.depth_outer and kind is None:
            self.committed()


def _chunks_by_harness(keys: Sequence[tuple[str, str]]) -> Iterable[tuple[str, list[str]]]:
    """(harness, session ids) keys as each harness's ids, 500 at most at a time (a
    statement's parameters are bounded)."""
    by_harness: dict[str, list[str]] = {}
    for harness, session_id in keys:
        by_harness.setdefault(harness, []).append(session_id)
    for harness, ids in by_harness.items():
        for start in range(0, len(ids), 500):
            yield harness, ids[start : start + 500]


def _row_entry(row: Sequence[Any]) -> SessionEntry:
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
        clean,
    ) = row
    entry = SessionEntry(
        harness=harness,
        session_id=session_id,
        repo=repo,
        repo_root=repo_root,
        origin=origin,
        cwd=cwd,
        branches=_texts(branches),
        prs=_texts(prs),
        title=title,
        prompts=_texts(prompts),
        started=started,
        last_active=last_active,
        resume_argv=resume_argv(harness, session_id, subagent=bool(subagent))
        if transcript
        else None,
        subagent=bool(subagent),
        parent_session_id=parent,
        transcript=transcript,
    )
    if clean is not None:  # not an argument (``SessionEntry.clean_under``): set as read
        object.__setattr__(entry, "clean_under", clean)
    return entry


_DECODER = json.JSONDecoder()


def _texts(stored: str) -> tuple[str, ...]:
    """A list column as the store wrote it (``json.dumps`` of a list), read back: what
    ``json.loads`` gives, without its wrapper's look for whitespace around the value (the
    store writes none; anything after the list is still refused), and the empty list at
    once. Every search reads three of these for each hit."""
    if stored == "[]":
        return ()
    value, end = _DECODER.raw_decode(stored)
    if end != len(stored) or not isinstance(value, list):
        raise ValueError("a list column holds something else than a JSON list")
    return tuple(value)


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
