"""Helpers shared by the human API's resources."""

from __future__ import annotations

from typing import Any

import falcon.asgi

from openbus.kernel import json_text
from openbus.kernel.errors import BadRequest, UnsupportedMedia

MAX_BODY = 256 * 1024
MAX_DEPTH = 32  # the human API's bodies are flat objects; deeper nesting is never meant
JSON_TYPES = ("application/json",)


def _depth_at_most(data: object, limit: int) -> bool:
    """Whether ``data`` nests no deeper than ``limit`` containers (iteratively: no recursion)."""
    stack: list[tuple[object, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: list[object] = list(value.values())
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return False
        stack.extend((child, depth + 1) for child in children)
    return True


def _too_deep() -> BadRequest:
    return BadRequest(f"body nests deeper than {MAX_DEPTH} levels", field="body")


async def read_json(req: falcon.asgi.Request) -> dict[str, Any]:
    """The request's JSON object body; a clear 4xx naming ``content-type`` or ``body`` for
    anything else (another media type, too large, not JSON, nested too deeply, not an object)."""
    media = (req.content_type or "").partition(";")[0].strip().lower()
    if media not in JSON_TYPES:
        raise UnsupportedMedia("the body must be sent as application/json", field="content-type")
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
        data = json_text.loads(body)
    except json_text.TooDeep:  # nested past the parser's own limit
        raise _too_deep() from None
    except ValueError:  # UnicodeDecodeError is one
        raise BadRequest("body is not valid JSON", field="body") from None
    if not _depth_at_most(data, MAX_DEPTH):
        raise _too_deep()
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


TRUE = frozenset({"true", "1", "yes", "on"})
FALSE = frozenset({"false", "0", "no", "off"})


def bool_param(req: falcon.asgi.Request, name: str, default: bool) -> bool:
    raw = req.get_param(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in TRUE:
        return True
    if raw.lower() in FALSE:
        return False
    raise BadRequest("must be true or false", field=name)
