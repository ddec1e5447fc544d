"""A small client for the human API on the daemon's unix socket (used by the CLI)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import httpx

from openbus.daemon.config import Config
from openbus.kernel import errors

_BY_CODE: dict[str, type[errors.OpenbusError]] = {
    cls.code: cls
    for cls in (
        errors.BadRequest,
        errors.Unauthenticated,
        errors.Forbidden,
        errors.NotConnected,
        errors.PolicyRefused,
        errors.NotFound,
        errors.Conflict,
        errors.Refused,
        errors.LaunchFailed,
        errors.Unavailable,
        errors.AuditUnavailable,
    )
}


class DaemonClient:
    def __init__(self, config: Config, timeout: float | None = 30.0) -> None:
        self.socket = config.daemon.socket
        self._client = httpx.Client(
            transport=httpx.HTTPTransport(uds=str(self.socket)),
            base_url="http://openbus",
            timeout=timeout,
        )

    def close(self) -> None:
        self._client.close()

    def request(
        self, method: str, path: str, *, json: Any = None, params: Mapping[str, Any] | None = None
    ) -> Any:
        try:
            response = self._client.request(method, path, json=json, params=params)
        except (httpx.ConnectError, FileNotFoundError, PermissionError) as exc:
            raise errors.Unavailable(
                f"cannot reach the daemon on {self.socket} ({exc.__class__.__name__}); "
                "is `openbus serve` running?"
            ) from None
        except httpx.HTTPError as exc:
            raise errors.Unavailable(
                f"the daemon did not answer ({exc.__class__.__name__})"
            ) from None
        return _decode(response)

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def stream_lines(self, path: str, params: Mapping[str, Any] | None = None) -> Iterator[str]:
        with self._client.stream("GET", path, params=params, timeout=None) as response:
            if response.status_code >= 400:
                response.read()
                _decode(response)
            yield from response.iter_lines()


def _decode(response: httpx.Response) -> Any:
    try:
        body = response.json() if response.content else None
    except ValueError:
        body = None
    if response.status_code < 400:
        return body
    if isinstance(body, dict) and "error" in body:
        kind = _BY_CODE.get(str(body["error"]), errors.OpenbusError)
        raise kind(str(body.get("message", "error")), field=body.get("field"))
    raise errors.OpenbusError(f"the daemon answered HTTP {response.status_code}")
