"""One error hierarchy for the whole daemon.

Core code raises these; only the edges (HTTP in ``daemon.http.errors``, MCP in the MCP
adapter, the CLI) translate them into status codes, tool errors or exit codes. Each error
carries a short machine-readable ``code``, a human sentence, and where it applies the
``field`` of the request it is about. Messages never contain secrets. The one exception
outside the hierarchy is ``InvalidTransition``: a bug in the caller, never sent to a client.
"""

from __future__ import annotations

MAX_MESSAGE_CHARS = 500  # what a caller is told; a message quoting its input is cut here
MAX_FIELD_CHARS = 100


def _shortened(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[: limit - 40]}… ({len(text) - limit + 40} more characters)"


class OpenbusError(Exception):
    """Base of every error the daemon reports to a caller."""

    code = "error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def to_dict(self) -> dict[str, str]:
        """The one shape every edge answers with: ``{error, message[, field]}``, bounded in
        size however much of the caller's input a message quotes."""
        body = {"error": self.code, "message": _shortened(self.message, MAX_MESSAGE_CHARS)}
        if self.field is not None:
            body["field"] = _shortened(self.field, MAX_FIELD_CHARS)
        return body


class BadRequest(OpenbusError):
    """The request itself is malformed: a missing or invalid field."""

    code = "bad_request"


class UnsupportedMedia(BadRequest):
    """The body is not in the one content type the route reads (JSON)."""

    code = "unsupported_media_type"


class Unauthenticated(OpenbusError):
    """No identity could be established for the caller."""

    code = "unauthenticated"


class Forbidden(OpenbusError):
    """The caller is known but may not do this."""

    code = "forbidden"


class NotConnected(Forbidden):
    """An agent's grant is off, revoked or narrowed below what the call needs."""

    code = "not_connected"


class PolicyRefused(Forbidden):
    """The org policy caps what may be granted or done."""

    code = "policy_refused"


class NotFound(OpenbusError):
    code = "not_found"


class Conflict(OpenbusError):
    """The target is in a state that does not allow this (a resolved card, a used id)."""

    code = "conflict"


class Refused(OpenbusError):
    """Refused before admission (rate, size, character set, id cap): nothing was stored."""

    code = "refused"


class RateLimited(Refused):
    """The caller was refused too often in a window: its calls are not run until it closes."""

    code = "rate_limited"


class LaunchFailed(OpenbusError):
    """A launched agent exited before it reached its first state (its status and last screen
    are in the message)."""

    code = "launch_failed"


class Unavailable(OpenbusError):
    """A dependency the action needs is not there (tmux server down, audit store failing)."""

    code = "unavailable"


class Unanswered(Unavailable):
    """The dependency is there but did not answer in time (a stopped or wedged tmux server)."""


class AuditUnavailable(Unavailable):
    """The audit record could not be made durable, so the action did not happen."""

    code = "audit_unavailable"


class ConfigError(OpenbusError):
    """A configuration file has an unknown key or a bad value."""

    code = "config_error"

    def __init__(self, message: str, *, path: str, key: str | None = None) -> None:
        where = f"{path}: {key}: " if key else f"{path}: "
        super().__init__(where + message, field=key)
        self.path = path
        self.key = key


class InvalidTransition(ValueError):
    """A bug in the caller; never sent to a client.

    Raised when code asks a state machine (the message lifecycle in ``core.messaging``) for a
    move its table does not allow. It is deliberately not an ``OpenbusError``: the edges
    translate those into 4xx answers and tool errors and the gate audits them as refusals,
    while this one must reach them as an unexpected exception (logged with its traceback, a
    plain 500 or internal error, audited ``error``). It stays a ``ValueError`` for callers
    that already treat a misuse of the book as one.
    """
