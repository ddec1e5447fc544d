"""``openbus launch LAUNCHER [--cwd DIR] [--preset off|observe|collaborate] [--prompt TEXT]``."""

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
