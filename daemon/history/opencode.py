"""Reading OpenCode's sessions from its own SQLite database, read-only.

Theory of operation
-------------------
OpenCode (observed on 1.18.28 and 1.18.33) keeps every session of a user in one database,
``<data dir>/opencode.db`` (the data dir ``$XDG_DATA_HOME/opencode`` or
``~/.local/share/opencode``; WAL journal): a ``session`` row (``id``, ``parent_id`` for a child
session a task started, ``directory``, ``title``, ``time_created`` / ``time_updated`` in epoch
milliseconds), its ``message`` rows (JSON ``data`` with ``role``) and their ``part`` rows (JSON
``data``; the text the human typed and the model answered are ``type: text`` parts).

The index names a session's "transcript" by a reference path, ``<db>#<session id>``: it lies
under the data dir (so the session is known to be OpenCode's) but is no file. Its key, the
stand-in for a file's (size, mtime_ns, inode), is (the session's message count, the later of
its ``time_updated`` and its newest message's ``time_created``, in nanoseconds, 0): a new
message changes it, and OpenCode touches the session's ``time_updated`` when a turn ends
(observed on both versions), so a finished answer does too. Both come from the session's row
and the message index alone, whatever the size of the messages.

Every read opens the database with a ``mode=ro`` URI (SQLite never writes it; WAL lets it read
while OpenCode writes) and reads in one transaction, so a session's rows are one snapshot. A
database with no ``-wal`` beside it (nobody has it open) is opened ``immutable`` as well, so the
read leaves no ``-wal`` or ``-shm`` file of its own in OpenCode's dir (owned by the daemon's
user, they could keep OpenCode out on a box where the two users differ). A database that cannot
be read raises ``Unavailable`` naming it. Nothing here changes OpenCode's files.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from openbus.kernel.errors import Unavailable

DB_FILE = "opencode.db"
SEPARATOR = "#"
SessionKey = tuple[int, int, int]
_BUSY_SECONDS = 5.0

_KEYS = """
SELECT s.id, s.time_updated,
    (SELECT count(*) FROM message m WHERE m.session_id = s.id),
    (SELECT max(m.time_created) FROM message m WHERE m.session_id = s.id)
FROM session s {where} ORDER BY s.time_created, s.id
"""


@dataclass(frozen=True)
class SessionRows:
    """One session as OpenCode stores it: its row, its messages' and text parts' JSON."""

    session: dict[str, Any]
    messages: list[tuple[str, str]]  # (message id, data)
    parts: list[tuple[str, str]]  # (message id, data) of the text parts, in order
    key: SessionKey


def ref(db: Path, session_id: str) -> Path:
    """The reference path naming a session in a database."""
    return db.with_name(f"{db.name}{SEPARATOR}{session_id}")


def split_ref(path: Path) -> tuple[Path, str] | None:
    """The database and session id a reference path names, if it is one."""
    name, sep, session_id = path.name.partition(SEPARATOR)
    if not sep or name != DB_FILE or not session_id:
        return None
    return path.with_name(name), session_id


@contextlib.contextmanager
def _reading(db: Path) -> Iterator[sqlite3.Connection]:
    # With no WAL beside it the database is all in its main file and nobody is writing it: it
    # is read as immutable, so that SQLite makes no -wal and -shm of ours in OpenCode's dir.
    live = db.with_name(db.name + "-wal").exists()
    flags = "mode=ro" if live else "mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(
            f"file:{quote(str(db))}?{flags}",
            uri=True,
            timeout=_BUSY_SECONDS,
            isolation_level=None,
        )
    except sqlite3.Error as exc:
        raise Unavailable(f"cannot read OpenCode's database {db}: {exc}") from None
    try:
        conn.execute("BEGIN")  # one snapshot for every query of this read
        yield conn
    except sqlite3.Error as exc:
        raise Unavailable(f"cannot read OpenCode's database {db}: {exc}") from None
    finally:
        conn.close()


def _key(time_updated: object, messages: object, latest: object) -> SessionKey:
    stamps = [v for v in (time_updated, latest) if isinstance(v, int)]
    count = messages if isinstance(messages, int) else 0
    return (count, max(stamps, default=0) * 1_000_000, 0)


def session_keys(db: Path) -> list[tuple[str, SessionKey]]:
    """Every session in the database with its key, oldest first ([] without a database)."""
    if not db.is_file():
        return []
    with _reading(db) as conn:
        rows = conn.execute(_KEYS.format(where="")).fetchall()
    return [(sid, _key(updated, n, latest)) for sid, updated, n, latest in rows]


def session_key(db: Path, session_id: str) -> SessionKey | None:
    """A session's key now, or None when the database does not hold it."""
    if not db.is_file():
        return None
    with _reading(db) as conn:
        row = conn.execute(_KEYS.format(where="WHERE s.id = ?"), (session_id,)).fetchone()
    return None if row is None else _key(row[1], row[2], row[3])


def read_session(db: Path, session_id: str) -> SessionRows | None:
    """A session's rows in one snapshot, or None when the database does not hold it."""
    with _reading(db) as conn:
        conn.row_factory = sqlite3.Row
        found = conn.execute(
            "SELECT id, parent_id, directory, title, time_created, time_updated"
            " FROM session WHERE id = ?",
            (session_id,),
        ).fetchone()
        if found is None:
            return None
        row = _KEYS.format(where="WHERE s.id = ?")
        _sid, updated, count, latest = conn.execute(row, (session_id,)).fetchone()
        messages = conn.execute(
            "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id",
            (session_id,),
        ).fetchall()
        parts = conn.execute(
            "SELECT message_id, data FROM part WHERE session_id = ?"
            " AND json_extract(data, '$.type') = 'text' ORDER BY time_created, id",
            (session_id,),
        ).fetchall()
    return SessionRows(
        session=dict(found),
        messages=[(m[0], m[1]) for m in messages],
        parts=[(p[0], p[1]) for p in parts],
        key=_key(updated, count, latest),
    )
