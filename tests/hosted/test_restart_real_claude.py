"""Restart-to-connect on a hosted box, where each agent runs under a pool user of its own: the
real Claude Code against the stub model, launched Off, is restarted onto its session by the
operator's ``openbus connect PANE --preset observe`` and the card's approval. It comes back in
the same pane, in the same session (its transcript, in the pool user's 0700 home, keeps the
earlier turn), calls an openbus tool, and runs as the same pool uid: the one whose home holds
its transcript, even when a lower uid of the pool has come free in the meantime.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon.launch_proc import process_tree
from tests.hosted.conftest import HostedBox, as_user, needs_root
from tests.support.daemon import python_for
from tests.support.harnesses import CLAUDE_IDLE, make_claude, submit_prompt
from tests.support.stub_model import StubModel, call_tool, reply
from tests.support.tmux import TmuxServer
from tests.support.wait import wait_until

pytestmark = [pytest.mark.root, pytest.mark.harness, needs_root, pytest.mark.timeout(300)]


def cli(box: HostedBox, *args: str) -> Any:
    """One ``openbus`` command as the operator at the desk; its JSON answer."""
    python, env = python_for(box.operator)
    argv = [python, "-m", "openbus.daemon.cli", *args, "--json"]
    done = as_user(box.operator, [*argv, "--config", str(box.daemon.config_path)], env=dict(env))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def audit(box: HostedBox, action: str | None = None) -> list[dict[str, Any]]:
    """The audit records (of ``action``), read from the state database as root."""
    path = box.daemon.state_dir / "openbus.db"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT actor, action, target, details FROM audit ORDER BY seq")
        found = [
            {"actor": a, "action": n, "target": t, "details": json.loads(d)} for a, n, t, d in rows
        ]
    return [r for r in found if action in (None, r["action"])]


def live_launch(box: HostedBox, pane: str) -> tuple[int, str]:
    """The pane's live launch record: its process and the pool user it ran as."""
    path = box.daemon.state_dir / "openbus.db"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        [(pid, user)] = conn.execute(
            "SELECT pid, agent_user FROM launches WHERE pane_id = ? AND state = 'live'", (pane,)
        )
    return int(pid), str(user)


def runs_anything(uid: int) -> bool:
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                return True
        except FileNotFoundError:
            continue
    return False


def uid_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(x for x in status.splitlines() if x.startswith("Uid:")).split()[1])


def claude_uid(pane_pid: int) -> int | None:
    """The uid the harness under the pane (sudo's child) runs as, once it runs."""
    for pid in process_tree(pane_pid):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "claude":
                return uid_of(pid)
        except OSError:
            continue
    return None


def seed_pool_homes(box: HostedBox, stub: StubModel, project: Path) -> Path:
    """Every pool user's home gets the Claude Code config the harness reads there (sudo sets
    HOME to it): the stub's API key approved, onboarding done, the project trusted. Returns
    the binary."""
    claude = make_claude(box.root / "claude-seed", stub, project)
    for user in box.pool_users:
        entry = pwd.getpwnam(user)
        home = Path(entry.pw_dir)
        (home / ".claude").mkdir(exist_ok=True)
        shutil.copy(claude.config_dir / ".claude.json", home / ".claude.json")
        shutil.copy(claude.config_dir / "settings.json", home / ".claude" / "settings.json")
        for path in (home / ".claude.json", home / ".claude", home / ".claude" / "settings.json"):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    return claude.binary


def transcript(box: HostedBox, user: str, session_id: str) -> str:
    home = Path(pwd.getpwnam(user).pw_dir)
    return "".join(p.read_text() for p in home.glob(f".claude/projects/*/{session_id}.jsonl"))


