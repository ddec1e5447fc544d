"""``openbus messages [--pane PANE] [--json]``: the messages panes sent and received."""

from __future__ import annotations

import argparse
from typing import Any

from openbus.daemon.cli_common import add_common, emit
from openbus.daemon.client import DaemonClient
from openbus.daemon.config import Config
from openbus.daemon.core.names import hop_words


def _line(direction: str, row: dict[str, Any]) -> str:
    other = row.get("recipient_name") if direction == "to" else row.get("sender_name")
    other = other or (row["recipient_pane"] if direction == "to" else row.get("sender_pane"))
    reason = f"  ({row['reason']})" if row.get("reason") else ""
    card = f"  card {row['card']}" if row.get("card") and row["outcome"] == "queued" else ""
    words = row.get("hop_words") or hop_words(int(row.get("hop") or 0))
    return (
        f"  {direction} {other}  {row['message_id']}  {row['outcome']}, {words}  "
        f"{row.get('preview', '')}{card}{reason}"
    )


def _pane_text(pane: str, section: dict[str, Any]) -> list[str]:
    lines = [f"{pane}:"]
    lines += [_line("to", r) for r in section.get("sent", [])]
    lines += [_line("from", r) for r in section.get("received", [])]
    if len(lines) == 1:
        lines.append("  no messages")
    return lines


def _text(data: dict[str, Any]) -> str:
    if "pane" in data:
        return "\n".join(_pane_text(data["pane"], data))
    panes = data.get("panes", {})
    if not panes:
        return "no messages"
    out: list[str] = []
    for pane, section in panes.items():
        out += _pane_text(pane, section)
    return "\n".join(out)


def _messages(args: argparse.Namespace, config: Config) -> int:
    data = DaemonClient(config).get("/api/messages", pane=args.pane)
    emit(args, data, _text)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("messages", help="messages panes sent and received, with outcomes")
    add_common(p)
    p.add_argument("--pane", metavar="PANE", help="only this pane (like %%3)")
    p.set_defaults(handler=_messages)
