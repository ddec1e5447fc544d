"""The session tools with the real daemon and the real Claude Code TUI against the stub model.

A Collaborate parent calls ``start_session`` with ``worktree: true``; the human approves the
card with ``openbus approve``; the child starts in its worktree on its branch (a planted
post-checkout hook did not run) and gets the brief under the parent's provenance line; the
child's stub replies ``pong from the child session``, which the parent's ``read_session`` with
``wait_seconds`` returns; ``send_to_session`` hands the child a key, and its reply holding
that key comes back masked; ``list_sessions {mine: true}`` returns exactly the child, its last reply
masked too.

Refusals, with a Collaborate parent and an Observe agent (two Claude Code TUIs): a start
outside the folders anyone trusts, a start from a full-access launcher by a caller that does
not run that way, a read of and a message to a session outside the family, a start whose card
the human declines, and a start by the Observe agent. None opens a pane or a worktree or types
into a pane; each answer names its real reason, and each call the daemon refused is one audit
record naming it.

A Codex parent starts a Claude child and the reverse; each parent is first refused a start
outside the trusted folders, the reason reaching its model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.messaging.test_real_harnesses import (
    claude_launcher,
    cli_json,
    codex_launcher,
    idle_in_directory,
    launch,
)
from tests.daemon.sessions.conftest import git, make_repo
from tests.support.daemon import RunningDaemon, running_daemon
from tests.support.harnesses import (
    CLAUDE_IDLE,
    CODEX_IDLE,
    make_claude,
    make_codex,
    submit_prompt,
    wait_for_codex_ready,
)
from tests.support.stub_model import StubModel, call_tool, reply
from tests.support.tmux import TmuxServer

pytestmark = [pytest.mark.harness, pytest.mark.timeout(300)]

PONG = "pong from the child session"
KEY = "AKIAIOSFODNN7EXAMPLE"  # the shape of an AWS access key id (AWS's documented example)


class Parent:
    """The parent's pane: each call is one turn whose model calls one openbus tool."""

    def __init__(self, tmux: TmuxServer, stub: StubModel, pane: str, idle: str = CLAUDE_IDLE):
        self.tmux, self.stub, self.pane, self.turns, self.idle = tmux, stub, pane, 0, idle

    def call(self, tool: str, args: dict[str, Any], *, attempts: int = 1) -> Any:
        result = ""
        for _ in range(attempts):  # the first call waits until Claude Code has connected
            self.turns += 1
            word = f"sessions-go-{self.turns}"
            script = self.stub.script(
                call_tool(f"mcp__openbus__{tool}", args), reply("DONE {tool_result}"), match=word
            )
            self.tmux.wait_for(self.pane, self.idle, absent=["esc to interrupt"], timeout=60)
            submit_prompt(self.tmux, self.pane, f"please run {word}")
            try:
                script.wait_finished(timeout=90)
            except AssertionError as exc:
                raise AssertionError(
                    f"{exc}\n--- parent ---\n{self.tmux.capture(self.pane)}"
                ) from None
            result = script.last_tool_result or ""
            if '"source":"openbus' in result:
                break  # else the harness has not connected its MCP server yet
        return result

    def data(self, tool: str, args: dict[str, Any], **kw: Any) -> Any:
        result = self.call(tool, args, **kw)
        assert '"source":"openbus' in result, result
        return json.loads(result[result.index("{") : result.rindex("}") + 1])["result"]

    def wait_read(self, session: str) -> Any:
        """read_session with a wait, called again while it answers timedOut (at most 3 times):
        a long wait is several calls, as the tool's description tells agents."""
        for _ in range(3):
            read = self.data("read_session", {"session": session, "wait_seconds": 45})
            if not read.get("timedOut"):
                break
        return read


