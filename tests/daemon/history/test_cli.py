"""``openbus history`` as a subprocess, with and without the real daemon."""

from __future__ import annotations

import json
import os
import pwd
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from openbus.daemon.history import reconcile
from tests.daemon.history.homes import ClaudeHome, CodexHome, opencode_database
from tests.support.daemon import RunningDaemon, running_daemon, write_config
from tests.support.wait import wait_until


def _homes(tmp: Path) -> tuple[ClaudeHome, CodexHome, dict[str, Any]]:
    claude = ClaudeHome(tmp / "claude")
    codex = CodexHome(tmp / "codex")
    claude.session(
        "c-1",
        "/w/app",
        ["fix the flaky login test"],
        branches=("fix/login",),
        replies=["https://github.com/acme/app/pull/7"],
    )
    claude.subagent("c-1", "ag1", "/w/app", "look for callers of login()")
    codex.rollout("x-1", "/w/svc", ["migrate billing tables"])
    section = {"claude_config_dirs": [str(claude.root)], "codex_homes": [str(codex.root)]}
    return claude, codex, section


def _run(config: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openbus.daemon.cli", "history", *args, "--config", str(config)],
        capture_output=True,
        check=False,
        text=True,
        input=stdin,
        timeout=60,
        env={**os.environ, "XDG_RUNTIME_DIR": ""},
    )


def _offline_config(tmp: Path, section: dict[str, Any]) -> Path:
    return write_config(
        tmp / "openbus.toml",
        {
            "daemon": {"state_dir": str(tmp / "state"), "socket": str(tmp / "run" / "d.sock")},
            "history": section,
        },
    )


def test_history_alone_names_the_sources_of_all_five_harnesses(tmp_path: Path) -> None:
    _, _, section = _homes(tmp_path)
    result = _run(_offline_config(tmp_path, section))
    assert result.returncode == 0, result.stderr
    assert "omp agent dirs: " in result.stdout
    assert "gemini dirs: " in result.stdout
    assert "opencode data dirs: " in result.stdout
    assert "not indexed yet" not in result.stdout
    assert str(tmp_path / "claude") in result.stdout


def test_reindex_and_push_refuse_without_a_daemon_and_leave_the_index_unwritten(
    tmp_path: Path,
) -> None:
    claude, _, section = _homes(tmp_path)
    config = _offline_config(tmp_path, section)
    path = claude.session("c-new", "/w/app", ["pushed from the stop hook"])
    for args, stdin in ((["reindex"], None), (["push"], json.dumps(_hook(path)))):
        result = _run(config, *args, stdin=stdin)
        assert result.returncode == 1, result  # never 2: a hook must not block the agent
        assert "cannot reach the daemon" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "state" / "history.db").exists()


def _hook(path: Path) -> dict[str, Any]:
    return {
        "session_id": "c-new",
        "transcript_path": str(path),
        "cwd": "/w/app",
        "hook_event_name": "Stop",
        "stop_hook_active": False,
    }


def _audit(daemon: RunningDaemon, action: str) -> list[tuple[str, str, str | None]]:
    db = sqlite3.connect(daemon.state_dir / "openbus.db")
    try:
        rows = db.execute(
            "SELECT actor, outcome, target FROM audit WHERE action = ? ORDER BY seq", (action,)
        ).fetchall()
    finally:
        db.close()
    return [tuple(row) for row in rows]


def test_push_and_reindex_go_through_the_daemon_and_each_leaves_one_audit_record(
    tmp_path: Path,
) -> None:
    claude, _, section = _homes(tmp_path)
    user = f"human:{_user()}"
    with running_daemon(tmp_path, {"history": section}) as daemon:
        with daemon.human() as human:
            wait_until(
                lambda: human.get("/healthz").json()["history"]["sessions"] == 3,
                what="the start-up reconcile",
            )
        path = claude.session("c-new", "/w/app", ["pushed from the stop hook"])
        pushed = _run(daemon.config_path, "push", stdin=json.dumps(_hook(path)))
        assert pushed.returncode == 0, pushed.stderr
        assert "indexed claude c-new" in pushed.stdout
        assert _audit(daemon, "history.push") == [(user, "ok", "claude:c-new")]
        found = daemon.cli("history", "search", "stop hook", "--json", check=True)
        assert [r["session_id"] for r in json.loads(found.stdout)["results"]] == ["c-new"]

        bad = _run(daemon.config_path, "push", stdin="not json")
        assert bad.returncode == 1 and "stdin" in bad.stderr and "Traceback" not in bad.stderr
        outside = _run(daemon.config_path, "push", "--transcript", "/etc/passwd")
        assert outside.returncode == 1 and "transcript_path" in outside.stderr
        assert [r[1] for r in _audit(daemon, "history.push")] == ["ok", "refused"]

        again = _run(daemon.config_path, "reindex", "--json")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["changed"] == 0
        full = _run(daemon.config_path, "reindex", "--full", "--json")
        assert json.loads(full.stdout)["indexed"] == 4
        assert _audit(daemon, "history.reindex") == [(user, "ok", None), (user, "ok", None)]


