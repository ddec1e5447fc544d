"""Calling the daemon's ASGI app in-process, as a given unix-socket peer.

A deterministic stand-in for the unix socket listener: it adds the ``openbus.peer``
extension the real gunicorn worker adds (``daemon.http.worker``). Integration tests use the
real daemon; this is for walking every route quickly.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from openbus.daemon.http.worker import PEER_EXTENSION


class _ClientGone(Exception):
    pass


async def call(
    app: Any,
    method: str,
    path: str,
    body: Any = None,
    *,
    peer: dict[str, int] | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
    query: str = "",
    content: bytes | None = None,
    content_type: bytes | None = b"application/json",
) -> tuple[int, Any]:
    """One request; ``content`` is the body as sent (instead of ``body`` as JSON), and
    ``content_type`` None sends no Content-Type."""
    payload = content if content is not None else b"" if body is None else json.dumps(body).encode()
    typed = [(b"content-type", content_type)] if content_type is not None else []
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [
            (b"host", b"openbus"),
            *typed,
            (b"content-length", str(len(payload)).encode()),
            *(headers or []),
        ],
        "server": ("openbus", 0),
        "client": None,
        "extensions": {}
        if peer is False
        else {PEER_EXTENSION: peer or {"pid": os.getpid(), "uid": os.getuid(), "gid": os.getgid()}},
    }
    sent = False
    status = 0
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": payload, "more_body": False}
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                raise _ClientGone  # a stream: read its first chunk, then hang up

    with contextlib.suppress(_ClientGone):
        await app(scope, receive, send)
    raw = b"".join(chunks)
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")
