"""Signed checkpoints: the box's Ed25519 audit key vouching for the chain head.

Theory of operation
-------------------
The box has one audit key pair, made at the daemon's first start in its state dir:
``audit_key.pem`` (PKCS#8, mode 0600, readable by the daemon's user only) and
``audit_key.pub`` (the public half, for reviewers). Its *fingerprint* (``fingerprint``,
``sha256:`` and the hex SHA-256 of the key's 32 raw bytes; ``openbus audit key`` prints it) is
what a reviewer pins, with the key file itself or in the org policy's
``[audit.key_fingerprints]``, so that ``openbus audit verify`` never trusts a key the evidence
brings along. A *checkpoint* is the signature over
``canonical({"seq", "hash", "time", "box"})`` of the chain head at ``seq``
(see ``openbus.daemon.core.audit.Checkpoint``).

When one is due is a plain rule, ``CheckpointPolicy.due``: the head has moved since the last
checkpoint and either ``every`` records were appended since, or ``seconds`` have passed on
the monotonic clock. The ``Checkpointer`` applies it: it watches the audit log (a listener
that only counts and wakes its task), reads the committed head through its own connection
(so it never signs a record a transaction might still roll back), signs it and stores the
checkpoint in ``audit_checkpoints``; the shipper exports it from there. A last checkpoint is
written on a clean stop, so a gracefully stopped box leaves no unverified tail; a tail that a
killed run left unsigned is signed as soon as the next run's checkpointer starts, before that
run's shipper sends anything.

What a verifier may rely on (``CheckpointPolicy.deadline``): the first record after the last
checkpoint is covered by a checkpoint no later than ``seconds`` after that checkpoint or that
record, whichever is later, or as soon as the ``every``-th record after the last checkpoint
is committed, whichever comes first; plus ``SLACK_SECONDS`` for the checkpointer's own delay
(waking its task, a thread, the database's write lock). ``openbus audit verify`` fails a
stream whose records run on past that with no checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from openbus.daemon.core.audit import AuditRecord, Checkpoint
from openbus.kernel.clock import Clock
from openbus.kernel.errors import ConfigError, Unavailable

log = logging.getLogger("openbus.audit")

PRIVATE_KEY_NAME = "audit_key.pem"
PUBLIC_KEY_NAME = "audit_key.pub"
SLACK_SECONDS = 5.0  # how late a due checkpoint may be signed (see the module docstring)


# --------------------------------------------------------------------------- keys


def public_pem(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def fingerprint(public: Ed25519PublicKey) -> str:
    """The pin of an audit key: ``sha256:`` and the hex SHA-256 of its raw bytes."""
    return "sha256:" + hashlib.sha256(public.public_bytes_raw()).hexdigest()


def load_or_create_key(state_dir: Path) -> Ed25519PrivateKey:
    """The box's audit key, made (0600) with its public half on first use."""
    private_path = state_dir / PRIVATE_KEY_NAME
    public_path = state_dir / PUBLIC_KEY_NAME
    if not private_path.exists():
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        tmp = private_path.with_name(PRIVATE_KEY_NAME + ".tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(pem)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, private_path)
        except OSError as exc:
            raise Unavailable(
                f"the audit key cannot be created in {state_dir} ({exc.strerror})"
            ) from None
    try:
        raw = private_path.read_bytes()
    except OSError as exc:
        raise Unavailable(f"the audit key {private_path} cannot be read ({exc.strerror})") from None
    try:
        loaded = serialization.load_pem_private_key(raw, password=None)
    except ValueError:
        raise Unavailable(f"the audit key {private_path} is not a PEM private key") from None
    if not isinstance(loaded, Ed25519PrivateKey):
        raise Unavailable(f"the audit key {private_path} is not an Ed25519 key")
    key = loaded
    pub = public_pem(key.public_key())
    try:
        if not public_path.exists() or public_path.read_bytes() != pub:
            public_path.write_bytes(pub)
            os.chmod(public_path, 0o644)
    except OSError as exc:
        raise Unavailable(
            f"the audit public key {public_path} cannot be written ({exc.strerror})"
        ) from None
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the public key ({exc.strerror})", path=str(path)) from None
    return public_key_from_pem(raw, str(path))


def public_key_from_pem(raw: bytes, where: str) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(raw)
    except ValueError:
        raise ConfigError("not a PEM public key", path=where) from None
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError("not an Ed25519 public key", path=where)
    return key


# --------------------------------------------------------------------------- signing


def sign(key: Ed25519PrivateKey, *, seq: int, hash: str, time: float, box: str) -> Checkpoint:
    unsigned = Checkpoint(seq=seq, hash=hash, time=round(time, 6), box=box)
    return Checkpoint(
        seq=unsigned.seq,
        hash=unsigned.hash,
        time=unsigned.time,
        box=unsigned.box,
        signature=key.sign(unsigned.payload()).hex(),
    )


def signature_valid(public: Ed25519PublicKey, checkpoint: Checkpoint) -> bool:
    try:
        public.verify(bytes.fromhex(checkpoint.signature), checkpoint.payload())
    except (InvalidSignature, ValueError):
        return False
    return True


def checkpoint_to_dict(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        "seq": checkpoint.seq,
        "hash": checkpoint.hash,
        "time": checkpoint.time,
        "box": checkpoint.box,
        "signature": checkpoint.signature,
    }


def checkpoint_from_dict(data: dict[str, Any]) -> Checkpoint:
    return Checkpoint(
        seq=int(data["seq"]),
        hash=str(data["hash"]),
        time=float(data["time"]),
        box=str(data["box"]),
        signature=str(data["signature"]),
    )


# --------------------------------------------------------------------------- the rule


@dataclass(frozen=True)
class CheckpointPolicy:
    every: int
    seconds: float

    def due(self, *, head_seq: int, last_seq: int, now: float, last_time: float) -> bool:
        if head_seq <= last_seq:
            return False
        return head_seq - last_seq >= self.every or now - last_time >= self.seconds

    def wait(self, *, now: float, last_time: float) -> float:
        """How long until the time rule can next fire."""
        return max(0.0, self.seconds - (now - last_time))

    def deadline(
        self, *, last_time: float | None, first_time: float, nth_time: float | None
    ) -> float:
        """When a running checkpointer has signed a checkpoint covering the first record after
        the last checkpoint (without ``SLACK_SECONDS``). ``last_time`` is that checkpoint's
        time (None: there is none), ``first_time`` that record's, ``nth_time`` the time of
        the ``every``-th record after the checkpoint (None: not written)."""
        start = first_time if last_time is None else max(last_time, first_time)
        due = start + self.seconds
        return due if nth_time is None else min(due, nth_time)


# --------------------------------------------------------------------------- the adapter


class Checkpointer:
    """Signs the committed chain head into ``audit_checkpoints`` when the policy says so."""

    def __init__(
        self,
        db_path: Path,
        key: Ed25519PrivateKey,
        *,
        box: str,
        clock: Clock,
        policy: CheckpointPolicy,
    ) -> None:
        self.key = key
        self.box = box
        self.clock = clock
        self.policy = policy
        self._conn = sqlite3.connect(str(db_path), isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA busy_timeout=5000")
        self._lock = threading.Lock()
        last = self._conn.execute(
            "SELECT seq FROM audit_checkpoints ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        self.last_seq: int = last[0] if last else 0
        self.last_time: float = clock.monotonic()
        self._seen_seq = self.last_seq  # highest seq a listener told us about
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.on_checkpoint: list[Any] = []  # callables notified with each new checkpoint

    # listener on AuditLog: cheap, thread-safe, never writes
    def notice(self, record: AuditRecord) -> None:
        self._seen_seq = max(self._seen_seq, record.seq)
        if self._seen_seq - self.last_seq >= self.policy.every:
            self._poke()

    def _poke(self) -> None:
        if self._loop is not None and self._wake is not None and not self._wake.is_set():
            with contextlib.suppress(RuntimeError):  # the loop is closing
                self._loop.call_soon_threadsafe(self._wake.set)

    def _head(self) -> tuple[int, str] | None:
        row = self._conn.execute("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
        return (int(row[0]), str(row[1])) if row else None

    def tick(self, *, force: bool = False) -> Checkpoint | None:
        """Sign the committed head if a checkpoint is due (or ``force``); return it."""
        with self._lock:
            head = self._head()
            if head is None or head[0] <= self.last_seq:
                self.last_time = self.clock.monotonic()
                return None
            now = self.clock.monotonic()
            if not force and not self.policy.due(
                head_seq=head[0], last_seq=self.last_seq, now=now, last_time=self.last_time
            ):
                return None
            checkpoint = sign(
                self.key, seq=head[0], hash=head[1], time=self.clock.now(), box=self.box
            )
            self._conn.execute(
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
            self.last_seq = checkpoint.seq
            self.last_time = now
        for listener in list(self.on_checkpoint):
            listener(checkpoint)
        return checkpoint

    async def run(self) -> None:
        """Sign what a previous run left unsigned, then forever: wait for ``every`` records or
        ``seconds``, then sign the head.

        The first signature is made at once, in the task's first step (before the shipper's
        task, started after this one, reads anything): a tail left by a killed run is then
        never older than this run's records, whose own deadlines start from here.
        """
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        try:
            self.tick(force=True)
        except sqlite3.Error as exc:
            log.warning("audit checkpoint at start not written (%s); will retry", exc)
        while True:
            timeout = self.policy.wait(now=self.clock.monotonic(), last_time=self.last_time)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=max(timeout, 0.05))
            self._wake.clear()
            try:
                await asyncio.to_thread(self.tick)
            except sqlite3.Error as exc:
                log.warning("audit checkpoint not written (%s); will retry", exc)
                await asyncio.sleep(1.0)

    def final(self) -> Checkpoint | None:
        try:
            return self.tick(force=True)
        except sqlite3.Error as exc:
            log.warning("final audit checkpoint not written (%s)", exc)
            return None

    def close(self) -> None:
        with self._lock:
            self._conn.close()
