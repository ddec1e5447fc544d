"""``openbus allow-sessions PANE``: let the agent in PANE start sessions without a card each
time (the "may start sessions" approval; it ends with the agent's grant)."""

from __future__ import annotations

import argparse
from typing import Any

from openbus.daemon.cli_common import add_common, emit
from openbus.daemon.client import DaemonClient
from openbus.daemon.config import Config


def _allow(args: argparse.Namespace, config: Config) -> int:
    client = DaemonClient(config)
    try:
        data = client.request("POST", "/api/sessions/allow", json={"pane": args.pane})
    finally:
        client.close()
    emit(args, data, lambda d: f"{d['pane']} may start sessions without a card")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "allow-sessions", help="let an agent start helper sessions without a card each time"
    )
    p.add_argument("pane", metavar="PANE", help="the agent's pane id, such as %%3")
    add_common(p)
    p.set_defaults(handler=_allow)
