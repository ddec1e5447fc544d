"""The daemon as ``bench/bench_mcp.py`` serves it: every production feature plus a no-op read
tool (``noop``, action ``bench.noop``: the same token check, gate and audit record, no work),
the floor each MCP tool is measured against, and a second (``noop_sized``) that answers at
once with ten sessions' worth of index fields (as ``find_sessions`` answers a typical search):
what an answer of that size costs the SDK, SSE and HTTP, with no search. Production never
names them: they are added through the composition root's ``extra`` features.

Run by the bench as ``python -m bench.mcp_app --config FILE`` (gunicorn loads
``bench.mcp_app:app_from_env()``).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from openbus.daemon.app import create_app
from openbus.daemon.compose import Extra
from openbus.daemon.config import load_config
from openbus.daemon.core.actions import Action
from openbus.daemon.core.consent import Tier
from openbus.daemon.feature import Feature
from openbus.daemon.foundation import Foundation
from openbus.daemon.gate import Call
from openbus.daemon.mcp.tools import McpTool
from openbus.daemon.serve import serve
from openbus.kernel.scopes import Scope


def _read_tool(name: str, description: str) -> tuple[Action, McpTool]:
    """A read action of the bench's own (``bench.<name>``) and the MCP tool that runs it."""
    action = Action(f"bench.{name}", scope=Scope.READ, tier=Tier.READ)
    return action, McpTool(
        name=name, action=action.name, description=description, source="openbus bench"
    )


NOOP, NOOP_TOOL = _read_tool("noop", "Does nothing (benchmark).")
NOOP_SIZED, NOOP_SIZED_TOOL = _read_tool(
    "noop_sized", "Answers with a fixed search-sized result (benchmark)."
)
# ten sessions as find_sessions gives them (the fields of history.project.AGENT_FIELDS)
SIZED_ANSWER = {
    "sessions": [
        {
            "harness": "claude" if i % 2 else "codex",
            "session_id": f"{i:08x}-5f605fae39bf4575",
            "repo": "github.com/org5/repo5",
            "title": "Rotate the webhook signing keys and retry the flaky login test on cpu ci",
            "cwd": "/home/dev/src/repo5",
            "branches": ["feat/rotate-keys"] if i % 3 else [],
            "prs": ["https://github.com/org5/repo5/pull/2360"] if i % 4 == 0 else [],
            "last_active": "2026-10-03T04:30:20.000Z",
            "matched_terms": ["webhook", "login"],
            "liveness": {"state": "not_running", "pane": None},
        }
        for i in range(10)
    ]
}


class Noop(Feature):
    name = "bench noop"

    def __init__(self, base: Foundation) -> None:
        base.gate.register(NOOP, self._noop)
        base.gate.register(NOOP_SIZED, self._sized)

    async def _noop(self, call: Call) -> Any:
        return {"ok": True}

    async def _sized(self, call: Call) -> Any:
        return SIZED_ANSWER


NOOP_EXTRA = Extra(build=Noop, tools=(NOOP_TOOL, NOOP_SIZED_TOOL))


def app_from_env() -> Any:
    return create_app(load_config(os.environ.get("OPENBUS_CONFIG") or None), extra=[NOOP_EXTRA])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp_app")
    parser.add_argument("--config", required=True)
    serve(load_config(parser.parse_args().config), app="bench.mcp_app:app_from_env()")


if __name__ == "__main__":
    main()
