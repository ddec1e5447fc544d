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
must follow the last (a gap is a deleted record, at the start of the stream too), each record
must hash to its ``hash`` (an edited byte), and its ``prev_hash`` must be the previous
record's hash (a reordered, replaced or forked record). Each checkpoint must name exactly the
hash of the record at its seq, and the stream must reach it (a tail cut off before the last
checkpoint). The first flaw by seq is reported. Records after the last checkpoint are
reported as the *unverified tail*: nothing signed yet vouches that the stream is complete
there.

Completeness of the tail
------------------------
A checkpoint vouches for the records up to its seq, never for "this is the end". What bounds
the tail is the cadence the box signs at (``[audit] checkpoint_every`` records or
``checkpoint_seconds``; the verifier's config, or ``--checkpoint-every`` and
``--checkpoint-seconds`` for another box's stream) and the guarantee of
``openbus.daemon.audit.checkpoints``. With L the last checkpoint (seq and time), F the record
at L+1 and N the newest record of the tail (all times are inside the chain's hashes and the
checkpoints' signatures), a checkpoint covering F is due by

    due = min(max(time(L), time(F)) + checkpoint_seconds, time(record L + checkpoint_every))

(the second term only when that record is present; with no checkpoint at all, time(F) alone).
A stream whose tail runs on past ``due + SLACK_SECONDS`` (time(N) later than that) with no
checkpoint covering F fails: a checkpoint, or the records it covered, was removed; the daemon
would have signed one before writing N. The shipper sends every checkpoint signed before a
record it sends with or before that record, so this holds for a collector's file as for the
database. A tail that stops within that window cannot be told from a box killed before it
signed: dropping the last checkpoint together with everything after the one before, or
cutting the records within one cadence of the end, passes, and the report gives the tail and
its due time. For ``--db``, the due time is also compared with now: overdue is a warning,
since a daemon that has not run since it was killed explains it as well as a removed
checkpoint does (a running daemon signs such a tail when it starts).

A gap in ``seq`` anywhere, in the tail too, is a missing record, whatever the checkpoints say;
a checkpoint whose seq is beyond the stream's last record is a truncated stream.

Origin
------
A chain proves nothing about who wrote it: anyone can edit a record, re-chain everything
after it and sign new checkpoints with a key of their own. So checkpoint signatures are only
checked against a key pinned from outside the evidence (a ``Pin``):

* ``--pubkey FILE``: the box's ``audit_key.pub``, taken from the box itself;
* ``--policy FILE --org-key FILE``: an org policy, verified like the daemon verifies it,
  whose ``[audit.key_fingerprints]`` pins each box's key fingerprint; the key material may
  then come from the evidence (the stream's ``openbus.audit_key`` resource, the
  ``audit_key.pub`` beside a database), since a key whose fingerprint is not pinned for the
  box a checkpoint names is never used. Without flags, the ``[policy]`` the config names.

The key a stream or a database brings along is never trusted by itself, not even for a
database in the box's own state dir: whoever can rewrite that database can rewrite the public
key beside it. With no pin, or with a checkpoint whose box has no pinned key at hand, or with
no checkpoint at all, the report says "origin not verified" and fails, while still saying
whether the chain is intact. A checkpoint that a pinned key does not verify is forged.
"""

from __future__ import annotations

import datetime
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from openbus.daemon.audit.checkpoints import (
    PUBLIC_KEY_NAME,
    SLACK_SECONDS,
    CheckpointPolicy,
    checkpoint_from_dict,
    fingerprint,
    load_public_key,
    public_key_from_pem,
    signature_valid,
)
from openbus.daemon.config import AuditConfig
from openbus.daemon.core.audit import (
    GENESIS,
    AuditRecord,
    Checkpoint,
    canonical,
    record_from_dict,
    record_hash,
)
from openbus.kernel import json_text
from openbus.kernel.clock import SystemClock
from openbus.kernel.errors import ConfigError
from openbus.policy.loader import PolicyLoader
from openbus.policy.signing import load_public_keys

_DEFAULTS = AuditConfig()
DEFAULT_CADENCE = CheckpointPolicy(_DEFAULTS.checkpoint_every, _DEFAULTS.checkpoint_seconds)

NO_PIN = (
    "no audit key is pinned: pass --pubkey FILE (the box's audit_key.pub, taken from the box), "
    "or --policy FILE --org-key FILE (an org policy that pins it in [audit.key_fingerprints])"
)


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
    embedded_keys: list[str] = field(default_factory=list)  # key PEMs the resources carried


@dataclass(frozen=True)
class Pin:
    """The audit keys the verifier trusts, and where that trust comes from (never the evidence).

    ``keys`` is the key material signatures are checked with. Without ``fingerprints`` (a
    ``--pubkey``) those keys are trusted for any box. With them (an org policy's
    ``[audit.key_fingerprints]``: box name -> pinned fingerprints) a key is used for a
    checkpoint only when its fingerprint is pinned for the box that checkpoint names, so the
    material may come from the evidence itself (the stream's resource, the ``audit_key.pub``
    beside a database): a substituted key is simply not pinned.
    """

    source: str  # "--pubkey FILE", "the org policy FILE (org O, version N)"
    keys: tuple[Ed25519PublicKey, ...] = ()
    material: str = ""  # where ``keys`` came from
    fingerprints: Mapping[str, frozenset[str]] | None = None

    def key_for(self, box: str) -> Ed25519PublicKey | None:
        if self.fingerprints is None:
            return self.keys[0] if self.keys else None
        pinned = self.fingerprints.get(box, frozenset())
        return next((k for k in self.keys if fingerprint(k) in pinned), None)

    def unpinned(self, box: str) -> str:
        """Why no key checks a checkpoint of ``box`` (only with ``fingerprints``)."""
        pinned = sorted((self.fingerprints or {}).get(box, ()))
        says = f"pins {', '.join(pinned)}" if pinned else "pins no audit key"
        if not self.keys:
            return f"{self.source} {says} for box {box!r}, and no key is at hand to check with"
        at_hand = ", ".join(fingerprint(k) for k in self.keys)
        return f"{self.source} {says} for box {box!r}, not {at_hand} ({self.material})"


@dataclass
class Report:
    ok: bool
    problem: str | None = None
    chain_intact: bool = True  # no flaw in the records and checkpoints themselves
    origin_verified: bool = False  # a checkpoint verified with a pinned key, none refused
    origin: str | None = None  # which box, which key, pinned by what
    bad_seq: int | None = None
    records: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    checkpoints: int = 0
    verified_through: int = 0  # the last seq a good checkpoint vouches for
    unverified_tail: tuple[int, int] | None = None
    cadence: CheckpointPolicy = DEFAULT_CADENCE  # the box's, as the verifier was told
    last_checkpoint: tuple[int, float] | None = None  # (seq, time) of the last one
    checkpoint_due: float | None = None  # by when a checkpoint covering the tail is due
    tail_newest: float | None = None  # the time of the tail's newest record
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "problem": self.problem,
            "chain_intact": self.chain_intact,
            "origin_verified": self.origin_verified,
            "origin": self.origin,
            "bad_seq": self.bad_seq,
            "records": self.records,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "checkpoints": self.checkpoints,
            "verified_through": self.verified_through,
            "unverified_tail": list(self.unverified_tail) if self.unverified_tail else None,
            "cadence": {
                "every": self.cadence.every,
                "seconds": self.cadence.seconds,
                "slack": SLACK_SECONDS,
            },
            "last_checkpoint": (
                {"seq": self.last_checkpoint[0], "time": self.last_checkpoint[1]}
                if self.last_checkpoint
                else None
            ),
            "checkpoint_due": self.checkpoint_due,
            "warnings": list(self.warnings),
        }

    def text(self) -> str:
        lines: list[str] = []
        span = f"seq {self.first_seq}..{self.last_seq}" if self.records else "no records"
        if self.ok:
            lines.append(
                f"OK: {self.records} records ({span}), chain intact, "
                f"{self.checkpoints} checkpoints verified"
            )
        else:
            lines.append(f"BAD: {self.problem}")
            if self.chain_intact:
                checked = "" if self.verified_through else ", their signatures not checked"
                lines.append(
                    f"chain intact: {self.records} records ({span}), "
                    f"{self.checkpoints} checkpoints consistent with it{checked}"
                )
        if self.origin:
            lines.append(f"origin: {self.origin}")
        if self.verified_through:
            lines.append(f"complete and signed through seq {self.verified_through}")
        if self.unverified_tail:
            a, b = self.unverified_tail
            lines.append(
                f"unverified tail: seq {a}..{b} ({b - a + 1} records after the last checkpoint; "
                "no signature vouches for completeness there yet)"
            )
            if self.ok and self.checkpoint_due is not None and self.tail_newest is not None:
                short = self.checkpoint_due + SLACK_SECONDS - self.tail_newest
                lines.append(
                    f"a checkpoint covering it is due by {_iso(self.checkpoint_due)} "
                    f"({_cadence(self.cadence)}); the records stop {short:.1f} s short of "
                    "that, so a cut here cannot be told from a daemon killed before it signed"
                )
        lines.extend(f"warning: {w}" for w in self.warnings)
        return "\n".join(lines)


def _iso(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _cadence(cadence: CheckpointPolicy) -> str:
    return (
        f"the box signs every {cadence.every} records or {cadence.seconds:g} s, "
        f"+{SLACK_SECONDS:g} s slack"
    )


# --------------------------------------------------------------------------- readers


def load_db(path: Path) -> Source:
    if not path.exists():
        raise ConfigError("no such file", path=str(path))
    source = Source()
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        try:
            # one read transaction: records and checkpoints from the same moment, even while
            # a running daemon appends to both
            conn.execute("BEGIN")
            rows = conn.execute(
                "SELECT seq, time, actor, action, outcome, scope, target, message_id, details, "
                "prev_hash, hash FROM audit ORDER BY seq"
            ).fetchall()
            cps = conn.execute(
                "SELECT seq, hash, time, box, signature FROM audit_checkpoints ORDER BY seq"
            ).fetchall()
            conn.execute("COMMIT")
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
            details = json_text.loads(row[8])
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
            request = json_text.loads(line)
        except ValueError:
            source.problems.append(f"line {number} is not valid JSON")
            continue
        for resource_logs in request.get("resourceLogs") or []:
            resource = _attributes((resource_logs.get("resource") or {}).get("attributes") or [])
            pem = resource.get("openbus.audit_key")
            if isinstance(pem, str) and pem not in source.embedded_keys:
                source.embedded_keys.append(pem)
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
        data = json_text.loads(body) if isinstance(body, str) else None
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


def verify(
    source: Source,
    pin: Pin | None,
    cadence: CheckpointPolicy = DEFAULT_CADENCE,
    now: float | None = None,
) -> Report:
    """Check ``source`` (see the module docstring); ``now`` (a database's) also dates the tail."""
    report = Report(ok=True, cadence=cadence)
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
    consistent = verified = 0
    unpinned: str | None = None  # why a checkpoint could not be checked against a pinned key
    signers: dict[str, str] = {}  # box -> fingerprint of the pinned key that verified it
    for seq in sorted(checkpoints):
        cp = checkpoints[seq].checkpoint
        key = pin.key_for(cp.box) if pin is not None else None
        if key is not None and not signature_valid(key, cp):
            flaws.append((seq, f"checkpoint at seq {seq}: signature does not verify (forged)"))
            break
        if pin is not None and key is None and unpinned is None:
            unpinned = pin.unpinned(cp.box)
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
        consistent = seq
        if key is not None:
            verified = seq
            signers[cp.box] = fingerprint(key)
    report.checkpoints = len(checkpoints)
    if consistent:
        report.last_checkpoint = (consistent, checkpoints[consistent].checkpoint.time)
    tail_flaw = _overdue_tail(report, {r.seq: r for r in chain}, last_seq, now)
    if tail_flaw is not None:
        flaws.append(tail_flaw)

    if flaws:
        flaws.sort(key=lambda f: f[0])
        report.ok = report.chain_intact = False
        report.bad_seq = flaws[0][0] or None
        report.problem = flaws[0][1]
        return report
    report.verified_through = verified
    if not checkpoints and chain:
        report.warnings.append("no checkpoint: nothing signed vouches for completeness")
    if chain and last_seq > consistent:
        report.unverified_tail = (consistent + 1, last_seq)
    if pin is None:
        unpinned = NO_PIN
    elif not checkpoints and chain:
        unpinned = "no checkpoint, so nothing signed says which box wrote these records"
    if unpinned is not None:
        report.ok = False
        report.problem = f"origin not verified: {unpinned}"
        return report
    report.origin_verified = True
    if signers and pin is not None:
        boxes = ", ".join(f"box {box!r} (audit key {fp})" for box, fp in sorted(signers.items()))
        report.origin = f"{boxes}, pinned by {pin.source}"
    return report


def _overdue_tail(
    report: Report, records: Mapping[int, AuditRecord], last_seq: int, now: float | None
) -> tuple[int, str] | None:
    """The tail rule (module docstring): the flaw when the tail's records run on past the time
    a checkpoint covering them was due; with ``now``, a warning when that time has passed."""
    after = report.last_checkpoint[0] if report.last_checkpoint else 0
    first = records.get(after + 1)
    if first is None or last_seq <= after:
        return None  # no tail, or a gap right after the checkpoint (a flaw of its own)
    cadence = report.cadence
    nth = records.get(after + cadence.every)
    due = cadence.deadline(
        last_time=report.last_checkpoint[1] if report.last_checkpoint else None,
        first_time=first.time,
        nth_time=nth.time if nth is not None else None,
    )
    newest = max(r.time for seq, r in records.items() if seq > after)
    report.checkpoint_due, report.tail_newest = due, newest
    last = f"the last checkpoint (seq {after})" if after else "the start of the stream"
    if newest > due + SLACK_SECONDS:
        return (
            after + 1,
            f"checkpoint missing: seq {after + 1}..{last_seq} follow {last} with no checkpoint "
            f"covering them, yet one was due by {_iso(due)} ({_cadence(cadence)}) and the "
            f"records go on until {_iso(newest)}, {newest - due:.1f} s later: a checkpoint, "
            "or the records it covered, was removed (unless the box signs less often than "
            "that: --checkpoint-every, --checkpoint-seconds)",
        )
    if now is not None and now > due + SLACK_SECONDS:
        report.warnings.append(
            f"the tail is overdue now: a checkpoint covering seq {after + 1} was due by "
            f"{_iso(due)}, {now - due:.0f} s ago; either the daemon has not run since seq "
            f"{last_seq} was written (it signs such a tail as it starts) or checkpoints were "
            "removed from this database"
        )
    return None


# --------------------------------------------------------------------------- entry points


def pubkey_pin(path: Path) -> Pin:
    """Trust exactly the audit key in ``path`` (``--pubkey``), for any box."""
    where = f"--pubkey {path}"
    return Pin(source=where, keys=(load_public_key(path),), material=where)


def policy_pin(policy: Path, org_key: Path, *, pubkey: Path | None = None, via: str = "") -> Pin:
    """Trust the audit keys an org policy pins per box (``[audit.key_fingerprints]``).

    The policy is verified as the daemon verifies it (``PolicyLoader``: its signature by
    ``org_key`` over its exact bytes, then the schema); no rollback state is kept, since the
    reviewer chooses which policy to judge by. The key material to check signatures with is
    ``pubkey`` when given, else whatever the evidence carries: a key is only used when its
    fingerprint is pinned for the box its checkpoint names.
    """
    loaded = PolicyLoader(policy, load_public_keys([org_key]), SystemClock()).load()
    source = f"the org policy {policy} (org {loaded.policy.org}, version {loaded.version}{via})"
    if pubkey is None:
        return Pin(source=source, fingerprints=loaded.policy.audit.key_fingerprints)
    return Pin(
        source=source,
        keys=(load_public_key(pubkey),),
        material=f"--pubkey {pubkey}",
        fingerprints=loaded.policy.audit.key_fingerprints,
    )


def _embedded_keys(source: Source, warnings: list[str]) -> list[Ed25519PublicKey]:
    keys = []
    for pem in source.embedded_keys:
        try:
            keys.append(public_key_from_pem(pem.encode("ascii"), "the stream"))
        except (ConfigError, UnicodeEncodeError):
            warnings.append("the stream carries an audit key that is not an Ed25519 PEM key")
    return keys


def _with_evidence(
    pin: Pin | None, source: Source, beside: Path | None, warnings: list[str]
) -> Pin | None:
    """A policy pin completed with the key material the evidence carries (checked against the
    pinned fingerprints, never trusted by itself); a ``--pubkey`` pin as it is."""
    embedded = _embedded_keys(source, warnings)
    if pin is None:
        return None
    if pin.keys:
        pinned = pin.keys[0].public_bytes_raw()
        if embedded and all(k.public_bytes_raw() != pinned for k in embedded):
            warnings.append(f"the stream names a different audit key than {pin.material}")
        return pin
    if beside is not None and beside.exists():
        try:
            return replace(pin, keys=(load_public_key(beside),), material=str(beside))
        except ConfigError as exc:
            warnings.append(exc.message)
            return pin
    return replace(pin, keys=tuple(embedded), material="the stream's resource")


def verify_db(
    path: Path,
    pin: Pin | None = None,
    cadence: CheckpointPolicy = DEFAULT_CADENCE,
    now: float | None = None,
) -> Report:
    source = load_db(path)
    warnings: list[str] = []
    beside = path.parent / PUBLIC_KEY_NAME
    report = verify(source, _with_evidence(pin, source, beside, warnings), cadence, now)
    report.warnings[:0] = warnings
    return report


def verify_otlp_json(
    path: Path, pin: Pin | None = None, cadence: CheckpointPolicy = DEFAULT_CADENCE
) -> Report:
    source = load_otlp_json(path)
    warnings: list[str] = []
    report = verify(source, _with_evidence(pin, source, None, warnings), cadence)
    report.warnings[:0] = warnings
    return report
