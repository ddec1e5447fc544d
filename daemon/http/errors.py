"""The HTTP edge's one translation of the core error hierarchy, and its one error shape.

Nothing else in the daemon picks status codes. Every error the edge answers has the body
``{"error": code, "message": sentence[, "field": name]}`` (``OpenbusError.to_dict``): the
core's errors, falcon's own (an unknown path names ``path``, an unserved method ``method``,
another media type ``content-type``) and the unexpected, which becomes a plain 500 with no
traceback in the body; the traceback goes to the daemon's log only.
"""

from __future__ import annotations

import logging
from typing import Any

import falcon
import falcon.asgi

from openbus.kernel import errors

log = logging.getLogger("openbus.http")

STATUS: dict[type[errors.OpenbusError], int] = {
    errors.UnsupportedMedia: 415,
    errors.BadRequest: 400,
    errors.Unauthenticated: 401,
    errors.NotConnected: 403,
    errors.PolicyRefused: 403,
    errors.Forbidden: 403,
    errors.NotFound: 404,
    errors.Conflict: 409,
    errors.Refused: 429,
    errors.LaunchFailed: 502,
    errors.AuditUnavailable: 503,
    errors.Unavailable: 503,
    errors.ConfigError: 500,
}


def status_for(exc: errors.OpenbusError) -> int:
    for kind in type(exc).__mro__:
        if kind in STATUS:
            return STATUS[kind]
    return 500


async def handle_openbus_error(
    req: falcon.asgi.Request,
    resp: falcon.asgi.Response,
    exc: errors.OpenbusError,
    params: dict[str, Any],
) -> None:
    resp.status = status_for(exc)
    resp.media = exc.to_dict()


# falcon's own errors: the code and the field at fault, by status
FRAMEWORK: dict[int, tuple[str, str | None]] = {
    400: ("bad_request", None),
    404: ("not_found", "path"),
    405: ("method_not_allowed", "method"),
    411: ("bad_request", "content-length"),
    413: ("bad_request", "body"),
    414: ("bad_request", "path"),
    415: ("unsupported_media_type", "content-type"),
    431: ("bad_request", "headers"),
}


def framework_error(exc: falcon.HTTPError) -> dict[str, str]:
    """Falcon's own error in the one shape (``http_error`` where it names no known case)."""
    code, field = FRAMEWORK.get(exc.status_code, ("http_error", None))
    message = exc.description or exc.title or str(exc.status)
    return errors.OpenbusError(message, field=field).to_dict() | {"error": code}


async def handle_framework_error(
    req: falcon.asgi.Request,
    resp: falcon.asgi.Response,
    exc: falcon.HTTPError,
    params: dict[str, Any],
) -> None:
    resp.status = exc.status
    resp.set_headers(exc.headers or {})  # 405's Allow, for one
    resp.media = framework_error(exc)


async def handle_unexpected(
    req: falcon.asgi.Request, resp: falcon.asgi.Response, exc: Exception, params: dict[str, Any]
) -> None:
    if isinstance(exc, falcon.HTTPError):
        await handle_framework_error(req, resp, exc, params)
        return
    log.exception("unexpected error on %s %s", req.method, req.path)
    resp.status = 500
    resp.media = {"error": "internal", "message": "internal error; the daemon log has details"}


def install(app: falcon.asgi.App[Any, Any]) -> None:
    app.add_error_handler(Exception, handle_unexpected)
    app.add_error_handler(falcon.HTTPError, handle_framework_error)  # replaces falcon's own
    app.add_error_handler(errors.OpenbusError, handle_openbus_error)
