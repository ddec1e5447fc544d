"""CLI verbs for consent and Connect: cards, approve, decline, connect, disconnect-all."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from openbus.daemon.cli_common import add_common, emit
from openbus.daemon.client import DaemonClient
from openbus.daemon.config import Config


def _cards_text(cards: list[dict[str, Any]]) -> str:
    if not cards:
        return "no cards need you"
    now = time.time()
    lines = []
    for card in cards:
        left = max(0, int(card["expires"] - now))
        lines.append(
            f"{card['id']}  {card['kind']:<18} {card['state']:<13} {left:>4}s  {card['summary']}"
        )
    return "\n".join(lines)


def _cards(args: argparse.Namespace, config: Config) -> int:
    client = DaemonClient(config)
    if args.follow:
        return _follow(args, client)
    data = client.get("/api/cards", pending="false" if args.all else None)
    emit(args, data, lambda d: _cards_text(d["cards"]))
    return 0


def needs_you(frame: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    """What needs the person in one frame of ``/api/follow``, as (key, item, line): agents
    whose screen asks (keyed by pane and what is asked) and consent cards (by id)."""
    items: list[tuple[str, dict[str, Any], str]] = []
    for pane in frame["directory"]["panes"]:
        menu = pane.get("menu")
        if pane.get("state") != "menu" or not menu:
            continue
        options = "  ".join(f"[{o['key']}] {o['label']}" for o in menu["options"])
        line = f"{pane['pane']}  {pane['harness']} asks: {menu['question']}  {options}"
        item = {"kind": "asks", "pane": pane["pane"], "incarnation": pane["incarnation"], **menu}
        items.append((f"asks:{pane['pane']}:{menu['fingerprint']}", item, line))
    for card in frame["cards"]:
        items.append((f"card:{card['id']}", {"kind": "card", **card}, _cards_text([card])))
    return items


def _follow(args: argparse.Namespace, client: DaemonClient) -> int:
    """Each item that needs the person, printed once as it appears (those waiting first)."""
    seen: set[str] = set()
    try:
        for raw in client.stream_lines("/api/follow"):
            if not raw.strip():
                continue
            for key, item, line in needs_you(json.loads(raw)):
                if key in seen:
                    continue
                seen.add(key)
                sys.stdout.write((json.dumps(item, sort_keys=True) if args.json else line) + "\n")
                sys.stdout.flush()
    finally:
        client.close()
    return 0


def _decide(decision: str) -> Any:
    def run(args: argparse.Namespace, config: Config) -> int:
        chosen = (
            "approve_pair" if decision == "approve" and getattr(args, "pair", False) else decision
        )
        data = DaemonClient(config).request(
            "POST", f"/api/cards/{args.card}", json={"decision": chosen}
        )
        emit(args, data, lambda d: f"{d['id']}: {d['state']}")
        return 0

    return run


def _connect(args: argparse.Namespace, config: Config) -> int:
    data = DaemonClient(config).request(
        "PUT", "/api/connect", json={"pane": args.pane, "preset": args.preset}
    )
    emit(args, data, _connect_text)
    return 0


def _connect_text(data: dict[str, Any]) -> str:
    restart = data.get("restart")
    if restart:
        return (
            f"{data['pane']}: {restart['summary']} approve card {restart['card']} "
            f"(`openbus approve {restart['card']}`) to restart it with {data['preset']}"
        )
    return f"{data['pane']}: {data['preset']}"


def _disconnect_all(args: argparse.Namespace, config: Config) -> int:
    data = DaemonClient(config).request("POST", "/api/disconnect-all", json={})
    emit(args, data, lambda d: f"disconnected {d['disconnected']} agent(s)")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("cards", help="list the consent cards that need you")
    add_common(p)
    p.add_argument("--all", action="store_true", help="include resolved cards")
    p.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep printing each new item that needs you (cards, agents asking on screen)",
    )
    p.set_defaults(handler=_cards)

    p = sub.add_parser("approve", help="approve a card")
    add_common(p)
    p.add_argument("card")
    p.add_argument(
        "--pair", action="store_true", help="approve the pair for the rest of the recipient's life"
    )
    p.set_defaults(handler=_decide("approve"))

    p = sub.add_parser("decline", help="decline a card")
    add_common(p)
    p.add_argument("card")
    p.set_defaults(handler=_decide("decline"))

    p = sub.add_parser("connect", help="set an agent's Connect preset")
    add_common(p)
    p.add_argument("pane", metavar="PANE")
    p.add_argument("--preset", required=True, choices=["off", "observe", "collaborate"])
    p.set_defaults(handler=_connect)

    p = sub.add_parser("disconnect-all", help="turn Connect off for every agent")
    add_common(p)
    p.set_defaults(handler=_disconnect_all)
