"""No route reaches an executor except through the gate, and every call is audited once."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import falcon.asgi
import pytest

from openbus.daemon import compose
from openbus.daemon.app import create_app
from openbus.daemon.compose import Daemon
from openbus.daemon.config import parse_config
from openbus.daemon.http.routes import UNAUDITED
from openbus.kernel.testing import FixedClock, SeededRandom
from tests.support.asgi import call

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def falcon_app(app: Any) -> falcon.asgi.App:
    """The falcon app inside the daemon's outer ASGI dispatcher, if there is one."""
    while not isinstance(app, falcon.asgi.App):
        app = app.falcon  # the outer dispatcher keeps it here
    return app


def routes(app: falcon.asgi.App) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []

    def walk(nodes: list[Any]) -> None:
        for node in nodes:
            if node.resource is not None:
                for method in METHODS:
                    if callable(getattr(node.resource, f"on_{method.lower()}", None)):
                        found.append((method, node.uri_template))
            walk(node.children)

    walk(app._router._roots)
    return sorted(set(found))


@pytest.fixture
def daemon(tmp_path: Path) -> Daemon:
    config = parse_config(
        {
            "daemon": {"state_dir": str(tmp_path / "state"), "socket": str(tmp_path / "d.sock")},
            "tmux": {"socket": str(tmp_path / "no-such-tmux")},
        },
        "<test>",
    )
    return compose.build(config, clock=FixedClock(), random=SeededRandom())


def test_every_route_goes_through_the_gate_and_leaves_one_record(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate_calls: list[str] = []
    run = daemon.foundation.gate.run

    async def spy(actor: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        gate_calls.append(name)
        return await run(actor, name, *args, **kwargs)

    monkeypatch.setattr(daemon.foundation.gate, "run", spy)
    app = create_app(daemon.config, daemon=daemon)
    table = routes(falcon_app(app))
    assert ("GET", "/api/cards") in table and ("PUT", "/api/connect") in table
    for method, template in table:
        if template in UNAUDITED:
            continue
        path = re.sub(r"\{[^}]+\}", "x1", template)
        gate_calls.clear()
        seq_before, _ = daemon.foundation.audit.head()
        status, body = asyncio.run(call(app, method, path, {} if method != "GET" else None))
        seq_after, _ = daemon.foundation.audit.head()
        assert len(gate_calls) == 1, (
            f"{method} {template} called the gate {len(gate_calls)} times: {gate_calls} "
            f"({status} {body})"
        )
        assert seq_after == seq_before + 1, (
            f"{method} {template} left {seq_after - seq_before} records"
        )
        assert status < 500 or status == 503, f"{method} {template} answered {status}: {body}"


def test_a_route_with_no_identity_is_refused(daemon: Daemon) -> None:
    app = create_app(daemon.config, daemon=daemon)
    status, _ = asyncio.run(call(app, "GET", "/api/cards", peer=False))  # type: ignore[arg-type]
    assert status == 404  # the agents' side serves only /mcp and /healthz
