"""Audit records: what one call did, as a value, and the hash chain that binds them.

Theory of operation
-------------------
Every call through the action path produces exactly one ``AuditDraft`` (actor, scope,
action, target, outcome, message id, details). The store assigns it the next ``seq`` and the
current time and links it to the previous record's hash, producing an ``AuditRecord``:

    hash(n) = sha256( hash(n-1) || canonical(record n without its hash) )

``GENESIS`` is the hash before record 1. Canonical form is JSON with sorted keys, no spaces
and ASCII escapes, so the same record hashes the same on the box, in the collector's file
and in ``openbus audit verify``. A *checkpoint* is the Ed25519 signature of the box's audit
key over ``canonical({"seq", "hash", "time", "box"})`` for the chain head at ``seq``: a
reviewer holding only the public key can then prove a received stream is complete up to it.

Outcomes are one word: ``ok`` (a read or an action ran), ``refused`` (scope, cap, policy,
admission), ``card`` (a consent card was raised), ``queued``, ``delivered``, ``declined``,
``cancelled``, ``expired``, ``unconfirmed``, ``approved``, ``error``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GENESIS = "0" * 64

OUTCOMES = frozenset(
    {
        "ok",
        "refused",
        "card",
        "queued",
        "delivered",
        "declined",
        "cancelled",
        "expired",
        "unconfirmed",
        "approved",
        "error",
    }
)


def canonical(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode(
        "ascii"
    )


@dataclass(frozen=True)
class AuditDraft:
    actor: str
    action: str
    outcome: str
    scope: str | None = None
    target: str | None = None
    message_id: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown audit outcome {self.outcome!r}")


@dataclass(frozen=True)
class AuditRecord:
    seq: int
    time: float
    actor: str
    action: str
    outcome: str
    scope: str | None
    target: str | None
    message_id: str | None
    details: Mapping[str, Any]
    prev_hash: str
    hash: str

    def body(self) -> dict[str, Any]:
        """Every field but ``hash``: what the hash covers."""
        return {
            "seq": self.seq,
            "time": self.time,
            "actor": self.actor,
            "action": self.action,
            "outcome": self.outcome,
            "scope": self.scope,
            "target": self.target,
            "message_id": self.message_id,
            "details": dict(self.details),
            "prev_hash": self.prev_hash,
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.body(), "hash": self.hash}


def record_hash(prev_hash: str, body: Mapping[str, Any]) -> str:
    return hashlib.sha256(prev_hash.encode("ascii") + canonical(body)).hexdigest()


def seal(draft: AuditDraft, *, seq: int, time: float, prev_hash: str) -> AuditRecord:
    """Turn a draft into the next record of the chain."""
    unsealed = AuditRecord(
        seq=seq,
        time=round(time, 6),
        actor=draft.actor,
        action=draft.action,
        outcome=draft.outcome,
        scope=draft.scope,
        target=draft.target,
        message_id=draft.message_id,
        details=dict(draft.details),
        prev_hash=prev_hash,
        hash="",
    )
    return AuditRecord(**{**unsealed.body(), "hash": record_hash(prev_hash, unsealed.body())})


def record_from_dict(data: Mapping[str, Any]) -> AuditRecord:
    return AuditRecord(
        seq=int(data["seq"]),
        time=float(data["time"]),
        actor=str(data["actor"]),
        action=str(data["action"]),
        outcome=str(data["outcome"]),
        scope=data.get("scope"),
        target=data.get("target"),
        message_id=data.get("message_id"),
        details=dict(data.get("details") or {}),
        prev_hash=str(data["prev_hash"]),
        hash=str(data["hash"]),
    )


@dataclass(frozen=True)
class Checkpoint:
    seq: int
    hash: str
    time: float
    box: str
    signature: str = ""  # hex Ed25519 signature over ``payload()``

    def payload(self) -> bytes:
        return canonical({"seq": self.seq, "hash": self.hash, "time": self.time, "box": self.box})
