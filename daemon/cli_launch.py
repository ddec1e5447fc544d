"""``openbus launch LAUNCHER [--cwd DIR] [--preset off|observe|collaborate] [--prompt TEXT]``,
``openbus resume HARNESS SESSION_ID [--preset P]`` and ``openbus restore [--dry-run]``."""

from __future__ import annotations

import argparse
import os
from typing import Any

from openbus.daemon.cli_common import add_common, emit
from openbus.daemon.client import DaemonClient
from openbus.daemon.config import Config

# The launch waits for the agent's first state and, for a connected TUI given a prompt, for
# its tools/list (each bounded at 30 s by the daemon): more than the default client timeout.
LAUNCH_TIMEOUT = 120.0


def _text(data: dict[str, Any]) -> str:
    lines = [f"{data['pane']} {data['incarnation']}"]
    state = data.get("state")
    lines.append(
        f"state: {state}"
        if state and state != "unknown"
        else "state: not read yet (the agent has drawn nothing openbus recognises)"
    )
    connect = data.get("connect") or {}
    if connect.get("connected"):
        lines.append(f"connected: {data['preset']} as {connect.get('actor')}")
    elif connect.get("reason"):
        lines.append(f"not connected: {connect['reason']}")
    prompt = data.get("prompt")
    if prompt:
        lines.append(f"prompt: {prompt}")
    return "\n".join(lines)


def _launch(args: argparse.Namespace, config: Config) -> int:
    body: dict[str, Any] = {"launcher": args.launcher, "preset": args.preset}
    launcher = config.launchers.get(args.launcher)
    if args.cwd is not None:
        body["cwd"] = os.path.abspath(os.path.expanduser(args.cwd))
    elif launcher is None or launcher.cwd is None:
        body["cwd"] = os.getcwd()
    if args.prompt is not None:
        body["prompt"] = args.prompt
    data = DaemonClient(config, timeout=LAUNCH_TIMEOUT).request("POST", "/api/launch", json=body)
    emit(args, data, _text)
    return 0


def _resume(args: argparse.Namespace, config: Config) -> int:
    body: dict[str, Any] = {"harness": args.harness, "session_id": args.session_id}
    if args.preset is not None:
        body["preset"] = args.preset
    data = DaemonClient(config).request("POST", "/api/resume", json=body)
    emit(args, data, lambda d: f"{d['pane']} {d['incarnation']} ({d['preset']})")
    return 0


def _restore_text(data: dict[str, Any]) -> str:
    sessions = data["sessions"]
    if not data["restored"]:
        if not sessions:
            return "nothing to restore"
        lines = [f"restore {len(sessions)} session(s)? (run without --dry-run)"]
        lines += [
            f"  {s['harness']} {s['session_id']} {s['cwd']} ({s['preset']})" for s in sessions
        ]
        return "\n".join(lines)
    lines = []
    for r in data["restored"]:
        if r["ok"]:
            lines.append(f"{r['harness']} {r['session_id']}: {r['pane']} ({r['preset']})")
        else:
            lines.append(f"{r['harness']} {r['session_id']}: not restored: {r['error']}")
    return "\n".join(lines)


def _restore(args: argparse.Namespace, config: Config) -> int:
    data = DaemonClient(config).request("POST", "/api/restore", json={"dry_run": args.dry_run})
    emit(args, data, _restore_text)
    return 0 if all(r["ok"] for r in data["restored"]) else 1


def register(sub: Any) -> None:
    p = sub.add_parser("launch", help="start a launcher in a new tmux window")
    add_common(p)
    p.add_argument("launcher", metavar="LAUNCHER")
    p.add_argument(
        "--cwd", metavar="DIR", help="working directory (default: here, or the launcher's)"
    )
    p.add_argument(
        "--preset", default="off", choices=["off", "observe", "collaborate"], help="Connect preset"
    )
    p.add_argument("--prompt", metavar="TEXT", help="the harness's first prompt")
    p.set_defaults(handler=_launch)

    p = sub.add_parser("resume", help="reopen a past session in a new tmux window, with its grant")
    add_common(p)
    p.add_argument("harness", metavar="HARNESS")
    p.add_argument("session_id", metavar="SESSION_ID")
    p.add_argument(
        "--preset",
        choices=["off", "observe", "collaborate"],
        help="Connect preset (default: the session's grant, else off)",
    )
    p.set_defaults(handler=_resume)

    p = sub.add_parser(
        "restore", help="bring back the sessions that were live when the tmux server was lost"
    )
    add_common(p)
    p.add_argument("--dry-run", action="store_true", help="only list them")
    p.set_defaults(handler=_restore)
