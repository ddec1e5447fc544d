"""Bad input on every route answers 4xx in the one error shape, naming the field.

The walk covers every route and method the router serves (and methods it does not), with a
deeply nested JSON body under the size cap, huge strings, wrong types, and wrong or missing
content types; each answer must be a 4xx whose body is ``{error, message[, field]}`` and,
where a field is at fault, names it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon import compose
from openbus.daemon.app import create_app
from openbus.daemon.compose import Daemon
from openbus.daemon.config import parse_config
from openbus.daemon.http.common import MAX_BODY
from openbus.kernel.testing import FixedClock, SeededRandom
from tests.daemon.http.test_route_walk import METHODS, falcon_app, routes
from tests.support.asgi import call
from tests.support.daemon import running_daemon
from tests.support.tmux import tmux_server

HUGE = "a" * 100_000
NESTED = b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
WRONG_TYPES: list[Any] = [5, 1.5, True, [], {}, ["a"], {"a": "b"}, HUGE, "\x00"]
# The JSON body fields of each route that reads one (the resources' own lists).
BODY_FIELDS = {
    ("POST", "/api/launch"): ("launcher", "cwd", "preset", "prompt"),
    ("POST", "/api/cards/{card_id}"): ("decision",),
    ("PUT", "/api/connect"): ("pane", "preset"),
}
QUERY_FIELDS = {  # each route's parameters, and a query that is good without them
    "/api/cards": (("pending",), ""),
    "/api/history/search": (("q", "repo", "limit"), "q=x&"),
    "/api/audit": (("after", "limit"), ""),
    "/api/audit/stream": (("after",), ""),
    "/api/messages": (("pane",), ""),
}
GOOD_BODY = {
    ("POST", "/api/launch"): {"launcher": "shell"},
    ("POST", "/api/cards/{card_id}"): {"decision": "approve"},
    ("PUT", "/api/connect"): {"pane": "%1", "preset": "observe"},
}


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    with tmux_server(tmp_path) as tmux:  # a launch that wrongly passed would land here
        config = parse_config(
            {
                "daemon": {
                    "state_dir": str(tmp_path / "state"),
                    "socket": str(tmp_path / "d.sock"),
                },
                "tmux": {"socket": str(tmux.socket)},
            },
            "<test>",
        )
        yield compose.build(config, clock=FixedClock(), random=SeededRandom())


def in_one_shape(status: int, body: Any, where: str, field: str | None = None) -> None:
    assert 400 <= status < 500, f"{where} answered {status}: {str(body)[:300]}"
    assert isinstance(body, dict), f"{where}: not a JSON object: {str(body)[:300]}"
    assert set(body) <= {"error", "message", "field"}, f"{where}: {body}"
    assert isinstance(body.get("error"), str), f"{where}: {body}"
    assert isinstance(body.get("message"), str), f"{where}: {body}"
    assert len(body["message"]) < 1_000, f"{where}: the message echoes the input"
    if field is not None:
        assert body.get("field") == field, f"{where}: names {body.get('field')!r}, not {field!r}"


def concrete(template: str) -> str:
    return re.sub(r"\{[^}]+\}", "x1", template)


def test_a_deeply_nested_body_under_the_cap_is_a_400_on_the_body_on_every_route(
    daemon: Daemon,
) -> None:
    assert len(NESTED) < MAX_BODY
    app = create_app(daemon.config, daemon=daemon)
    for method, template in routes(falcon_app(app)):
        if method == "GET" or (method, template) not in BODY_FIELDS:
            continue
        status, body = asyncio.run(call(app, method, concrete(template), content=NESTED))
        in_one_shape(status, body, f"{method} {template} nested", field="body")


@pytest.mark.parametrize(("route", "fields"), sorted(BODY_FIELDS.items()))
def test_every_body_field_of_a_wrong_type_or_huge_is_a_4xx_naming_it(
    daemon: Daemon, route: tuple[str, str], fields: tuple[str, ...]
) -> None:
    app = create_app(daemon.config, daemon=daemon)
    method, template = route
    for name in fields:
        for value in WRONG_TYPES:
            payload = {**GOOD_BODY[route], name: value}
            status, body = asyncio.run(call(app, method, concrete(template), payload))
            in_one_shape(status, body, f"{method} {template} {name}={str(value)[:20]!r}", name)


def test_a_100000_character_cwd_is_a_400_naming_cwd(daemon: Daemon) -> None:
    app = create_app(daemon.config, daemon=daemon)
    # 100,000 characters; one name longer than a file system allows; a loop of links
    loop = Path(daemon.config.daemon.state_dir) / "loop"
    loop.symlink_to(loop)
    for cwd in ("/" + HUGE, "/" + "a" * 300, str(loop / "x")):
        payload = {"launcher": "shell", "cwd": cwd}
        status, body = asyncio.run(call(app, "POST", "/api/launch", payload))
        in_one_shape(status, body, f"launch with cwd {cwd[:40]}", field="cwd")


@pytest.mark.parametrize(("template", "fields"), sorted(QUERY_FIELDS.items()))
def test_every_query_parameter_of_a_wrong_type_or_huge_is_a_4xx_naming_it(
    daemon: Daemon, template: str, fields: tuple[tuple[str, ...], str]
) -> None:
    app = create_app(daemon.config, daemon=daemon)
    names, base = fields
    for name in names:
        for value in ("maybe", "-1", "1e999", "9" * 40, HUGE):
            query = base + f"{name}={value}"
            status, body = asyncio.run(call(app, "GET", template, query=query))
            if status < 400:
                continue  # free text (a search, a pane name) may be any string that fits
            in_one_shape(status, body, f"GET {template}?{name}={value[:20]}", name)


def test_a_huge_path_parameter_is_a_4xx_in_the_one_shape(daemon: Daemon) -> None:
    app = create_app(daemon.config, daemon=daemon)
    for method, template in routes(falcon_app(app)):
        if "{" not in template:
            continue
        path = re.sub(r"\{[^}]+\}", HUGE, template)
        payload = GOOD_BODY.get((method, template))
        status, body = asyncio.run(call(app, method, path, payload))
        in_one_shape(status, body, f"{method} {template} huge")


@pytest.mark.parametrize(
    "content_type", [b"text/plain", b"application/x-www-form-urlencoded", b"", None]
)
def test_a_body_in_another_content_type_is_a_415_naming_the_content_type(
    daemon: Daemon, content_type: bytes | None
) -> None:
    app = create_app(daemon.config, daemon=daemon)
    for (method, template), good in GOOD_BODY.items():
        content = str(good).encode()
        status, body = asyncio.run(
            call(app, method, concrete(template), content=content, content_type=content_type)
        )
        assert status == 415, f"{method} {template} as {content_type!r}: {status} {body}"
        in_one_shape(status, body, f"{method} {template} as {content_type!r}", "content-type")


def test_an_unknown_path_and_an_unserved_method_answer_in_the_one_shape(daemon: Daemon) -> None:
    app = create_app(daemon.config, daemon=daemon)
    status, body = asyncio.run(call(app, "GET", "/api/no-such-thing"))
    assert status == 404
    in_one_shape(status, body, "unknown path", "path")
    table = routes(falcon_app(app))
    for template in sorted({template for _, template in table}):
        for other in METHODS:
            if (other, template) in table:
                continue
            status, body = asyncio.run(call(app, other, concrete(template), {}))
            assert status == 405, f"{other} {template}: {status} {body}"
            in_one_shape(status, body, f"{other} {template}", "method")


def test_the_real_daemon_answers_bad_input_over_its_socket_in_the_one_shape(
    tmp_path: Path,
) -> None:
    with (
        tmux_server(tmp_path) as tmux,
        running_daemon(tmp_path, {"tmux": {"socket": str(tmux.socket)}}) as daemon,
        daemon.human() as client,
    ):
        json_type = {"Content-Type": "application/json"}
        cases: list[tuple[str, str, dict[str, Any], str]] = [
            ("POST", "/api/launch", {"content": NESTED, "headers": json_type}, "body"),
            ("PUT", "/api/connect", {"content": NESTED, "headers": json_type}, "body"),
            ("POST", "/api/cards/x1", {"content": NESTED, "headers": json_type}, "body"),
            ("POST", "/api/launch", {"json": {"launcher": "shell", "cwd": "/" + HUGE}}, "cwd"),
            ("POST", "/api/launch", {"content": b'{"launcher": "shell"}'}, "content-type"),
            ("GET", "/api/no-such-thing", {}, "path"),
            ("DELETE", "/api/launch", {}, "method"),
            ("GET", "/api/cards", {"params": {"pending": "maybe"}}, "pending"),
        ]
        for method, path, kw, field in cases:
            response = client.request(method, path, **kw)
            in_one_shape(response.status_code, response.json(), f"{method} {path}", field)
        assert "Traceback" not in daemon.log()
