"""The daemon's state database (SQLite, WAL): grants, cards, approvals, message ids, the audit
chain.

One connection, used from the daemon's one event loop. WAL with ``synchronous=NORMAL``: a
committed transaction survives a daemon crash (kill -9); only power loss can take the last
ones, which the off-box shipper's checkpoints make visible. Schema changes are appended to
``MIGRATIONS`` and never edited, so an old state dir upgrades in place.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from openbus.kernel.errors import Unavailable

T = TypeVar("T")

MIGRATIONS: tuple[str, ...] = (
    # 1: the audit chain, its checkpoints and the shipper's cursor
    """
    CREATE TABLE audit (
        seq INTEGER PRIMARY KEY,
        time REAL NOT NULL,
        actor TEXT NOT NULL,
        action TEXT NOT NULL,
        outcome TEXT NOT NULL,
        scope TEXT,
        target TEXT,
        message_id TEXT,
        details TEXT NOT NULL,
        prev_hash TEXT NOT NULL,
        hash TEXT NOT NULL
    );
    CREATE TABLE audit_checkpoints (
        seq INTEGER PRIMARY KEY,
        hash TEXT NOT NULL,
        time REAL NOT NULL,
        box TEXT NOT NULL,
        signature TEXT NOT NULL
    );
    CREATE TABLE export_cursor (
        name TEXT PRIMARY KEY,
        seq INTEGER NOT NULL,
        updated REAL NOT NULL
    );
    CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
        BEGIN SELECT RAISE(ABORT, 'the audit chain is append-only'); END;
    CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
        BEGIN SELECT RAISE(ABORT, 'the audit chain is append-only'); END;
    """,
    # 2: principals (one per launch token), grants, cards, approvals
    """
    CREATE TABLE principals (
        id TEXT PRIMARY KEY,
        token_hash TEXT UNIQUE,
        harness TEXT NOT NULL,
        launcher TEXT,
        owner TEXT NOT NULL,
        session_id TEXT,
        pane_id TEXT,
        pid INTEGER,
        incarnation TEXT,
        preset TEXT NOT NULL,
        state TEXT NOT NULL,
        created REAL NOT NULL,
        updated REAL NOT NULL
    );
    CREATE UNIQUE INDEX principals_session ON principals(harness, session_id)
        WHERE session_id IS NOT NULL AND state = 'active';
    CREATE TABLE cards (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        requester TEXT NOT NULL,
        requester_principal TEXT,
        target TEXT,
        target_principal TEXT,
        owner TEXT NOT NULL,
        summary TEXT NOT NULL,
        payload TEXT NOT NULL,
        created REAL NOT NULL,
        expires REAL NOT NULL,
        state TEXT NOT NULL,
        decided_by TEXT,
        decided REAL
    );
    CREATE INDEX cards_state ON cards(state, expires);
    CREATE TABLE approvals (
        kind TEXT NOT NULL,
        subject TEXT NOT NULL,
        object TEXT NOT NULL,
        created REAL NOT NULL,
        card_id TEXT,
        PRIMARY KEY (kind, subject, object)
    );
    CREATE TABLE restarts (
        pane_id TEXT PRIMARY KEY,
        record TEXT NOT NULL,
        created REAL NOT NULL
    );
    """,
    # 3: the start time of a principal's process, so a token is bound to that exact process
    # (pid plus start time), also across daemon restarts; a row without one is not alive
    """
    ALTER TABLE principals ADD COLUMN pid_start TEXT;
    """,
    # 4: message ids held for their hour (at most once across a restart)
    """
    CREATE TABLE message_ids (
        principal TEXT NOT NULL,
        message_id TEXT NOT NULL,
        sender_actor TEXT NOT NULL,
        recipient_pane TEXT,
        outcome TEXT NOT NULL,
        expires REAL NOT NULL,
        PRIMARY KEY (principal, message_id)
    );
    CREATE INDEX message_ids_expires ON message_ids(expires);
    """,
    # 5: the spawned-by tag of a child session (its family), with what allowed its start
    """
    CREATE TABLE spawns (
        child TEXT PRIMARY KEY,
        parent TEXT NOT NULL,
        allowed_by TEXT NOT NULL,
        worktree TEXT,
        branch TEXT,
        created REAL NOT NULL
    );
    CREATE INDEX spawns_parent ON spawns(parent);
    """,
    # 6: grants follow the session: a principal whose process exited is suspended (not
    # deleted) and one (harness, session id) has at most one principal that is not revoked;
    # every structured launch is recorded (pane, process, launcher, cwd, session, the tmux
    # server it ran on), so a running agent can be restarted onto its session and a lost
    # fleet restored
    """
    DROP INDEX principals_session;
    CREATE UNIQUE INDEX principals_session ON principals(harness, session_id)
        WHERE session_id IS NOT NULL AND state IN ('active', 'suspended');
    CREATE TABLE launches (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        launcher TEXT NOT NULL,
        harness TEXT NOT NULL,
        cwd TEXT,
        session_id TEXT,
        principal TEXT,
        pane_id TEXT NOT NULL,
        pid INTEGER NOT NULL,
        pid_start TEXT,
        server TEXT,
        state TEXT NOT NULL,
        created REAL NOT NULL,
        updated REAL NOT NULL
    );
    CREATE INDEX launches_state ON launches(state);
    CREATE INDEX launches_session ON launches(harness, session_id);
    """,
    # 7: threads (a requester's requests and every entry they caused, with origin links) and
    # the principals that are the control session
    """
    CREATE TABLE thread_entries (
        seq INTEGER PRIMARY KEY,
        thread TEXT NOT NULL,
        kind TEXT NOT NULL,
        time REAL NOT NULL,
        actor TEXT NOT NULL,
        text TEXT NOT NULL,
        origin TEXT,
        pane TEXT,
        incarnation TEXT,
        state TEXT,
        details TEXT NOT NULL
    );
    CREATE INDEX thread_entries_thread ON thread_entries(thread, seq);
    CREATE INDEX thread_entries_pane ON thread_entries(pane, seq) WHERE pane IS NOT NULL;
    CREATE INDEX thread_entries_origin ON thread_entries(origin) WHERE origin IS NOT NULL;
    ALTER TABLE principals ADD COLUMN role TEXT;
    """,
    # 8: the pool user a launch ran as on a hosted box (pool mode): its session resumes only
    # under that user, whose home holds the harness's transcript
    """
    ALTER TABLE launches ADD COLUMN agent_user TEXT;
    """,
    # 9: what the daemon asks of the principals every second (the active ones, control) and on
    # every listing (a pane's, an owner's) found through an index, not by reading every
    # principal ever launched; control's open requests likewise among its thread's entries
    """
    CREATE INDEX principals_state ON principals(state, created);
    CREATE INDEX principals_pane ON principals(pane_id, state);
    CREATE INDEX principals_owner ON principals(owner);
    CREATE INDEX thread_entries_open ON thread_entries(state, seq) WHERE kind = 'request';
    """,
)


class StateDB:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path) if str(path) != ":memory:" else None
        self._kept: dict[str, tuple[int, Any]] = {}  # a read's name -> (total_changes, answer)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            self.conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
            if self.path is not None:
                os.chmod(self.path, 0o600)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.execute("PRAGMA foreign_keys=ON")
            self.conn.execute("PRAGMA busy_timeout=5000")
            self._migrate()
        except sqlite3.Error as exc:
            raise Unavailable(f"state database {path} cannot be opened: {exc}") from None

    def _migrate(self) -> None:
        (version,) = self.conn.execute("PRAGMA user_version").fetchone()
        for number, ddl in enumerate(MIGRATIONS, start=1):
            if number <= version:
                continue
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in _split(ddl):
                    self.conn.execute(statement)
                self.conn.execute(f"PRAGMA user_version = {number}")
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise

    def kept(self, name: str, read: Callable[[], T]) -> T:
        """``read()``'s answer, asked of the database again only once this connection has
        changed a row since (SQLite's ``total_changes``: every insert, update or delete, in any
        table, committed or rolled back). The daemon writes the tables it keeps reads of
        through this one connection, so the once-a-second sweeps of an idle box (its live
        launches, its active principals) ask nothing. Never kept inside a transaction, where a
        write read back may yet be rolled back. ``read`` returns what no caller changes (a
        tuple of frozen records)."""
        if self.conn.in_transaction:
            return read()
        mark = self.conn.total_changes
        held = self._kept.get(name)
        if held is not None and held[0] == mark:
            return held[1]  # type: ignore[no-any-return]
        value = read()
        self._kept[name] = (mark, value)
        return value

    def close(self) -> None:
        self.conn.close()


def _split(ddl: str) -> list[str]:
    """Split a migration into statements, keeping trigger bodies whole."""
    statements: list[str] = []
    current = ""
    for line in ddl.strip().splitlines():
        current += line + "\n"
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    if current.strip():
        statements.append(current.strip())
    return statements