def test_a_claude_parent_starts_reads_and_messages_a_claude_child_in_a_worktree(
    tmp_path: Path, stub: StubModel, tmux: TmuxServer
) -> None:
    project = make_repo(tmp_path / "project")
    marker = tmp_path / "hook-ran"
    hook = project / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    trees = tmp_path / "trees"
    tree = trees / "project" / "pong-check"
    parent_harness = make_claude(tmp_path / "a", stub, project)
    child_harness = make_claude(tmp_path / "b", stub, tree)  # its trust record: no dialog
    extra: dict[str, dict[str, Any]] = {
        "tmux": {"socket": str(tmux.socket)},
        "sessions": {"worktrees_root": str(trees)},
        "launchers.parent": claude_launcher(parent_harness),
        "launchers.child": claude_launcher(child_harness),
    }
    (tmp_path / "d").mkdir()
    with running_daemon(tmp_path / "d", extra) as daemon:
        a = launch(daemon, "parent", project)
        tmux.wait_for(a["pane"], CLAUDE_IDLE, timeout=60)
        parent = Parent(tmux, stub, a["pane"])
        before = panes(daemon)

        parent.data("list_sessions", {}, attempts=20)  # once Claude Code has connected
        assert panes(daemon) == before

        child_turn = stub.script(reply(PONG), match="PING-CHILD")
        brief = "Reply with exactly: pong from the child session. (PING-CHILD)"
        started = parent.data(
            "start_session",
            {"prompt": brief, "title": "pong check", "worktree": True, "launcher": "child"},
        )
        assert started["state"] == "waiting_for_consent", started
        [card] = cli_json(daemon, "cards")["cards"]
        assert card["kind"] == "start_session"
        assert "wants to start a Claude session in" in card["summary"]
        daemon.cli("approve", card["id"], check=True)

        read = parent.wait_read(started["start"])
        assert read["start"]["state"] == "started", read
        child_pane = read["pane"]
        if not read["replies"]:  # what the child shows, for the failure report
            print(read, tmux.capture(child_pane), cli_json(daemon, "messages"), sep="\n")
        assert [r["text"] for r in read["replies"]] == [PONG], read
        assert child_turn.finished.is_set()
        assert Path(read["start"]["cwd"]) == tree
        assert git(tree, "branch", "--show-current") == "openbus/pong-check"
        assert not marker.exists()
        screen = tmux.capture(child_pane)
        assert "[openbus message from agent:claude:" in screen, screen

        table = daemon.cli("directory", check=True).stdout
        [row] = [line for line in table.splitlines() if line.startswith(child_pane + " ")]
        assert f"[child of {a['pane']}]" in row, table
        assert f"started by: {a['pane']}" in daemon.cli("pane", child_pane, check=True).stdout
        assert f"started: {child_pane}" in daemon.cli("pane", a["pane"], check=True).stdout

        stub.script(reply(f"second pong, the key is {KEY}"), match="PING-TWO")
        sent = parent.data(
            "send_to_session", {"session": child_pane, "text": f"PING-TWO now, the key is {KEY}"}
        )
        assert sent["outcome"] == "queued", sent
        again = parent.wait_read(child_pane)
        last = again["replies"][-1]["text"]
        if not last.startswith("second pong"):  # what the child shows, for the failure report
            print(again, tmux.capture(child_pane), cli_json(daemon, "messages"), sep="\n")
        assert last.startswith("second pong") and KEY not in last, again
        assert "[masked" in last
        listed = parent.data("list_sessions", {"mine": True})
        assert [s["pane"] for s in listed["sessions"]] == [child_pane], listed
        assert listed["sessions"][0]["last_message"] == last, listed
        idle_in_directory(daemon, child_pane)


def panes(daemon: RunningDaemon) -> set[str]:
    return {p["pane"] for p in cli_json(daemon, "directory")["panes"]}


