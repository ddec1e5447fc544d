"""``openbus ask TEXT [--wait SECONDS] [--json]``: a request to the fleet, routed by the fast
dispatcher (direct to the one matching pane) or to control; ``--wait`` waits for what it
causes until control answers, at most 50 s. ``openbus thread [REQUEST]``: the
requester's thread, or one request and every entry it caused. A request that goes to control
while none runs starts it. ``openbus control start``: the control session in tmux session
``control`` ahead of first use, unless it already runs. ``openbus control
allow-panes [--off]``: "control may open panes" (windows, resumed sessions) without a card."""

from __future__ import annotations

import argparse
import time
from typing import Any

from openbus.daemon.cli_common import add_common, emit
from openbus.daemon.client import DaemonClient
from openbus.daemon.config import Config

MAX_WAIT = 50.0


def _entry(row: dict[str, Any]) -> str:
    where = f" -> {row['pane']}" if row.get("pane") else ""
    return f"  {row['id']:<6} {row['kind']:<7} {row['actor']}{where}: {row['text']}"


def _asked(data: dict[str, Any]) -> str:
    request = data["request"]
    route = data["route"]
    head = (
        f"{request['id']} sent to {data['sent_to']} ({route['reason']})"
        if data.get("sent_to")
        else f"{request['id']} to control ({route['reason']})"
    )
    lines = [head]
    lines += [_entry(e) for e in data.get("later", [])]
    return "\n".join(lines)


def _thread_text(data: dict[str, Any]) -> str:
    if "request" in data:
        request = data["request"]
        lines = [f"{request['id']} ({request.get('state')}): {request['text']}"]
        return "\n".join(lines + [_entry(e) for e in data["entries"]])
    if not data["entries"]:
        return "no requests yet"
    return "\n".join(_entry(e) for e in data["entries"])


def _until_answered(client: DaemonClient, data: dict[str, Any], seconds: float) -> list[Any]:
    """What the request causes until it is answered (or direct), at most ``seconds``: each
    round waits on the daemon for the next entry, never on a timer of its own."""
    request = data["request"]
    seqs = [int(e["id"][1:]) for e in data.get("entries", [])]
    after = max(seqs, default=int(request["id"][1:]))
    deadline = time.monotonic() + seconds
    later: list[Any] = []
    while request.get("state") not in ("answered", "direct"):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        got = client.get(f"/api/threads/{request['id']}", after=after, wait=round(left, 1))
        request = data["request"] = got["request"]
        new = [e for e in got["entries"] if int(e["id"][1:]) > after]
        later += new
        after = max([after, *(int(e["id"][1:]) for e in new)])
    return later


def _ask(args: argparse.Namespace, config: Config) -> int:
    client = DaemonClient(config, timeout=MAX_WAIT + 15)
    data = client.request("POST", "/api/ask", json={"text": args.text, "front_end": "cli"})
    if args.wait:
        data["later"] = _until_answered(client, data, min(args.wait, MAX_WAIT))
    emit(args, data, _asked)
    return 0


def _thread(args: argparse.Namespace, config: Config) -> int:
    client = DaemonClient(config)
    path = f"/api/threads/{args.request}" if args.request else "/api/threads"
    emit(args, client.get(path), _thread_text)
    return 0


def _control_text(data: dict[str, Any]) -> str:
    state = "started" if data.get("started") else "already running"
    return f"control {state} in {data.get('pane')}"


def _control(args: argparse.Namespace, config: Config) -> int:
    data = DaemonClient(config, timeout=90).request("POST", "/api/control/start", json={})
    emit(args, data, _control_text)
    return 0


def _allow_panes(args: argparse.Namespace, config: Config) -> int:
    client = DaemonClient(config)
    try:
        data = client.request("POST", "/api/control/allow-panes", json={"allow": not args.off})
    finally:
        client.close()
    allowed = data["control_may_open_panes"]
    emit(args, data, lambda d: "control may open panes" + ("" if allowed else ": no longer"))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("ask", help="a request to the fleet: to the one matching pane, or control")
    add_common(p)
    p.add_argument("text", metavar="TEXT")
    p.add_argument(
        "--wait", type=float, default=0.0, metavar="SECONDS", help="wait for what it causes next"
    )
    p.set_defaults(handler=_ask)
    t = sub.add_parser("thread", help="your requests, or one request and what it caused")
    add_common(t)
    t.add_argument("request", nargs="?", metavar="REQUEST", help="a request id like r12")
    t.set_defaults(handler=_thread)
    c = sub.add_parser("control", help="the control session")
    verbs = c.add_subparsers(dest="control_verb", required=True)
    start = verbs.add_parser("start", help="start the control session unless it runs")
    add_common(start)
    start.set_defaults(handler=_control)
    allow = verbs.add_parser(
        "allow-panes", help="let control open windows and resume sessions without a card"
    )
    allow.add_argument("--off", action="store_true", help="take the approval back")
    add_common(allow)
    allow.set_defaults(handler=_allow_panes)
