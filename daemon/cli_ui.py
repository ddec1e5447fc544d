"""``openbus ui``: the web page's address for this start of the daemon, opened where it can be.

It reads the secret ``openbus serve`` wrote 0600 beside the socket (``daemon.web_access``),
prints the address, and on a desktop (a display, or macOS) hands it to the default browser
through a 0600 forwarding page, so the secret never appears in a browser's argv.
"""

from __future__ import annotations

import argparse
import os
import sys
import webbrowser
from typing import Any

from openbus.daemon import web_access
from openbus.daemon.cli_common import Handler, add_common, emit
from openbus.daemon.config import Config
from openbus.kernel.errors import Unavailable


def has_desktop() -> bool:
    return sys.platform == "darwin" or bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )


def _ui(args: argparse.Namespace, config: Config) -> int:
    if config.hosted.enabled:
        raise Unavailable("a hosted daemon's page is reached through its tunnel's address")
    if not web_access.served(config):
        raise Unavailable("the web page is off: [daemon] web_listen is empty")
    secret = web_access.read_secret(config)
    url = web_access.login_url(config, secret)
    opened = False
    if not args.no_browser and has_desktop():
        opener = web_access.opener_file(config, secret)
        opened = webbrowser.open(opener.as_uri())
    data: dict[str, Any] = {"url": url, "opened": opened}
    emit(args, data, lambda d: d["url"] + ("\n(opened in your browser)" if d["opened"] else ""))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("ui", help="print (and open) the web page's address for this start")
    add_common(p)
    p.add_argument("--no-browser", action="store_true", help="only print the address")
    handler: Handler = _ui
    p.set_defaults(handler=handler)