def test_search_get_and_expunge_go_through_the_daemon_and_are_audited(tmp_path: Path) -> None:
    _, _, section = _homes(tmp_path)
    with running_daemon(tmp_path, {"history": section}) as daemon:
        with daemon.human() as human:  # the reconcile at start runs in the background
            wait_until(
                lambda: human.get("/healthz").json()["history"]["sessions"] == 3,
                what="the start-up reconcile",
            )
        found = daemon.cli("history", "search", "flaky login", "--json", check=True)
        results = json.loads(found.stdout)["results"]
        assert results[0]["session_id"] == "c-1"
        assert results[0]["matched_terms"] == ["flaky", "login"]
        assert results[0]["resume_argv"] == ["claude", "--resume", "c-1"]  # the human's view

        in_repo = daemon.cli("history", "search", "billing", "--repo", "/elsewhere", "--json")
        assert json.loads(in_repo.stdout)["results"] == []

        text = daemon.cli("history", "get", "claude", "c-1", check=True).stdout
        assert "resume: claude --resume c-1" in text and "fix/login" in text

        with daemon.human() as human:
            response = human.get("/api/history/search", params={"q": "billing"})
            assert response.status_code == 200
            assert response.json()["results"][0]["session_id"] == "x-1"
            missing = human.get("/api/history/search")
            assert missing.status_code == 400 and missing.json()["field"] == "q"
            absent = human.get("/api/history/sessions/claude/nope")
            assert absent.status_code == 404

        transcript = Path(results[0]["transcript"])
        unconfirmed = daemon.cli("history", "expunge", "claude", "c-1")  # no terminal, no --yes
        assert unconfirmed.returncode == 1 and "--yes" in unconfirmed.stderr
        assert transcript.exists()
        gone = daemon.cli("history", "expunge", "claude", "c-1", "--yes", check=True)
        assert gone.stdout.startswith("expunged claude c-1: its index entry and 2 transcript files")
        assert f"removed {transcript}" in gone.stdout
        assert not transcript.exists()
        after = daemon.cli("history", "get", "claude", "c-1")
        assert after.returncode == 1 and "no claude session c-1" in after.stderr
        assert "Traceback" not in after.stderr

        db = sqlite3.connect(daemon.state_dir / "openbus.db")
        try:
            rows = db.execute("SELECT actor, action, outcome, target FROM audit").fetchall()
        finally:
            db.close()
        user = f"human:{_user()}"
        assert (user, "history.expunge", "ok", "claude:c-1") in rows
        assert (user, "history.search", "ok", None) in rows
        assert (user, "history.get", "refused", "claude:c-1") in rows


def test_expunge_of_an_opencode_session_forgets_it_and_prints_how_to_delete_opencodes_copy(
    tmp_path: Path,
) -> None:
    _, _, section = _homes(tmp_path)
    db = opencode_database(tmp_path / "xdg" / "opencode", "ses_oc1", "tidy the release script")
    before = db.read_bytes()
    env = {"XDG_DATA_HOME": str(tmp_path / "xdg")}
    with running_daemon(tmp_path, {"history": section}, env=env) as daemon:
        with daemon.human() as human:
            wait_until(
                lambda: human.get("/healthz").json()["history"]["sessions"] == 4,
                what="the start-up reconcile",
            )
        text = daemon.cli("history", "get", "opencode", "ses_oc1", check=True).stdout
        assert "resume: opencode --session ses_oc1" in text
        unconfirmed = daemon.cli("history", "expunge", "opencode", "ses_oc1")
        assert unconfirmed.returncode == 1
        assert "forgets opencode session ses_oc1" in unconfirmed.stderr
        gone = daemon.cli("history", "expunge", "opencode", "ses_oc1", "--yes", check=True)
        assert gone.stdout.startswith("expunged opencode ses_oc1: its index entry and 0 ")
        assert "opencode session delete ses_oc1" in gone.stdout
        after = daemon.cli("history", "get", "opencode", "ses_oc1")
        assert after.returncode == 1 and "no opencode session ses_oc1" in after.stderr
    assert db.read_bytes() == before


