"""Local mode's loopback web address for the human: a per-start secret exchanged for a cookie.

Theory of operation
-------------------
A browser cannot open the human side's unix socket, so in local mode the daemon also serves
the human side on a loopback TCP port of its own (``[daemon] web_listen``, default
``127.0.0.1:7708``; never the agents' port, never in hosted mode, where the tunnel is the way
in). Loopback is reachable by every user of the machine, so a request there is the daemon's
user only when it carries this start's secret:

1. ``openbus serve`` draws a fresh secret at every start and writes it 0600 to
   ``web.secret`` beside the socket (the user's runtime dir), then prints the address
   ``http://127.0.0.1:7708/?token=SECRET``; ``openbus ui`` reads the file and prints (and,
   where a browser is available, opens) the same address;
2. the first request, ``GET /?token=SECRET``, is answered with a redirect to ``/`` that sets
   the secret as an HttpOnly, SameSite=Strict cookie, so the secret leaves the address bar
   and the history;
3. every later request needs that cookie; Host must be this address (DNS rebinding) and an
   Origin, when sent, must be it too (another site's script); nothing answers with CORS
   headers, so no other origin can read an answer.

The daemon keeps only the secret's SHA-256 and compares in constant time. The previous
start's secret stops working with the restart. Like the socket in local mode, this is not an
isolation boundary between processes of the same user (they can read the file).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
from dataclasses import dataclass
from pathlib import Path

from openbus.daemon.config import Config
from openbus.kernel.clock import Random
from openbus.kernel.errors import Unavailable

SECRET_FILE = "web.secret"  # noqa: S105 - a file name, not a secret
OPENER_FILE = "web-open.html"
COOKIE = "openbus_web"
TOKEN_PARAM = "token"  # noqa: S105 - the query parameter's name


def served(config: Config) -> bool:
    """Whether this daemon serves the human side on a loopback web address."""
    return not config.hosted.enabled and config.daemon.web_host is not None


def secret_path(config: Config) -> Path:
    return config.daemon.socket.parent / SECRET_FILE


def base_url(config: Config) -> str:
    host = config.daemon.web_host or "127.0.0.1"
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{config.daemon.web_port}"


def login_url(config: Config, secret: str) -> str:
    return f"{base_url(config)}/?{TOKEN_PARAM}={secret}"


def _write_private(path: Path, data: str) -> None:
    path.unlink(missing_ok=True)  # a fresh inode: never reuse another mode or owner
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(data)


def new_secret(config: Config, random: Random) -> str:
    """A fresh secret for this start, written 0600 beside the socket."""
    secret = base64.urlsafe_b64encode(random.token_bytes(32)).decode("ascii").rstrip("=")
    path = secret_path(config)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write_private(path, secret + "\n")
    return secret


def read_secret(config: Config) -> str:
    path = secret_path(config)
    try:
        secret = path.read_text().strip()
    except FileNotFoundError:
        raise Unavailable(
            f"no web secret at {path}: is the daemon running (openbus serve) in local mode?"
        ) from None
    except OSError as exc:
        raise Unavailable(f"cannot read {path}: {exc.strerror}") from None
    if not secret:
        raise Unavailable(f"{path} is empty: restart the daemon (openbus serve)")
    return secret


def opener_file(config: Config, secret: str) -> Path:
    """A 0600 page that forwards the browser to the login address, so the secret is handed to
    the browser in a file only this user reads, never in a browser's argv."""
    path = config.daemon.socket.parent / OPENER_FILE
    url = login_url(config, secret)
    _write_private(
        path,
        '<!doctype html><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
        f'<meta http-equiv="refresh" content="0;url={url}"><title>openbus</title>'
        f'<a href="{url}">Open openbus</a>\n',
    )
    return path


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


@dataclass(frozen=True)
class WebAccess:
    """What the identity middleware needs to admit a browser on the web address."""

    port: int
    hosts: frozenset[str]
    origins: frozenset[str]
    secret_digest: bytes

    def opens(self, value: str | None) -> bool:
        return value is not None and hmac.compare_digest(digest(value), self.secret_digest)

    @classmethod
    def for_config(cls, config: Config) -> WebAccess | None:
        """The access of this start, or None when no web address is served or the secret is
        absent (an app built without ``openbus serve``, as in tests of the app alone)."""
        if not served(config):
            return None
        with contextlib.suppress(Unavailable):
            secret = read_secret(config)
            port = config.daemon.web_port
            names = {"127.0.0.1", "localhost", config.daemon.web_host or "127.0.0.1"}
            hosts = frozenset(f"[{n}]:{port}" if ":" in n else f"{n}:{port}" for n in names)
            return cls(
                port=port,
                hosts=hosts,
                origins=frozenset(f"http://{h}" for h in hosts),
                secret_digest=digest(secret),
            )
        return None
