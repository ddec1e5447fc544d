"""The directory through the real daemon: the human API over the unix socket and the CLI."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tests.support.daemon import running_daemon
from tests.support.tmux import tmux_server
from tests.support.wait import wait_until

CASES = Path(__file__).parent / "screens" / "cases"


def test_the_api_and_the_cli_serve_the_directory_of_a_real_tmux_server(tmp_path: Path) -> None:
    with tmux_server(tmp_path / "tmux") as server:
        extra = server.session("work")
        with running_daemon(tmp_path, {"tmux": {"socket": str(server.socket)}}) as daemon:
            with daemon.human() as client:

                def listing() -> dict[str, Any] | None:
                    body: dict[str, Any] = client.get("/api/directory").json()
                    return body if len(body["panes"]) == 2 else None

                body = wait_until(listing, timeout=20, what="both panes in /api/directory")
                assert body["tmux"]["running"] is True
                entry = next(p for p in body["panes"] if p["pane"] == extra)
                assert entry["session"] == "work" and entry["harness"] == "shell"
                assert entry["incarnation"].startswith("inc_")

                server.keys(extra, "echo api-$((2+3))", "Enter")

                def changed() -> bool:
                    detail = client.get("/api/panes/" + quote(extra, safe="")).json()
                    return "api-5" in detail["summary"] or detail["revision"] > entry["revision"]

                wait_until(changed, what="the change in /api/panes")
                detail = client.get("/api/panes/" + quote(extra, safe="")).json()
                assert detail["events"][0]["kind"] == "appeared"

                # a control client that goes away: the API shows the pane stale, then fresh
                # once a new client follows it
                session = server.run("display-message", "-p", "-t", extra, "#{session_id}")
                clients = server.run("list-clients", "-F", "#{client_pid} #{session_id}")
                (watching,) = [
                    int(c.split()[0]) for c in clients.splitlines() if c.endswith(session.strip())
                ]
                os.kill(watching, signal.SIGKILL)

                def kinds() -> list[str]:
                    detail = client.get("/api/panes/" + quote(extra, safe="")).json()
                    return [e["kind"] for e in detail["events"] if e["kind"] in ("stale", "fresh")]

                wait_until(lambda: kinds() == ["stale", "fresh"], what="stale, then fresh again")
                detail = client.get("/api/panes/" + quote(extra, safe="")).json()
                assert detail["stale"] is False
                assert (
                    "control client"
                    in next(e for e in detail["events"] if e["kind"] == "stale")["text"]
                )

                missing = client.get("/api/panes/%25999")
                assert missing.status_code == 404 and "%999" in missing.json()["message"]
                assert client.get("/api/panes/" + extra[1:]).json()["pane"] == extra

            out = daemon.cli("directory", "--json", check=True)
            assert {p["pane"] for p in json.loads(out.stdout)["panes"]} >= {extra}
            table = daemon.cli("directory", check=True).stdout
            assert "PANE" in table and extra in table and "running" in table
            one = daemon.cli("pane", extra, check=True).stdout
            assert "incarnation" in one and "events:" in one
            bad = daemon.cli("pane", "%999")
            assert bad.returncode != 0 and "%999" in bad.stderr and "Traceback" not in bad.stderr

            server.kill()
            with daemon.human() as client:
                wait_until(
                    lambda: client.get("/api/directory").json()["tmux"]["running"] is False,
                    what="the directory to say tmux is not running",
                )
                assert client.get("/healthz").status_code == 200
            server.start()
            with daemon.human() as client:
                wait_until(
                    lambda: len(client.get("/api/directory").json()["panes"]) == 1,
                    timeout=20,
                    what="the restarted server followed again",
                )


def test_explain_names_the_parser_the_rule_and_the_screen_lines_behind_a_panes_state(
    tmp_path: Path,
) -> None:
    with tmux_server(tmp_path / "tmux") as server:
        pane = server.new_window(server.fake_harness("claude", CASES, "claude-running"))
        with running_daemon(tmp_path, {"tmux": {"socket": str(server.socket)}}) as daemon:
            with daemon.human() as client:

                def busy() -> dict[str, Any] | None:
                    found = client.get("/api/panes/" + quote(pane, safe=""))
                    if found.status_code != 200 or found.json()["state"] != "busy":
                        return None
                    detail: dict[str, Any] = found.json()
                    return detail

                detail = wait_until(busy, timeout=20, what="the fake claude busy")
            why = detail["explain"]
            assert (why["parser"], why["rule"]) == ("claude", "busy-marker")
            assert any("esc to interrupt" in line for line in why["evidence"]["screen"]["lines"])
            assert why["evidence"]["process"]["found"].startswith("the pane's own process")
            assert "turn ending" in why["would_change"]

            text = daemon.cli("explain", pane, check=True).stdout
            assert f"{pane} reads busy" in text and "busy-marker" in text
            assert "esc to interrupt" in text and "would change" in text
            out = json.loads(daemon.cli("explain", pane, "--json", check=True).stdout)
            assert out["explain"]["rule"] == "busy-marker" and out["state"] == "busy"
            bad = daemon.cli("explain", "%999")
            assert bad.returncode != 0 and "%999" in bad.stderr and "Traceback" not in bad.stderr
