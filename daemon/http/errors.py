"""The HTTP edge's one translation of the core error hierarchy.

Nothing else in the daemon picks status codes. An unexpected exception becomes a plain 500
with no traceback in the body; the traceback goes to the daemon's log only.
"""

from __future__ import annotations

import logging
from typing import Any

import falcon
import falcon.asgi

from openbus.kernel import errors

log = logging.getLogger("openbus.http")

STATUS: dict[type[errors.OpenbusError], int] = {
    errors.BadRequest: 400,
    errors.Unauthenticated: 401,
    errors.NotConnected: 403,
    errors.PolicyRefused: 403,
    errors.Forbidden: 403,
    errors.NotFound: 404,
    errors.Conflict: 409,
    errors.Refused: 429,
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


async def handle_unexpected(
    req: falcon.asgi.Request, resp: falcon.asgi.Response, exc: Exception, params: dict[str, Any]
) -> None:
    if isinstance(exc, falcon.HTTPError):
        resp.status = exc.status
        body: dict[str, str] = {"error": "http_error", "message": exc.title or str(exc.status)}
        if exc.description:
            body["message"] = exc.description
        resp.media = body
        return
    log.exception("unexpected error on %s %s", req.method, req.path)
    resp.status = 500
    resp.media = {"error": "internal", "message": "internal error; the daemon log has details"}


def install(app: falcon.asgi.App[Any, Any]) -> None:
    app.add_error_handler(Exception, handle_unexpected)
    app.add_error_handler(errors.OpenbusError, handle_openbus_error)
