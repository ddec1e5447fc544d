"""Consent cards and approvals in the state database.

The rules (states, who may decide, expiry) are in ``core.consent``; this adapter stores
cards, resolves expiry lazily and in a sweep, and tells subscribers when a card reaches a
final state (messaging delivers on approve; a spawn proceeds). Every change is a queued
write that the gate commits with its audit record.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.core.consent import Approval, ApprovalKind, Card, CardState, Decision, new_card
from openbus.daemon.core.due import Due
from openbus.daemon.state import StateDB
from openbus.kernel.clock import Clock, Random
from openbus.kernel.errors import NotFound

log = logging.getLogger("openbus.cards")

Write = Callable[[sqlite3.Connection], None]
Listener = Callable[[Card], None]

# The expiry sweep asks the database at least this often, whatever it expects (``core.due``)
RECHECK_SECONDS = 60.0

_COLUMNS = (
    "id, kind, requester, requester_principal, target, target_principal, owner, summary, payload, "
    "created, expires, state, decided_by, decided"
)


def _row(row: tuple[Any, ...]) -> Card:
    (
        cid,
        kind,
        requester,
        rp,
        target,
        tp,
        owner,
        summary,
        payload,
        created,
        expires,
        state,
        decided_by,
        decided,
    ) = row
    return Card(
        id=cid,
        kind=kind,
        requester=requester,
        owner=owner,
        summary=summary,
        created=created,
        expires=expires,
        target=target,
        requester_principal=rp,
        target_principal=tp,
        payload=json.loads(payload),
        state=CardState(state),
        decided_by=decided_by,
        decided=decided,
    )


def _save(card: Card) -> Write:
    def write(conn: sqlite3.Connection) -> None:
        conn.execute(
            f"INSERT OR REPLACE INTO cards ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                card.id,
                card.kind,
                card.requester,
                card.requester_principal,
                card.target,
                card.target_principal,
                card.owner,
                card.summary,
                json.dumps(card.payload, sort_keys=True),
                card.created,
                card.expires,
                card.state.value,
                card.decided_by,
                card.decided,
            ),
        )

    return write


class Cards:
    def __init__(self, db: StateDB, clock: Clock, random: Random) -> None:
        self.db = db
        self.clock = clock
        self.random = random
        self.listeners: list[Listener] = []
        self.changed = asyncio.Event()
        self._due = Due(recheck=RECHECK_SECONDS)  # when a pending card can next have expired

    # ------------------------------------------------------------------ cards

    def new(self, **fields: Any) -> tuple[Card, Write]:
        card = new_card(
            card_id="c_" + self.random.token_bytes(6).hex(), now=self.clock.now(), **fields
        )
        self._due.added(card.expires)
        return card, _save(card)

    def get(self, card_id: str) -> Card:
        row = self.db.conn.execute(
            f"SELECT {_COLUMNS} FROM cards WHERE id = ?", (card_id,)
        ).fetchone()
        if row is None:
            raise NotFound(f"no such card {card_id}", field="card")
        return _row(row)

    def listing(
        self, owner: str | None = None, *, pending_only: bool = True, limit: int = 200
    ) -> list[Card]:
        now = self.clock.now()
        query = f"SELECT {_COLUMNS} FROM cards"
        clauses: list[str] = []
        args: list[object] = []
        if owner is not None:
            clauses.append("owner = ?")
            args.append(owner)
        if pending_only:
            clauses.append("state = 'pending' AND expires > ?")
            args.append(now)
        if clauses:
            query += " WHERE " + " AND ".join(clauses)
        query += " ORDER BY created DESC LIMIT ?"
        args.append(limit)
        return [_row(r) for r in self.db.conn.execute(query, args).fetchall()]

    def decide(self, card_id: str, decision: Decision, by_user: str) -> tuple[Card, list[Write]]:
        card = self.get(card_id)
        decided = card.decide(decision, by_user=by_user, now=self.clock.now())
        writes = [_save(decided)]
        if (
            decided.state is CardState.APPROVED_PAIR
            and decided.requester_principal
            and decided.target_principal
        ):
            writes.append(
                self.approve(
                    Approval(
                        ApprovalKind.PAIR, decided.requester_principal, decided.target_principal
                    ),
                    card_id,
                )
            )
        return decided, writes

    def expired_unresolved(self) -> list[Card]:
        """The pending cards whose time has passed (asked of the database only once one can
        have: ``core.due``)."""
        now = self.clock.now()
        if not self._due.due(now):
            return []
        conn = self.db.conn
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM cards WHERE state = 'pending' AND expires <= ?", (now,)
        ).fetchall()
        (soonest,) = conn.execute(
            "SELECT MIN(expires) FROM cards WHERE state = 'pending'"
        ).fetchone()
        self._due.swept(now, soonest)
        return [_row(r).resolve_expiry(now) for r in rows]

    def resolution_record(self, card: Card) -> tuple[AuditDraft, list[Write]]:
        """The system's audit record and write for a card resolved without a decision."""
        draft = AuditDraft(
            actor="system",
            action="cards.resolve",
            outcome="expired" if card.state is CardState.EXPIRED else "cancelled",
            target=card.id,
            details={"kind": card.kind, "requester": card.requester},
        )
        return draft, [_save(card)]

    def open_for_principal(self, principal: str) -> list[Card]:
        rows = self.db.conn.execute(
            f"SELECT {_COLUMNS} FROM cards WHERE state = 'pending' "
            "AND (requester_principal = ? OR target_principal = ?)",
            (principal, principal),
        ).fetchall()
        return [_row(r) for r in rows]

    def notify(self, card: Card) -> None:
        if card.state is CardState.PENDING:  # a new card: one line in the daemon's log
            expires = time.strftime("%H:%M:%S", time.localtime(card.expires))
            log.warning(
                "card %s needs you: %s (%s); expires at %s",
                card.id,
                card.kind,
                card.target or "-",
                expires,
            )
        self.changed.set()
        self.changed = asyncio.Event()
        for listener in list(self.listeners):
            listener(card)

    # ------------------------------------------------------------------ approvals

    def approve(self, approval: Approval, card_id: str | None = None) -> Write:
        now = self.clock.now()

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR REPLACE INTO approvals (kind, subject, object, created, card_id) "
                "VALUES (?,?,?,?,?)",
                (approval.kind.value, approval.subject, approval.object, now, card_id),
            )

        return write

    def has(self, approval: Approval) -> bool:
        row = self.db.conn.execute(
            "SELECT 1 FROM approvals WHERE kind = ? AND subject = ? AND object = ?",
            (approval.kind.value, approval.subject, approval.object),
        ).fetchone()
        return row is not None

    def withdraw(self, approval: Approval) -> Write:
        """The human takes one standing approval back."""

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "DELETE FROM approvals WHERE kind = ? AND subject = ? AND object = ?",
                (approval.kind.value, approval.subject, approval.object),
            )

        return write

    def forget_principal(self, principal: str) -> Write:
        """Approvals die with either party's grant (the pair lives for the recipient's life)."""

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "DELETE FROM approvals WHERE subject = ? OR object = ?", (principal, principal)
            )

        return write
