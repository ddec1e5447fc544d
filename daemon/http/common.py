"""Helpers shared by the human API's resources."""

from __future__ import annotations

import json
from typing import Any

import falcon.asgi

from openbus.kernel.errors import BadRequest

MAX_BODY = 256 * 1024


async def read_json(req: falcon.asgi.Request) -> dict[str, Any]:
    """The request's JSON object body; a clear 400 for anything else."""
    body = getattr(req.context, "body", None)
    if body is None:
        if req.content_length is not None and req.content_length > MAX_BODY:
            raise BadRequest(f"body larger than {MAX_BODY} bytes", field="body")
        body = await req.stream.read(MAX_BODY + 1)
        if len(body) > MAX_BODY:
            raise BadRequest(f"body larger than {MAX_BODY} bytes", field="body")
    if not body:
        raise BadRequest("a JSON object body is required", field="body")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("body is not valid JSON", field="body") from None
    if not isinstance(data, dict):
        raise BadRequest("body must be a JSON object", field="body")
    return data


def int_param(
    req: falcon.asgi.Request, name: str, default: int, *, minimum: int = 0, maximum: int = 10**12
) -> int:
    raw = req.get_param(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest("must be an integer", field=name) from None
    if not minimum <= value <= maximum:
        raise BadRequest(f"must be between {minimum} and {maximum}", field=name)
    return value
