"""The off-box shipper: audit records and checkpoints to an OTLP collector, losing nothing.

Theory of operation
-------------------
The durable store is the queue. The shipper keeps two cursors in ``export_cursor``
(``otlp`` = the last record seq the collector acknowledged, ``otlp.checkpoints`` = the last
checkpoint seq) and loops:

    read the next batch after the cursor (its own SQLite connection: committed rows only)
      -> encode as OpenTelemetry log records -> exporter.export(batch) (blocking, in a thread)
      -> SUCCESS: advance both cursors in one transaction, continue at once
      -> FAILURE: keep the cursors, wait (backoff doubling to a cap), retry forever
    nothing left -> sleep until the audit log commits a record or a checkpoint is signed

No in-memory queue can overflow and nothing is dropped: an outage of any length only grows
the lag. A crash (kill -9) between a successful export and the cursor commit re-sends that
batch after restart; the receiver dedupes by ``openbus.seq``. The SDK's batch processor is
deliberately not used (it drops the oldest records when its queue fills).

Each record is one log record: body = the canonical JSON of the record (what ``verify``
re-hashes), attributes ``openbus.kind=record``, ``openbus.seq``, ``openbus.hash``,
``openbus.prev_hash``, ``openbus.actor``, ``openbus.action``, ``openbus.outcome`` and the
optional ``openbus.scope``, ``openbus.target``, ``openbus.message_id``. A checkpoint is a log
record with ``openbus.kind=checkpoint``, ``openbus.seq``, ``openbus.hash``,
``openbus.signature`` and its canonical JSON as the body. The resource names the box:
``service.name=openbus``, ``host.name``, ``openbus.box`` and ``openbus.audit_key`` (the
public key PEM, a convenience: reviewers should pin the key they trust with ``--pubkey``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from openbus.daemon.audit.checkpoints import checkpoint_to_dict
from openbus.daemon.audit.log import _COLUMNS, _row_to_record
from openbus.daemon.config import AuditConfig
from openbus.daemon.core.audit import AuditRecord, Checkpoint, canonical
from openbus.kernel.clock import Clock
from openbus.kernel.errors import ConfigError

log = logging.getLogger("openbus.audit")

CURSOR = "otlp"
CHECKPOINT_CURSOR = "otlp.checkpoints"
SCOPE_NAME = "openbus.audit"


class Exporter(Protocol):
    def export(self, batch: Sequence[Any]) -> Any: ...

    def shutdown(self) -> None: ...


# --------------------------------------------------------------------------- config


def read_headers_file(path: Path) -> dict[str, str]:
    """``Key: value`` lines; blank lines and ``#`` comments skipped. Values never echoed."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot read the OTLP headers file ({exc.strerror})", path=str(path)
        ) from None
    except UnicodeDecodeError:
        raise ConfigError("the OTLP headers file is not UTF-8 text", path=str(path)) from None
    headers: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition(":")
        key = key.strip()
        if not sep or not key or any(c.isspace() for c in key):
            raise ConfigError(f"line {number}: expected 'Key: value'", path=str(path))
        headers[key.lower()] = value.strip()
    return headers


def http_logs_url(endpoint: str) -> str:
    """The HTTP exporter wants the full signal URL; accept a base URL too."""
    parts = urlsplit(endpoint)
    if parts.path in ("", "/"):
        return endpoint.rstrip("/") + "/v1/logs"
    return endpoint


def make_exporter(
    config: AuditConfig, *, timeout: float = 5.0, headers: Mapping[str, str] | None = None
) -> Exporter:
    if not config.otlp_endpoint:
        raise ConfigError("no OTLP endpoint configured", path="[audit]", key="otlp_endpoint")
    if headers is None:
        headers = read_headers_file(config.otlp_headers_file) if config.otlp_headers_file else {}
    endpoint = config.otlp_endpoint
    if config.otlp_protocol == "grpc":
        # Only the configured protocol's exporter is loaded: gRPC brings in grpcio.
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (  # noqa: PLC0415
            OTLPLogExporter as GrpcExporter,
        )

        insecure = urlsplit(endpoint).scheme == "http" if "://" in endpoint else None
        grpc_exporter: Exporter = GrpcExporter(
            endpoint=endpoint, insecure=insecure, headers=dict(headers), timeout=timeout
        )
        return grpc_exporter
    from opentelemetry.exporter.otlp.proto.http._log_exporter import (  # noqa: PLC0415
        OTLPLogExporter as HttpExporter,
    )

    http_exporter: Exporter = HttpExporter(
        endpoint=http_logs_url(endpoint), headers=dict(headers), timeout=timeout
    )
    return http_exporter