def test_refused_calls_open_no_pane_or_worktree_reach_no_pane_and_say_why(
    tmp_path: Path, stub: StubModel, tmux: TmuxServer
) -> None:
    project = make_repo(tmp_path / "project")
    trees = tmp_path / "trees"
    parent_harness = make_claude(tmp_path / "a", stub, project)
    watcher_harness = make_claude(tmp_path / "w", stub, project)
    child_harness = make_claude(tmp_path / "b", stub, project)
    yolo = claude_launcher(child_harness)
    yolo["argv"] = [*yolo["argv"], "--dangerously-skip-permissions"]
    extra: dict[str, dict[str, Any]] = {
        "tmux": {"socket": str(tmux.socket)},
        "sessions": {"worktrees_root": str(trees)},
        "launchers.parent": claude_launcher(parent_harness),
        "launchers.watcher": claude_launcher(watcher_harness),
        "launchers.child": claude_launcher(child_harness),
        "launchers.yolo": yolo,
    }
    (tmp_path / "d").mkdir()
    with running_daemon(tmp_path / "d", extra) as daemon:
        a = launch(daemon, "parent", project)
        w = cli_json(daemon, "launch", "watcher", "--preset", "observe", "--cwd", str(project))
        tmux.wait_for(a["pane"], CLAUDE_IDLE, timeout=60)
        tmux.wait_for(w["pane"], CLAUDE_IDLE, timeout=60)
        parent = Parent(tmux, stub, a["pane"])
        watcher = Parent(tmux, stub, w["pane"])
        before = all_panes(tmux)

        outside = parent.call("start_session", {"prompt": "x", "cwd": "/usr"}, attempts=20)
        assert "ask the user" in outside, outside
        full = parent.call("start_session", {"prompt": "x", "launcher": "yolo"})
        assert "approvals and sandbox off" in full, full
        read = parent.call("read_session", {"session": w["pane"]})
        assert "is not in your family" in read, read
        sent = parent.call("send_to_session", {"session": w["pane"], "text": "SHOULD-NOT-TYPE"})
        assert "is not in your family" in sent, sent

        started = parent.data(
            "start_session",
            {"prompt": "never", "title": "declined", "worktree": True, "launcher": "child"},
        )
        assert started["state"] == "waiting_for_consent", started
        [card] = cli_json(daemon, "cards")["cards"]
        daemon.cli("decline", card["id"], check=True)
        declined = parent.data("read_session", {"session": started["start"], "wait_seconds": 20})
        assert declined["state"] == "declined", declined
        assert declined["reason"] == "the human declined the start", declined

        watcher.data("list_panes", {}, attempts=20)  # once Claude Code has connected
        observe = watcher.call("start_session", {"prompt": "x"})
        assert '"source":"openbus' not in observe, observe  # the tool is not offered at all
        assert "No such tool available: mcp__openbus__start_session" in observe, observe

        assert all_panes(tmux) == before
        assert not trees.exists()
        assert cli_json(daemon, "cards")["cards"] == []
        assert "SHOULD-NOT-TYPE" not in tmux.capture(w["pane"])
        assert "[openbus message" not in tmux.capture(w["pane"])
        records = cli_json(daemon, "audit", "tail", "-n", "500")["records"]
        refused = [
            (r["action"], r["details"].get("message", ""))
            for r in records
            if r["action"].startswith("session.") and r["outcome"] == "refused"
        ]
        assert [action for action, _ in refused] == [
            "session.start",
            "session.start",
            "session.read",
            "session.send",
        ], refused
        assert "ask the user" in refused[0][1]
        assert "approvals and sandbox off" in refused[1][1]
        assert all("not in your family" in message for _, message in refused[2:])
        starts = [
            r for r in records if r["action"] == "session.start" and r["outcome"] != "refused"
        ]
        assert [r["outcome"] for r in starts] == ["card"], starts
        assert not [r for r in records if r["action"] == "session.launch"]
        by_watcher = [r for r in records if r["actor"] == w["connect"]["actor"]]
        assert not [r for r in by_watcher if r["action"].startswith("session.")], by_watcher


def all_panes(tmux: TmuxServer) -> set[str]:
    return set(tmux.run("list-panes", "-a", "-F", "#{pane_id}").split())


@pytest.mark.parametrize(("parent_kind", "child_kind"), [("codex", "claude"), ("claude", "codex")])
def test_a_parent_of_one_harness_starts_and_reads_a_child_of_the_other(
    tmp_path: Path, stub: StubModel, tmux: TmuxServer, parent_kind: str, child_kind: str
) -> None:
    project = make_repo(tmp_path / "project")
    launchers = {}
    for role, kind in (("parent", parent_kind), ("child", child_kind)):
        if kind == "claude":
            launchers[role] = claude_launcher(make_claude(tmp_path / role, stub, project))
        else:
            launchers[role] = codex_launcher(make_codex(tmp_path / role, stub, project))
    extra: dict[str, dict[str, Any]] = {"tmux": {"socket": str(tmux.socket)}}
    for role, values in launchers.items():
        extra[f"launchers.{role}"] = values
    (tmp_path / "d").mkdir()
    with running_daemon(tmp_path / "d", extra) as daemon:
        a = launch(daemon, "parent", project)
        if parent_kind == "codex":
            wait_for_codex_ready(tmux, a["pane"], timeout=60)
        else:
            tmux.wait_for(a["pane"], CLAUDE_IDLE, timeout=60)
        parent = Parent(
            tmux, stub, a["pane"], CODEX_IDLE if parent_kind == "codex" else CLAUDE_IDLE
        )
        refused = parent.call("start_session", {"prompt": "x", "cwd": "/usr"}, attempts=20)
        assert "ask the user" in refused, refused  # the daemon's reason reaches the model
        stub.script(reply(PONG), match="PING-CHILD")
        brief = "Reply with exactly: pong from the child session. (PING-CHILD)"
        started = parent.data("start_session", {"prompt": brief, "launcher": "child"})
        assert started["state"] == "waiting_for_consent", started
        [card] = cli_json(daemon, "cards")["cards"]
        daemon.cli("approve", card["id"], check=True)
        read = parent.wait_read(started["start"])
        if not read["replies"]:  # what the child shows, for the failure report
            print(read, tmux.capture(read["pane"]), cli_json(daemon, "messages"), sep="\n")
        assert read["harness"] == child_kind, read
        assert [r["text"] for r in read["replies"]] == [PONG], read
