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
import math
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


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def canonical(value: Mapping[str, Any]) -> bytes:
    return _CANONICAL.encode(value).encode("ascii")


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


_encode_str = json.encoder.encode_basestring_ascii  # what ``canonical`` does for a str


def _value(value: Any) -> str:
    """One value as ``canonical`` writes it: the common types by hand, the rest by json."""
    if value is None:
        return "null"
    if type(value) is str:
        return _encode_str(value)
    return canonical_text(value)


def canonical_text(value: Any) -> str:
    return _CANONICAL.encode(value)


def seal_parts(
    draft: AuditDraft, *, seq: int, time: float, prev_hash: str
) -> tuple[AuditRecord, str]:
    """``seal``, also returning the record's details as canonical JSON (what the store keeps).

    The hashed text is built field by field in ``canonical``'s key order (action, actor,
    details, message_id, outcome, prev_hash, scope, seq, target, time) instead of through a
    dict and a sorting ``json.dumps``; ``tests/daemon/core`` proves the two agree.
    """
    details = dict(draft.details)
    details_json = canonical_text(details)
    time = round(time, 6)
    text = (
        f'{{"action":{_value(draft.action)},"actor":{_value(draft.actor)},'
        f'"details":{details_json},"message_id":{_value(draft.message_id)},'
        f'"outcome":{_value(draft.outcome)},"prev_hash":{_value(prev_hash)},'
        f'"scope":{_value(draft.scope)},"seq":{_number(seq)},"target":{_value(draft.target)},'
        f'"time":{_number(time)}}}'
    )
    digest = hashlib.sha256((prev_hash + text).encode("ascii")).hexdigest()
    record = AuditRecord(
        seq=seq,
        time=time,
        actor=draft.actor,
        action=draft.action,
        outcome=draft.outcome,
        scope=draft.scope,
        target=draft.target,
        message_id=draft.message_id,
        details=details,
        prev_hash=prev_hash,
        hash=digest,
    )
    return record, details_json


def _number(value: Any) -> str:
    kind = type(value)
    if kind is int:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    return canonical_text(value)  # bools, NaN, infinities and the rest: json's spelling


def seal(draft: AuditDraft, *, seq: int, time: float, prev_hash: str) -> AuditRecord:
    """Turn a draft into the next record of the chain."""
    return seal_parts(draft, seq=seq, time=time, prev_hash=prev_hash)[0]


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
