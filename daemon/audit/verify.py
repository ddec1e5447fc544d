"""``openbus audit verify``: prove an audit stream complete and untampered, or name the first flaw.

Theory of operation
-------------------
Two readers turn their input into the same shape, a list of ``Entry`` (one received copy of
one record, or the reason it could not be read) and a list of checkpoints:

* ``load_db``: the ``audit`` and ``audit_checkpoints`` tables of a state database (opened
  read-only);
* ``load_otlp_json``: the JSON lines an OpenTelemetry Collector's ``file`` exporter writes
  (OTLP JSON: resourceLogs -> scopeLogs -> logRecords), where the body of each
  ``openbus.kind=record`` log record is the record's canonical JSON and each
  ``openbus.kind=checkpoint`` one carries a signed checkpoint.

``verify`` is pure. Copies of one ``seq`` that are identical collapse to one (re-sending after
a crash is allowed); copies that differ are a flaw. Then, in ``seq`` order from 1: each seq
must follow the last (a gap is a deleted record), each record must hash to its ``hash``
(an edited byte), and its ``prev_hash`` must be the previous record's hash (a reordered,
replaced or forked record). Each checkpoint's Ed25519 signature must verify with the box's
public key (a forged checkpoint), it must name exactly the hash of the record at its seq,
and the stream must reach it (a tail cut off before the last checkpoint). The first flaw by
seq is reported. Records after the last good checkpoint are reported as the *unverified tail*:
nothing signed yet vouches that the stream is complete there.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from openbus.daemon.audit.checkpoints import (
    PUBLIC_KEY_NAME,
    checkpoint_from_dict,
    load_public_key,
    public_key_from_pem,
    signature_valid,
)
from openbus.daemon.core.audit import (
    GENESIS,
    AuditRecord,
    Checkpoint,
    canonical,
    record_from_dict,
    record_hash,
)
from openbus.kernel.errors import ConfigError


@dataclass(frozen=True)
class Entry:
    where: str  # "seq 5" (db) or "line 3" (file)
    record: AuditRecord | None
    error: str | None = None
    seq_hint: int | None = None  # what the attributes claimed, when the body is unreadable


@dataclass(frozen=True)
class CheckpointEntry:
    where: str
    checkpoint: Checkpoint


@dataclass
class Source:
    entries: list[Entry] = field(default_factory=list)
    checkpoints: list[CheckpointEntry] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # unreadable input with no seq at all
    embedded_key: str | None = None  # the public key PEM the stream's resource carried


@dataclass
class Report:
    ok: bool
    problem: str | None = None
    bad_seq: int | None = None
    records: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    checkpoints: int = 0
    verified_through: int = 0  # the last seq a good checkpoint vouches for
    unverified_tail: tuple[int, int] | None = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "problem": self.problem,
            "bad_seq": self.bad_seq,
            "records": self.records,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "checkpoints": self.checkpoints,
            "verified_through": self.verified_through,
            "unverified_tail": list(self.unverified_tail) if self.unverified_tail else None,
            "warnings": list(self.warnings),
        }

    def text(self) -> str:
        lines: list[str] = []
        if self.ok:
            span = f"seq {self.first_seq}..{self.last_seq}" if self.records else "no records"
            lines.append(
                f"OK: {self.records} records ({span}), chain intact, "
                f"{self.checkpoints} checkpoints verified"
            )
        else:
            lines.append(f"BAD: {self.problem}")
        if self.verified_through:
            lines.append(f"complete and signed through seq {self.verified_through}")
        if self.unverified_tail:
            a, b = self.unverified_tail
            lines.append(
                f"unverified tail: seq {a}..{b} ({b - a + 1} records after the last checkpoint; "
                "no signature vouches for completeness there yet)"
            )
        lines.extend(f"warning: {w}" for w in self.warnings)
        return "\n".join(lines)


# --------------------------------------------------------------------------- readers


def load_db(path: Path) -> Source:
    if not path.exists():
        raise ConfigError("no such file", path=str(path))
    source = Source()
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = conn.execute(
                "SELECT seq, time, actor, action, outcome, scope, target, message_id, details, "
                "prev_hash, hash FROM audit ORDER BY seq"
            ).fetchall()
            cps = conn.execute(
                "SELECT seq, hash, time, box, signature FROM audit_checkpoints ORDER BY seq"
            ).fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise ConfigError(
            f"not a readable openbus state database ({exc})", path=str(path)
        ) from None
    for row in rows:
        seq = row[0]
        where = f"seq {seq}"
        try:
            details = json.loads(row[8])
            if not isinstance(details, dict):
                raise ValueError
            record = record_from_dict(
                dict(
                    zip(
                        (
                            "seq",
                            "time",
                            "actor",
                            "action",
                            "outcome",
                            "scope",
                            "target",
                            "message_id",
                            "details",
                            "prev_hash",
                            "hash",
                        ),
                        (*row[:8], details, *row[9:]),
                        strict=True,
                    )
                )
            )
        except (ValueError, TypeError, KeyError):
            source.entries.append(Entry(where, None, "its stored fields are malformed", seq))
            continue
        source.entries.append(Entry(where, record))
    for cp in cps:
        source.checkpoints.append(CheckpointEntry(f"checkpoint {cp[0]}", Checkpoint(*cp)))
    return source


def _any_value(value: Mapping[str, Any]) -> Any:
    for kind in ("stringValue", "boolValue", "doubleValue"):
        if kind in value:
            return value[kind]
    if "intValue" in value:
        return int(value["intValue"])
    return None


def _attributes(items: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    return {str(a.get("key")): _any_value(a.get("value") or {}) for a in items}


def load_otlp_json(path: Path) -> Source:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read ({exc.strerror})", path=str(path)) from None
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", path=str(path)) from None
    source = Source()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError:
            source.problems.append(f"line {number} is not valid JSON")
            continue
        for resource_logs in request.get("resourceLogs") or []:
            resource = _attributes((resource_logs.get("resource") or {}).get("attributes") or [])
            pem = resource.get("openbus.audit_key")
            if isinstance(pem, str) and source.embedded_key is None:
                source.embedded_key = pem
            for scope_logs in resource_logs.get("scopeLogs") or []:
                for item in scope_logs.get("logRecords") or []:
                    _read_log_record(source, number, item)
    return source


def _read_log_record(source: Source, number: int, item: Mapping[str, Any]) -> None:
    attributes = _attributes(item.get("attributes") or [])
    kind = attributes.get("openbus.kind")
    if kind not in ("record", "checkpoint"):
        return  # not ours: another service's logs in the same collector file
    hint = attributes.get("openbus.seq")
    hint = hint if isinstance(hint, int) else None
    where = f"line {number}"
    body = (item.get("body") or {}).get("stringValue")
    try:
        data = json.loads(body) if isinstance(body, str) else None
        if not isinstance(data, dict):
            raise ValueError
    except ValueError:
        what = "record" if kind == "record" else "checkpoint"
        source.entries.append(Entry(where, None, f"the {what} body is not valid JSON", hint))
        return
    if kind == "checkpoint":
        try:
            checkpoint = checkpoint_from_dict(data)
        except (KeyError, ValueError, TypeError):
            source.entries.append(Entry(where, None, "the checkpoint body is malformed", hint))
            return
        if hint != checkpoint.seq or attributes.get("openbus.hash") != checkpoint.hash:
            source.entries.append(
                Entry(where, None, "the checkpoint attributes disagree with its body", hint)
            )
            return
        source.checkpoints.append(CheckpointEntry(where, checkpoint))
        return
    try:
        record = record_from_dict(data)
    except (KeyError, ValueError, TypeError):
        source.entries.append(Entry(where, None, "the record body is malformed", hint))
        return
    if (
        hint != record.seq
        or attributes.get("openbus.hash") != record.hash
        or attributes.get("openbus.prev_hash") != record.prev_hash
    ):
        source.entries.append(
            Entry(where, None, "the record's attributes disagree with its body", hint or record.seq)
        )
        return
    source.entries.append(Entry(where, record))


# --------------------------------------------------------------------------- the check


def _fingerprint(record: AuditRecord) -> bytes:
    return canonical(record.to_dict())


def verify(source: Source, public_key: Ed25519PublicKey | None) -> Report:
    report = Report(ok=True)
    if source.problems:
        report.ok = False
        report.problem = source.problems[0]
        return report

    # (seq, message) candidates; the smallest seq wins
    flaws: list[tuple[int, str]] = []

    by_seq: dict[int, Entry] = {}
    for entry in source.entries:
        if entry.record is None:
            seq = entry.seq_hint if entry.seq_hint is not None else 0
            flaws.append((seq, f"{entry.where}: {entry.error} (seq {entry.seq_hint})"))
            continue
        seen = by_seq.get(entry.record.seq)
        if seen is None:
            by_seq[entry.record.seq] = entry
        elif seen.record is not None and _fingerprint(seen.record) != _fingerprint(entry.record):
            flaws.append(
                (
                    entry.record.seq,
                    f"seq {entry.record.seq}: two different copies ({seen.where} and "
                    f"{entry.where}); at least one was altered",
                )
            )
    records = [by_seq[s].record for s in sorted(by_seq)]
    chain: list[AuditRecord] = [r for r in records if r is not None]
    report.records = len(chain)
    if chain:
        report.first_seq, report.last_seq = chain[0].seq, chain[-1].seq

    expected, prev = 1, GENESIS
    for record in chain:
        if record.seq != expected:
            missing = (
                f"seq {expected}"
                if record.seq == expected + 1
                else f"seq {expected}..{record.seq - 1}"
            )
            flaws.append(
                (
                    expected,
                    f"{missing} missing: the chain jumps from seq {expected - 1} to {record.seq}",
                )
            )
            break
        if record_hash(record.prev_hash, record.body()) != record.hash:
            flaws.append(
                (record.seq, f"seq {record.seq}: its content does not match its hash (edited)")
            )
            break
        if record.prev_hash != prev:
            flaws.append(
                (
                    record.seq,
                    f"seq {record.seq}: prev_hash does not link to seq {record.seq - 1} "
                    "(reordered, replaced or forked)",
                )
            )
            break
        expected, prev = record.seq + 1, record.hash

    hashes = {r.seq: r.hash for r in chain}
    last_seq = chain[-1].seq if chain else 0
    checkpoints: dict[int, CheckpointEntry] = {}
    for cp_entry in source.checkpoints:
        cp = cp_entry.checkpoint
        seen_cp = checkpoints.get(cp.seq)
        if seen_cp is None:
            checkpoints[cp.seq] = cp_entry
        elif seen_cp.checkpoint != cp:
            flaws.append((cp.seq, f"checkpoint at seq {cp.seq}: two different copies"))
    if checkpoints and public_key is None:
        flaws.append((0, "checkpoints are present but no public key to check them: pass --pubkey"))
    verified = 0
    for seq in sorted(checkpoints):
        cp = checkpoints[seq].checkpoint
        if public_key is not None and not signature_valid(public_key, cp):
            flaws.append((seq, f"checkpoint at seq {seq}: signature does not verify (forged)"))
            break
        if seq > last_seq:
            flaws.append(
                (
                    last_seq + 1,
                    f"truncated: the stream ends at seq {last_seq} but the checkpoint at seq "
                    f"{seq} vouches for records through {seq}: seq {last_seq + 1}..{seq} missing",
                )
            )
            break
        if hashes.get(seq) != cp.hash:
            flaws.append(
                (
                    seq,
                    f"checkpoint at seq {seq}: names a hash the record at seq {seq} does not have",
                )
            )
            break
        verified = seq
    report.checkpoints = len(checkpoints)

    if flaws:
        flaws.sort(key=lambda f: f[0])
        report.ok = False
        report.bad_seq = flaws[0][0] or None
        report.problem = flaws[0][1]
        return report
    report.verified_through = verified
    if not checkpoints and chain:
        report.warnings.append("no checkpoint: nothing signed vouches for completeness")
    if chain and last_seq > verified:
        report.unverified_tail = (verified + 1, last_seq)
    return report


# --------------------------------------------------------------------------- entry points


def resolve_public_key(
    pubkey: Path | None, *, db: Path | None, source: Source, report_warnings: list[str]
) -> Ed25519PublicKey | None:
    if pubkey is not None:
        key = load_public_key(pubkey)
        if source.embedded_key is not None:
            try:
                embedded = public_key_from_pem(source.embedded_key.encode("ascii"), "the stream")
            except ConfigError:
                embedded = None
            if embedded is None or embedded.public_bytes_raw() != key.public_bytes_raw():
                report_warnings.append("the stream names a different audit key than --pubkey")
        return key
    if db is not None:
        beside = db.parent / PUBLIC_KEY_NAME
        if beside.exists():
            return load_public_key(beside)
        return None
    if source.embedded_key is not None:
        report_warnings.append(
            "checked with the audit key the stream itself carries; pass --pubkey to pin the key"
        )
        return public_key_from_pem(source.embedded_key.encode("ascii"), "the stream")
    return None


def verify_db(path: Path, pubkey: Path | None = None) -> Report:
    source = load_db(path)
    warnings: list[str] = []
    key = resolve_public_key(pubkey, db=path, source=source, report_warnings=warnings)
    report = verify(source, key)
    report.warnings[:0] = warnings
    return report


def verify_otlp_json(path: Path, pubkey: Path | None = None) -> Report:
    source = load_otlp_json(path)
    warnings: list[str] = []
    key = resolve_public_key(pubkey, db=None, source=source, report_warnings=warnings)
    report = verify(source, key)
    report.warnings[:0] = warnings
    return report
