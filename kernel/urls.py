"""URLs the daemon and the policy toolkit both accept (OTLP endpoints)."""

from __future__ import annotations

from urllib.parse import urlsplit


def url_problem(value: str) -> str | None:
    """Why ``value`` is not an http(s) URL with a host (and a valid port), or None."""
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError:
        return "has a port that is not a number from 1 to 65535"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL with a host"
    return None
