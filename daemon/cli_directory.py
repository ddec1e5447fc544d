"""``openbus directory``, ``openbus pane PANE`` and ``openbus explain PANE``: the fleet directory
at the desk.

All read the daemon's human API over its unix socket (each read is an audited action on the
gate). A table by default; ``--json`` prints what the API returned.
"""

from __future__ import annotations

import argparse
import time
from typing import Any
from urllib.parse import quote

from openbus.daemon.cli_common import add_common, emit
from openbus.daemon.client import DaemonClient
from openbus.daemon.config import Config
from openbus.daemon.core.names import composer_words, event_words


def _ago(then: float | None, now: float) -> str:
    if not then:
        return "-"
    seconds = max(0, int(now - then))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _composer(value: Any) -> str:
    return {True: "empty", False: "draft", None: "?"}.get(value, "?")


def _cut(text: Any, width: int) -> str:
    value = "" if text is None else str(text)
    return value if len(value) <= width else value[: width - 1] + "…"


def format_directory(
    data: dict[str, Any], now: float | None = None, children: dict[str, str] | None = None
) -> str:
    """The table; a child session (``children``: child pane -> parent pane) is marked."""
    now = time.time() if now is None else now
    children = children or {}
    tmux = data.get("tmux", {})
    head = f"tmux {tmux.get('status', '?')} on {tmux.get('socket', '?')}"
    if tmux.get("detail"):
        head += f" ({tmux['detail']})"
    panes = data.get("panes", [])
    if not panes:
        return head + "\nno panes"
    columns = (
        "PANE",
        "SESSION:WIN",
        "HARNESS",
        "STATE",
        "COMPOSER",
        "ACTIVE",
        "BRANCH",
        "TITLE / SUMMARY",
    )
    rows = [
        (
            p["pane"],
            _cut(f"{p.get('session', '')}:{(p.get('window') or {}).get('index', '')}", 16),
            p.get("harness", ""),
            p.get("state", "") + (" (stale)" if p.get("stale") else ""),
            _composer(p.get("composer_empty")),
            _ago(p.get("last_activity"), now),
            _cut(p.get("branch") or "-", 20),
            _cut(_child_mark(p["pane"], children) + (p.get("title") or p.get("summary") or ""), 60),
        )
        for p in panes
    ]
    widths = [max(len(str(r[i])) for r in (columns, *rows)) for i in range(len(columns))]
    lines = [head, "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    return "\n".join(lines)


def _child_mark(pane: str, children: dict[str, str]) -> str:
    parent = children.get(pane)
    return f"[child of {parent}] " if parent else ""


def format_pane(p: dict[str, Any], now: float | None = None) -> str:
    now = time.time() if now is None else now
    window = p.get("window") or {}
    fields = [
        ("pane", p.get("pane")),
        ("incarnation", p.get("incarnation")),
        ("harness", p.get("harness")),
        ("state", p.get("state")),
        ("composer", composer_words(p.get("composer_empty"))),
        ("title", p.get("title") or "-"),
        ("summary", p.get("summary") or "-"),
        ("session", f"{p.get('session')}  window {window.get('index')} ({window.get('name')})"),
        ("cwd", p.get("cwd")),
        ("branch", p.get("branch") or "-"),
        ("pr links", ", ".join(p.get("pr_links") or []) or "-"),
        ("process", f"{p.get('command')} (pid {p.get('pid')})"),
        ("revision", p.get("revision")),
        ("last activity", f"{_ago(p.get('last_activity'), now)} ago"),
    ]
    lines = [f"{name:<14}{value}" for name, value in fields]
    events = p.get("events") or []
    if events:
        lines.append("events:")
        for event in events[-12:]:
            when = time.strftime("%H:%M:%S", time.localtime(event.get("time", 0)))
            lines.append(f"  {when}  {event.get('text') or event_words(event)}")
    family = p.get("family") or {}
    if family.get("parent"):
        lines.append(f"started by: {family['parent'].get('pane') or family['parent']['principal']}")
    if family.get("children"):
        started = ", ".join(c.get("pane") or c["principal"] for c in family["children"])
        lines.append(f"started: {started}")
    messages = p.get("messages") or {}
    for direction in ("sent", "received"):
        items = messages.get(direction) or []
        if items:
            lines.append(f"messages {direction}:")
            for m in items[-12:]:
                peer = m.get("recipient_name") if direction == "sent" else m.get("sender_name")
                lines.append(f"  {m.get('message_id')}  {m.get('outcome')}  {peer or ''}".rstrip())
    return "\n".join(lines)


def format_explain(p: dict[str, Any]) -> str:
    """Why a pane reads as it does: parser, rule, the evidence weighed, what would change it."""
    why = p.get("explain") or {}
    evidence = why.get("evidence") or {}
    screen = evidence.get("screen") or {}
    status = evidence.get("status_file")
    process = evidence.get("process") or {}
    tmux = evidence.get("tmux") or {}
    composer = _composer(p.get("composer_empty"))
    lines = [
        f"{p.get('pane')} reads {p.get('state')} (composer {composer}), "
        f"{p.get('harness')} in {process.get('found', '?')}",
        f"parser        {why.get('parser')}",
        f"rule          {why.get('rule') or '-'}",
        f"because       {why.get('because')}",
        f"would change  {why.get('would_change')}",
        "evidence:",
        f"  status file {status['status'] if status else '-'}"
        + (
            f" (waiting for {status['waiting_for']})"
            if status and status.get("waiting_for")
            else ""
        ),
        f"  tmux        dead={tmux.get('dead')} title={tmux.get('title')!r}"
        + (" in a mode" if tmux.get("in_mode") else ""),
        f"  process     {'gone' if process.get('gone') else 'running'}",
        f"  screen      revision {screen.get('revision')}, unchanged for {screen.get('still')}s",
    ]
    lines += [f"    | {line}" for line in screen.get("lines") or []]
    return "\n".join(lines)


def _one_pane(config: Config, pane: str) -> dict[str, Any]:
    client = DaemonClient(config)
    try:
        data: dict[str, Any] = client.get("/api/panes/" + quote(pane, safe=""))
    finally:
        client.close()
    return data


def _explain(args: argparse.Namespace, config: Config) -> int:
    data = _one_pane(config, args.pane)
    if args.json:
        data = {
            key: data.get(key)
            for key in ("pane", "incarnation", "harness", "state", "composer_empty", "explain")
        }
    emit(args, data, format_explain)
    return 0


def _directory(args: argparse.Namespace, config: Config) -> int:
    client = DaemonClient(config)
    try:
        data = client.get("/api/directory")
        children = client.get("/api/sessions")["children"]
    finally:
        client.close()
    for pane in data.get("panes", []):
        if pane.get("pane") in children:
            pane["spawned_by_pane"] = children[pane["pane"]]
    emit(args, data, lambda d: format_directory(d, children=children))
    return 0


def _pane(args: argparse.Namespace, config: Config) -> int:
    emit(args, _one_pane(config, args.pane), format_pane)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("directory", help="the fleet directory: every tmux pane and its state")
    add_common(p)
    p.set_defaults(handler=_directory)
    p = sub.add_parser("pane", help="one pane in detail, with its recent events")
    p.add_argument("pane", metavar="PANE", help="a tmux pane id such as %%3")
    add_common(p)
    p.set_defaults(handler=_pane)
    p = sub.add_parser(
        "explain", help="why a pane reads as it does: parser, rule, evidence, what would change it"
    )
    p.add_argument("pane", metavar="PANE", help="a tmux pane id such as %%3")
    add_common(p)
    p.set_defaults(handler=_explain)
