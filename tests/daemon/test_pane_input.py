"""The human's keys into a pane (``pane.answer``, ``pane.type``), refused with the real reason,
against the real daemon following a private tmux server with a shell in it. A real Claude Code
answering its permission prompt from the page is ``tests/daemon/web/test_needs_you.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.daemon import RunningDaemon, running_daemon
from tests.support.tmux import TmuxServer, tmux_server
from tests.support.wait import wait_until

Fleet = tuple[RunningDaemon, str, TmuxServer]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("pane-input")
    with tmux_server(root / "tmux") as tmux:
        shell = tmux.new_window(["/bin/sh"])
        (root / "daemon").mkdir()
        with running_daemon(root / "daemon", {"tmux": {"socket": str(tmux.socket)}}) as daemon:
            yield daemon, shell, tmux


def listed(client: httpx.Client, pane: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        panes = client.get("/api/directory").json()["panes"]
        return next((p for p in panes if p["pane"] == pane and p["state"] == "shell"), None)

    entry = wait_until(found, timeout=30, what=f"{pane} to be listed as a shell")
    assert entry is not None
    return entry


def refused(answer: httpx.Response, status: int, field: str, words: str) -> None:
    body = answer.json()
    assert answer.status_code == status, body
    assert body["field"] == field and words in body["message"], body


def test_a_shell_is_never_typed_into_and_shows_no_question_to_answer(
    fleet: Fleet,
) -> None:
    daemon, shell, _ = fleet
    with daemon.human() as client:
        entry = listed(client, shell)
        assert entry["menu"] is None
        typed = client.post(
            f"/api/panes/{shell[1:]}/type",
            json={"incarnation": entry["incarnation"], "text": "echo hi"},
        )
        refused(typed, 409, "pane", "not a known agent")
        answered = client.post(
            f"/api/panes/{shell[1:]}/answer",
            json={"incarnation": entry["incarnation"], "fingerprint": "f" * 20, "key": "1"},
        )
        refused(answered, 409, "fingerprint", "no longer asking anything")
        records = client.get("/api/audit", params={"after": 0, "limit": 1000}).json()["records"]
    mine = [r for r in records if r["action"] in ("pane.type", "pane.answer")]
    assert [(r["action"], r["outcome"], r["target"]) for r in mine] == [
        ("pane.type", "refused", shell),
        ("pane.answer", "refused", shell),
    ]


def test_an_answer_for_another_incarnation_or_without_its_fields_is_refused(
    fleet: Fleet,
) -> None:
    daemon, shell, _ = fleet
    with daemon.human() as client:
        listed(client, shell)
        other = client.post(
            f"/api/panes/{shell[1:]}/answer",
            json={"incarnation": "inc_someoneelse", "fingerprint": "f", "key": "1"},
        )
        refused(other, 409, "incarnation", "no longer the process you saw")
        missing = client.post(f"/api/panes/{shell[1:]}/answer", json={"key": "1"})
        refused(missing, 400, "incarnation", "required")
        nowhere = client.post("/api/panes/999/type", json={"incarnation": "x", "text": "hi"})
        refused(nowhere, 404, "pane", "no pane %999")


def test_the_page_reads_a_panes_screen_with_its_secrets_masked(fleet: Fleet) -> None:
    daemon, shell, tmux = fleet
    key = "AKIA" + "IOSFODNN7EXAMPLE"
    tmux.run("send-keys", "-t", shell, f"echo {key}", "Enter")
    with daemon.human() as client:

        def shown() -> dict[str, Any] | None:
            raw: dict[str, Any] = client.get(f"/api/panes/{shell[1:]}").json()
            return raw if key in (raw["screen"] or "") else None

        wait_until(shown, timeout=30, what="the key to show on the shell's screen")
        masked = client.get(f"/api/panes/{shell[1:]}", params={"masked": "true"}).json()
    assert key not in masked["screen"]
    assert "[masked " in masked["screen"] and masked["masked"]
