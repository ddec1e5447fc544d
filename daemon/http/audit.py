"""The human API's audit resources: ``GET /api/audit`` and ``GET /api/audit/stream``.

``/api/audit?after=SEQ&limit=N`` is one audited read (``audit.read``) returning
``{"records": [...], "next": SEQ, "export": {...lag...}}``. ``/api/audit/stream?after=SEQ``
is one audited call (``audit.follow``) that then streams every record after ``SEQ`` as
NDJSON, one record per line, as they are committed, until the client goes away or the
daemon stops; an empty line every few seconds keeps idle connections alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import falcon.asgi

from openbus.daemon import audit_export as audit_service
from openbus.daemon.audit_export import AuditExport
from openbus.daemon.gate import Gate
from openbus.daemon.http.common import int_param
from openbus.daemon.http.identity import require_actor

STREAM_BATCH = 500
KEEPALIVE_SECONDS = 5.0


class AuditResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        actor = require_actor(req)
        after = int_param(req, "after", 0, minimum=0, maximum=2**62)
        limit = int_param(req, "limit", 100, minimum=1, maximum=audit_service.MAX_READ)
        resp.media = await self.gate.run(
            actor, audit_service.READ_ACTION, {"after": after, "limit": limit}
        )


class AuditStreamResource:
    def __init__(self, gate: Gate, export: AuditExport) -> None:
        self.gate = gate
        self.export = export

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        actor = require_actor(req)
        after = int_param(req, "after", 0, minimum=0, maximum=2**62)
        await self.gate.run(actor, audit_service.FOLLOW_ACTION, {"after": after})
        resp.content_type = "application/x-ndjson"
        resp.stream = self._lines(after)

    async def _lines(self, after: int) -> AsyncIterator[bytes]:
        audit = self.export.audit
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def notice(_record: object) -> None:
            if not wake.is_set():
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(wake.set)

        audit.listeners.append(notice)
        try:
            while not self.export.stopping:
                wake.clear()
                records = audit.read(after, STREAM_BATCH)
                if records:
                    after = records[-1].seq
                    yield b"".join(_line(r.to_dict()) for r in records)
                    continue
                try:
                    await asyncio.wait_for(wake.wait(), timeout=KEEPALIVE_SECONDS)
                except TimeoutError:
                    yield b"\n"
        finally:
            with contextlib.suppress(ValueError):
                audit.listeners.remove(notice)


def _line(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def add_routes(app: falcon.asgi.App[Any, Any], gate: Gate, export: AuditExport) -> None:
    app.add_route("/api/audit", AuditResource(gate))
    app.add_route("/api/audit/stream", AuditStreamResource(gate, export))
