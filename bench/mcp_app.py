"""The daemon as ``bench/bench_mcp.py`` serves it: every production feature plus a no-op read
tool (``noop``, action ``bench.noop``: the same token check, gate and audit record, no work),
the floor each MCP tool is measured against. Production never names it: it is added through
the composition root's ``extra`` features.

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

NOOP = Action("bench.noop", scope=Scope.READ, tier=Tier.READ)
NOOP_TOOL = McpTool(
    name="noop",
    action=NOOP.name,
    description="Does nothing (benchmark).",
    source="openbus bench",
)


class Noop(Feature):
    name = "bench noop"

    def __init__(self, base: Foundation) -> None:
        base.gate.register(NOOP, self._noop)

    async def _noop(self, call: Call) -> Any:
        return {"ok": True}


NOOP_EXTRA = Extra(build=Noop, tools=(NOOP_TOOL,))


def app_from_env() -> Any:
    return create_app(load_config(os.environ.get("OPENBUS_CONFIG") or None), extra=[NOOP_EXTRA])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp_app")
    parser.add_argument("--config", required=True)
    serve(load_config(parser.parse_args().config), app="bench.mcp_app:app_from_env()")


if __name__ == "__main__":
    main()
