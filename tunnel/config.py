"""The tunnel's configuration: one ``[tunnel]`` table in a TOML file, validated strictly.

Hosted default: ``/etc/openbus/tunnel.toml``. Unknown keys and bad values stop start-up with
a ``ConfigError`` naming the key and the file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openbus.kernel.errors import ConfigError
from openbus.kernel.toml import read_toml

DEFAULT_PATH = Path("/etc/openbus/tunnel.toml")


@dataclass(frozen=True)
class TunnelConfig:
    path: Path
    listen_host: str = "0.0.0.0"  # noqa: S104 - the tunnel is the public side by design
    listen_port: int = 443
    tls_cert: Path = Path("/etc/openbus/tunnel/tls.crt")
    tls_key: Path = Path("/etc/openbus/tunnel/tls.key")
    daemon_socket: Path = Path("/run/openbus/daemon.sock")
    credential: Path = Path("/etc/openbus/tunnel/credential.key")
    cookie_key: Path = Path("/etc/openbus/tunnel/cookie.keys")
    pam_service: str = "openbus"
    run_as: str | None = "openbus-tunnel"
    session_seconds: int = 12 * 3600
    failed_login_delay: float = 1.0
    max_failed_logins: int = 5


_PATH_KEYS = ("tls_cert", "tls_key", "daemon_socket", "credential", "cookie_key")


def parse_tunnel_config(data: Mapping[str, Any], path: Path) -> TunnelConfig:
    where = str(path)
    for top in data:
        if top != "tunnel":
            raise ConfigError("unknown key (the file has one [tunnel] table)", path=where, key=top)
    table = data.get("tunnel", {})
    if not isinstance(table, dict):
        raise ConfigError("must be a table", path=where, key="tunnel")
    known = {
        *_PATH_KEYS,
        "listen",
        "pam_service",
        "run_as",
        "session_seconds",
        "failed_login_delay",
        "max_failed_logins",
    }
    for key in table:
        if key not in known:
            raise ConfigError("unknown key", path=where, key=f"tunnel.{key}")

    def get(key: str, kind: type | tuple[type, ...]) -> Any:
        value = table[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) or not isinstance(value, kinds):
            expected = " or ".join(
                {str: "a string", int: "an integer", float: "a number"}[k] for k in kinds
            )
            raise ConfigError(f"expected {expected}", path=where, key=f"tunnel.{key}")
        return value

    values: dict[str, Any] = {"path": path}
    if "listen" in table:
        text: str = get("listen", str)
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"expected HOST:PORT, got {text!r}", path=where, key="tunnel.listen")
        values["listen_host"], values["listen_port"] = host.strip("[]"), int(port)
    for key in _PATH_KEYS:
        if key in table:
            text = get(key, str)
            if not text:
                raise ConfigError("must not be empty", path=where, key=f"tunnel.{key}")
            values[key] = Path(os.path.expanduser(text))
    if "pam_service" in table:
        service: str = get("pam_service", str)
        if not service or "/" in service or service.startswith("."):
            raise ConfigError("expected a PAM service name", path=where, key="tunnel.pam_service")
        values["pam_service"] = service
    if "run_as" in table:
        values["run_as"] = get("run_as", str) or None
    if "session_seconds" in table:
        values["session_seconds"] = _positive(get("session_seconds", int), where, "session_seconds")
    if "failed_login_delay" in table:
        delay = float(get("failed_login_delay", (int, float)))
        if delay < 0:
            raise ConfigError("must not be negative", path=where, key="tunnel.failed_login_delay")
        values["failed_login_delay"] = delay
    if "max_failed_logins" in table:
        values["max_failed_logins"] = _positive(
            get("max_failed_logins", int), where, "max_failed_logins"
        )
    return TunnelConfig(**values)


def _positive(value: int, where: str, key: str) -> int:
    if value <= 0:
        raise ConfigError("must be positive", path=where, key=f"tunnel.{key}")
    return value


def load_tunnel_config(path: Path | None) -> TunnelConfig:
    path = path or Path(os.environ.get("OPENBUS_TUNNEL_CONFIG") or DEFAULT_PATH)
    return parse_tunnel_config(read_toml(path), path)