def test_a_claude_under_a_pool_user_is_restarted_onto_its_session_as_that_user_and_connected(
    box: HostedBox, stub: StubModel
) -> None:
    project = box.root / "project"
    project.mkdir(mode=0o777)
    project.chmod(0o777)
    binary = seed_pool_homes(box, stub, project)
    box.config["launchers.realclaude"] = {
        "harness": "claude",
        "argv": [str(binary)],
        "env": {
            "ANTHROPIC_BASE_URL": stub.url,
            "ANTHROPIC_API_KEY": make_claude(box.root / "k", stub, project).api_key,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "LANG": "C.UTF-8",
        },
    }
    box.restart_daemon()
    tmux = TmuxServer(box.tmux_socket, box.root / "root-home")

    # a placeholder agent takes the pool's lowest uid, the real one the next
    placeholder = cli(box, "launch", "fakeclaude", "--preset", "off", "--cwd", "/tmp")
    launched = cli(box, "launch", "realclaude", "--preset", "off", "--cwd", str(project))
    pane, session_id, user = launched["pane"], launched["session_id"], launched["agent_user"]
    assert session_id and user and user != placeholder["agent_user"]
    assert launched["connect"]["connected"] is False
    uid = pwd.getpwnam(user).pw_uid
    wait_until(lambda: claude_uid(launched["pid"]) == uid, timeout=30, what="Claude as its user")

    script = stub.script(reply("ANSWER-FIRST"), match="FIRST-TURN")
    tmux.wait_for(pane, CLAUDE_IDLE, absent=["esc to interrupt"], timeout=90)
    submit_prompt(tmux, pane, "please say FIRST-TURN")
    script.wait_finished(timeout=90)
    wait_until(
        lambda: "ANSWER-FIRST" in transcript(box, user, session_id),
        timeout=60,
        what="the first turn in the transcript in the pool user's home",
    )
    # the lower uid comes free: a restart that took any free user would take it
    tmux.run("kill-pane", "-t", placeholder["pane"])
    lower = pwd.getpwnam(placeholder["agent_user"]).pw_uid
    wait_until(lambda: not runs_anything(lower), timeout=30, what="the lower uid to be free")

    def idle() -> bool:
        for entry in cli(box, "directory")["panes"]:
            if entry["pane"] == pane:
                return entry.get("composer_empty") is True
        return False

    wait_until(idle, timeout=60, what="the idle pane in the directory")
    offered = cli(box, "connect", pane, "--preset", "observe")
    assert offered["restart"]["summary"] == "Restart this agent to connect it?"
    [card] = [c for c in cli(box, "cards")["cards"] if c["kind"] == "restart_to_connect"]
    cli(box, "approve", card["id"])

    def done() -> dict[str, Any] | None:
        return next(iter(audit(box, "restart.done")), None)

    closed = wait_until(done, timeout=120, what="the restart to finish")
    assert closed["details"]["outcome"] == "connected", closed
    assert closed["target"] == pane
    new_pid = int(tmux.pane_field(pane, "pane_pid"))
    assert new_pid != launched["pid"]
    # the same uid, not the lower one that came free
    wait_until(lambda: claude_uid(new_pid) == uid, timeout=30, what="the resumed Claude as user")
    assert live_launch(box, pane) == (new_pid, user)

    for attempt in range(15):  # retried while its MCP connects
        go = f"AFTER-RESTART-{attempt}"
        calls = stub.script(
            call_tool("mcp__openbus__list_panes", {}), reply("LISTED {tool_result}"), match=go
        )
        tmux.wait_for(pane, CLAUDE_IDLE, absent=["esc to interrupt"], timeout=90)
        submit_prompt(tmux, pane, f"please run {go}")
        calls.wait_finished(timeout=90)
        if '"panes"' in (calls.last_tool_result or ""):
            break
    else:
        raise AssertionError(f"no openbus tool result\n{tmux.capture(pane)}")
    text = wait_until(
        lambda: (t := transcript(box, user, session_id)) and go in t and t,
        timeout=60,
        what="the new turn in the same transcript",
    )
    assert "ANSWER-FIRST" in text  # the earlier turn kept: the same session resumed
    # the tool call was the session's principal's, with the grant the restart gave it
    actors = {r["actor"] for r in audit(box, "directory.list") if r["actor"].startswith("agent:")}
    assert actors == {f"agent:claude:{session_id}"}, actors