def _user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def test_push_of_a_transcript_path_that_does_not_exist_exits_1_naming_it(tmp_path: Path) -> None:
    _, _, section = _homes(tmp_path)
    with running_daemon(tmp_path, {"history": section}) as daemon:
        missing = str(tmp_path / "claude" / "projects" / "-w-app" / "gone.jsonl")
        for args, stdin in (
            ((), json.dumps({"session_id": "gone", "transcript_path": missing})),
            (("--transcript", missing), None),
        ):
            done = _run(daemon.config_path, "push", *args, stdin=stdin)
            assert done.returncode == 1, (args, done.stdout, done.stderr)
            assert missing in done.stderr and "Traceback" not in done.stderr


def test_get_takes_a_unique_prefix_of_the_session_id(tmp_path: Path) -> None:
    claude, _, section = _homes(tmp_path)
    claude.session("7f3c0a11-aaaa", "/w/app", ["first of two"])
    claude.session("7f3c0a22-bbbb", "/w/app", ["second of two"])
    with running_daemon(tmp_path, {"history": section}) as daemon:
        with daemon.human() as human:
            wait_until(
                lambda: human.get("/healthz").json()["history"]["sessions"] == 5,
                what="the start-up reconcile",
            )
        got = daemon.cli("history", "get", "claude", "7f3c0a2", "--json", check=True)
        assert json.loads(got.stdout)["session"]["session_id"] == "7f3c0a22-bbbb"
        ambiguous = daemon.cli("history", "get", "claude", "7f3c")
        assert ambiguous.returncode == 1
        assert "7f3c0a11-aaaa" in ambiguous.stderr and "7f3c0a22-bbbb" in ambiguous.stderr
        short = daemon.cli("history", "get", "claude", "7f3")  # under four characters: whole ids
        assert short.returncode == 1 and "no claude session 7f3" in short.stderr


def test_a_search_during_a_reconcile_waits_for_it_and_finds_every_session(tmp_path: Path) -> None:
    """The first search after start, while the start-up reconcile may still run, finds all."""
    _, _, section = _homes(tmp_path)
    with running_daemon(tmp_path, {"history": section}) as daemon:
        found = daemon.cli("history", "search", "login billing", "--json", check=True)
        body = json.loads(found.stdout)
        ids = {r["session_id"] for r in body["results"]}
        assert {"c-1", "x-1"} <= ids or "refreshing" in body, body


def test_a_reindex_of_more_transcripts_than_a_helper_pays_for_reads_with_one_in_the_daemon(
    tmp_path: Path,
) -> None:
    """The real daemon (its gunicorn worker) starts the parse helper and indexes every file.
    (Enough files that the pass outlasts the helper's start by far: a pass that ends first
    reads every file itself, as it should.)"""
    claude, _, section = _homes(tmp_path)
    many = 4 * reconcile.HELPER_MIN
    for i in range(many):
        claude.session(f"m-{i}", f"/w/app{i % 7}", [f"rotate the signing key number {i}"])
    with running_daemon(tmp_path, {"history": section}) as daemon:
        full = _run(daemon.config_path, "reindex", "--full", "--json")
        assert full.returncode == 0, full.stderr
        stats = json.loads(full.stdout)
        assert (stats["indexed"], stats["errors"]) == (many + 3, [])
        assert stats["read_by_helper"] > 0
        found = daemon.cli("history", "search", "signing key 777", "--json", check=True)
        assert "m-777" in [r["session_id"] for r in json.loads(found.stdout)["results"]]
        assert "parse helper is dropped" not in daemon.log()
