"""The append-only audit store in the state database.

``append`` seals a draft onto the chain inside the caller's transaction, so a state change and
its audit record commit together or not at all. The chain head is kept in memory and re-read
after a failed transaction, so a rollback never leaves a gap or a fork.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from openbus.daemon.core.audit import GENESIS, AuditDraft, AuditRecord, Checkpoint, seal_parts
from openbus.daemon.state import StateDB
from openbus.kernel.clock import Clock
from openbus.kernel.errors import AuditUnavailable

_COLUMNS = "seq, time, actor, action, outcome, scope, target, message_id, details, prev_hash, hash"


_INSERT = f"INSERT INTO audit ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)"


def _row(record: AuditRecord, details_json: str) -> tuple[Any, ...]:
    return (
        record.seq,
        record.time,
        record.actor,
        record.action,
        record.outcome,
        record.scope,
        record.target,
        record.message_id,
        details_json,
        record.prev_hash,
        record.hash,
    )


def _row_to_record(row: tuple[Any, ...]) -> AuditRecord:
    seq, time, actor, action, outcome, scope, target, message_id, details, prev_hash, digest = row
    return AuditRecord(
        seq=seq,
        time=time,
        actor=actor,
        action=action,
        outcome=outcome,
        scope=scope,
        target=target,
        message_id=message_id,
        details=json.loads(details),
        prev_hash=prev_hash,
        hash=digest,
    )


class AuditLog:
    def __init__(self, db: StateDB, clock: Clock) -> None:
        self.db = db
        self.clock = clock
        self._head: tuple[int, str] | None = None
        self.listeners: list[Any] = []  # callables notified with each committed record

    # ------------------------------------------------------------------ chain head

    def head(self) -> tuple[int, str]:
        if self._head is None:
            row = self.db.conn.execute(
                "SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            self._head = (row[0], row[1]) if row else (0, GENESIS)
        return self._head

    def forget_head(self) -> None:
        """After a rollback: the next append re-reads the head from the database."""
        self._head = None

    # ------------------------------------------------------------------ writing

    def append_in_txn(self, draft: AuditDraft) -> AuditRecord:
        """Seal and insert ``draft`` inside the caller's open transaction."""
        record, details_json = self._seal(draft, self.clock.now())
        self.db.conn.execute(_INSERT, _row(record, details_json))
        self._head = (record.seq, record.hash)
        return record

    def append_many_in_txn(self, drafts: Sequence[AuditDraft]) -> list[AuditRecord | Exception]:
        """Seal ``drafts`` in order onto the chain and insert them with one statement, inside
        the caller's open transaction. A draft that cannot be sealed (details that are not
        JSON) gets its exception in its place and takes no ``seq``; the rest chain on."""
        now = self.clock.now()
        results: list[AuditRecord | Exception] = []
        rows: list[tuple[Any, ...]] = []
        for draft in drafts:
            try:
                record, details_json = self._seal(draft, now)
            except (TypeError, ValueError) as exc:
                results.append(exc)
                continue
            self._head = (record.seq, record.hash)
            results.append(record)
            rows.append(_row(record, details_json))
        if len(rows) == 1:
            self.db.conn.execute(_INSERT, rows[0])  # cheaper than executemany for one
        elif rows:
            self.db.conn.executemany(_INSERT, rows)
        return results

    def _seal(self, draft: AuditDraft, now: float) -> tuple[AuditRecord, str]:
        seq, prev = self.head()
        return seal_parts(draft, seq=seq + 1, time=now, prev_hash=prev)

    def append(self, draft: AuditDraft) -> AuditRecord:
        """Append ``draft`` in a transaction of its own; durable when this returns."""
        conn = self.db.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                record = self.append_in_txn(draft)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    # the failed write may have left nothing to undo; keep the first error
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                self.forget_head()
                raise
        except sqlite3.Error as exc:
            self.forget_head()
            raise AuditUnavailable(
                f"the audit record could not be written ({exc}); nothing was done"
            ) from None
        self.committed(record)
        return record

    def committed(self, record: AuditRecord) -> None:
        for listener in list(self.listeners):
            listener(record)

    def add_checkpoint_in_txn(self, checkpoint: Checkpoint) -> None:
        self.db.conn.execute(
            "INSERT OR REPLACE INTO audit_checkpoints (seq, hash, time, box, signature) "
            "VALUES (?,?,?,?,?)",
            (
                checkpoint.seq,
                checkpoint.hash,
                checkpoint.time,
                checkpoint.box,
                checkpoint.signature,
            ),
        )

    # ------------------------------------------------------------------ reading

    def read(self, after: int = 0, limit: int = 1000) -> list[AuditRecord]:
        rows = self.db.conn.execute(
            f"SELECT {_COLUMNS} FROM audit WHERE seq > ? ORDER BY seq LIMIT ?",
            (after, limit),
        ).fetchall()
        return [_row_to_record(r) for r in rows]

    def iter_all(self, batch: int = 5000) -> Iterator[AuditRecord]:
        after = 0
        while True:
            records = self.read(after, batch)
            if not records:
                return
            yield from records
            after = records[-1].seq

    def checkpoints(self, after: int = 0) -> list[Checkpoint]:
        rows = self.db.conn.execute(
            "SELECT seq, hash, time, box, signature FROM audit_checkpoints "
            "WHERE seq > ? ORDER BY seq",
            (after,),
        ).fetchall()
        return [Checkpoint(*row) for row in rows]