# --------------------------------------------------------------------------- encoding


def _ns(seconds: float) -> int:
    return round(seconds * 1_000_000_000)


class Encoder:
    """Turns records and checkpoints into the SDK's readable log records."""

    def __init__(self, resource_attributes: Mapping[str, str]) -> None:
        self.resource = Resource(dict(resource_attributes))
        self.scope = InstrumentationScope(SCOPE_NAME, "1")

    def _log_record(
        self, *, time: float, observed: float, body: str, attributes: dict[str, Any], warn: bool
    ) -> Any:
        record = LogRecord(
            timestamp=_ns(time),
            observed_timestamp=_ns(observed),
            severity_number=SeverityNumber.WARN if warn else SeverityNumber.INFO,
            severity_text="WARN" if warn else "INFO",
            body=body,
            attributes=attributes,
            event_name="openbus.audit",
        )
        return ReadableLogRecord(record, self.resource, self.scope)

    def record(self, record: AuditRecord, observed: float) -> Any:
        attributes: dict[str, Any] = {
            "openbus.kind": "record",
            "openbus.seq": record.seq,
            "openbus.hash": record.hash,
            "openbus.prev_hash": record.prev_hash,
            "openbus.actor": record.actor,
            "openbus.action": record.action,
            "openbus.outcome": record.outcome,
        }
        for name in ("scope", "target", "message_id"):
            value = getattr(record, name)
            if value is not None:
                attributes[f"openbus.{name}"] = value
        return self._log_record(
            time=record.time,
            observed=observed,
            body=canonical(record.to_dict()).decode("ascii"),
            attributes=attributes,
            warn=record.outcome in ("refused", "error"),
        )

    def checkpoint(self, checkpoint: Checkpoint, observed: float) -> Any:
        return self._log_record(
            time=checkpoint.time,
            observed=observed,
            body=canonical(checkpoint_to_dict(checkpoint)).decode("ascii"),
            attributes={
                "openbus.kind": "checkpoint",
                "openbus.seq": checkpoint.seq,
                "openbus.hash": checkpoint.hash,
                "openbus.box": checkpoint.box,
                "openbus.signature": checkpoint.signature,
            },
            warn=False,
        )


def resource_attributes(box: str, public_key_pem: str | None = None) -> dict[str, str]:
    attributes = {"service.name": "openbus", "host.name": socket.gethostname(), "openbus.box": box}
    if public_key_pem:
        attributes["openbus.audit_key"] = public_key_pem
    return attributes


# --------------------------------------------------------------------------- the shipper


@dataclass(frozen=True)
class Batch:
    records: list[AuditRecord]
    checkpoints: list[Checkpoint]

    @property
    def empty(self) -> bool:
        return not self.records and not self.checkpoints


class Shipper:
    def __init__(
        self,
        db_path: Path,
        exporter: Exporter | None,
        *,
        clock: Clock,
        resource: Mapping[str, str],
        endpoint: str | None = None,
        batch_size: int = 512,
        backoff_start: float = 0.25,
        backoff_cap: float = 10.0,
        head: Callable[[], int] | None = None,
    ) -> None:
        self.exporter = exporter
        self.clock = clock
        self.endpoint = endpoint
        self.batch_size = batch_size
        self.backoff_start = backoff_start
        self.backoff_cap = backoff_cap
        self.encoder = Encoder(resource)
        self._conn = sqlite3.connect(str(db_path), isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA busy_timeout=5000")
        self._lock = threading.Lock()
        self._head = head
        self._oldest: tuple[int, float] | None = None  # (seq, time) of a record, cached
        self.exported_seq = self._cursor(CURSOR)
        self.exported_checkpoint = self._cursor(CHECKPOINT_CURSOR)
        self.reachable: bool | None = None
        self.last_error: str | None = None
        self.exports = 0
        self.failures = 0
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self._stop_event: asyncio.Event | None = None

    # ------------------------------------------------------------------ db

    def _cursor(self, name: str) -> int:
        with self._lock:
            row = self._conn.execute(
                "SELECT seq FROM export_cursor WHERE name = ?", (name,)
            ).fetchone()
        return int(row[0]) if row else 0

    def next_batch(self) -> Batch:
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_COLUMNS} FROM audit WHERE seq > ? ORDER BY seq LIMIT ?",
                (self.exported_seq, self.batch_size),
            ).fetchall()
            records = [_row_to_record(row) for row in rows]
            upto = records[-1].seq if records else self.exported_seq
            cps = self._conn.execute(
                "SELECT seq, hash, time, box, signature FROM audit_checkpoints "
                "WHERE seq > ? AND seq <= ? ORDER BY seq",
                (self.exported_checkpoint, upto),
            ).fetchall()
        return Batch(records, [Checkpoint(*row) for row in cps])

    def _advance(self, batch: Batch) -> None:
        seq = batch.records[-1].seq if batch.records else self.exported_seq
        cp = batch.checkpoints[-1].seq if batch.checkpoints else self.exported_checkpoint
        now = self.clock.now()
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for name, value in ((CURSOR, seq), (CHECKPOINT_CURSOR, cp)):
                    self._conn.execute(
                        "INSERT INTO export_cursor (name, seq, updated) VALUES (?,?,?) "
                        "ON CONFLICT(name) DO UPDATE "
                        "SET seq = excluded.seq, updated = excluded.updated",
                        (name, value, now),
                    )
                self._conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
                raise
        self.exported_seq = seq
        self.exported_checkpoint = cp

    # ------------------------------------------------------------------ one step

    def ship_once(self) -> tuple[bool, int]:
        """Export one batch (blocking). Returns (success, number of log records sent)."""
        batch = self.next_batch()
        if batch.empty:
            return True, 0
        if self.exporter is None:
            return False, 0
        observed = self.clock.now()
        items = [self.encoder.record(r, observed) for r in batch.records]
        items += [self.encoder.checkpoint(c, observed) for c in batch.checkpoints]
        try:
            result = self.exporter.export(items)
            ok = getattr(result, "name", str(result)) == "SUCCESS"
            error = None if ok else "the collector did not accept the batch"
        except Exception as exc:  # noqa: BLE001 (an exporter bug must not kill the shipper)
            ok, error = False, f"{exc.__class__.__name__}"
        if not ok:
            self.reachable = False
            self.last_error = error
            self.failures += 1
            return False, 0
        self._advance(batch)
        self.reachable = True
        self.last_error = None
        self.exports += 1
        return True, len(items)

    # ------------------------------------------------------------------ the task

    def notice(self, _item: object = None) -> None:
        """Listener for new records and checkpoints: wake the task (thread-safe, cheap)."""
        if self._loop is not None and self._wake is not None and not self._wake.is_set():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._wake.set)

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._stop_event = asyncio.Event()
        delay = self.backoff_start
        while not self._stopping:
            self._wake.clear()
            try:
                ok, sent = await asyncio.to_thread(self.ship_once)
            except sqlite3.Error as exc:
                log.warning("audit shipper cannot read the store (%s); will retry", exc)
                ok, sent = False, 0
            if ok and sent:
                delay = self.backoff_start
                continue
            if ok:
                delay = self.backoff_start
                await self._wake.wait()
                continue
            if self.failures == 1 or self.failures % 20 == 0:
                log.warning(
                    "audit export to %s failed (%s); retrying, nothing is dropped",
                    self.endpoint,
                    self.last_error,
                )
            assert self._stop_event is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop_event.wait(), timeout=delay)
            delay = min(delay * 2, self.backoff_cap)

    def stop(self) -> None:
        self._stopping = True
        self.notice()
        if self._loop is not None and self._stop_event is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop_event.set)

    def close(self) -> None:
        if self.exporter is not None:
            with contextlib.suppress(Exception):
                self.exporter.shutdown()
        with self._lock:
            self._conn.close()

    # ------------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        """Export lag for ``/healthz`` and ``audit tail`` (every audited read carries it, so
        it costs no query when the head is known and the oldest unexported record's time is
        cached: a record never changes once written)."""
        exported = self.exported_seq
        if self._head is not None:
            head = self._head()
        else:
            with self._lock:
                row = self._conn.execute("SELECT MAX(seq) FROM audit").fetchone()
            head = int(row[0] or 0)
        oldest: float | None = None
        if head > exported:
            cached = self._oldest
            if cached is not None and cached[0] == exported + 1:
                oldest = cached[1]
            else:
                with self._lock:
                    found = self._conn.execute(
                        "SELECT time FROM audit WHERE seq = ?", (exported + 1,)
                    ).fetchone()
                if found is not None:
                    oldest = float(found[0])
                    self._oldest = (exported + 1, oldest)
        lag_seconds = max(0.0, self.clock.now() - oldest) if oldest is not None else 0.0
        return {
            "seq": head,
            "exported_seq": exported,
            "lag_records": max(0, head - exported),
            "lag_seconds": round(lag_seconds, 3),
            "endpoint": self.endpoint,
            "endpoint_reachable": self.reachable,
        }
