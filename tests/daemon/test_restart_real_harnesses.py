"""Restart-to-connect and restore with the real daemon and the real TUIs against the stub model.

An agent launched with preset Off holds a conversation; ``openbus connect PANE --preset
observe`` raises the card "Restart this agent to connect it?"; once approved, the agent quits
through its own exit command and resumes the same session in the same pane: the pane id and
the session id stay, the earlier turns are still in the transcript, and the agent now lists
the openbus tools and calls one. A draft in the composer holds the restart until it is
cleared. Killing the tmux server with connected agents and running ``openbus restore`` brings
each session back with its grant, able to call a tool again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon.core.restart import Step
from openbus.daemon.launch_proc import identity_of
from tests.support.daemon import RunningDaemon, restart_daemon, running_daemon, start_daemon
from tests.support.harnesses import (
    CLAUDE_IDLE,
    ClaudeHarness,
    CodexHarness,
    make_claude,
    make_codex,
    submit_prompt,
    wait_for_codex_ready,
)
from tests.support.stub_model import StubModel, call_tool, reply
from tests.support.tmux import TmuxServer
from tests.support.wait import wait_until

pytestmark = [pytest.mark.harness, pytest.mark.timeout(300)]


def cli_json(daemon: RunningDaemon, *args: str) -> Any:
    return json.loads(daemon.cli(*args, "--json", check=True).stdout)


def audit(daemon: RunningDaemon) -> list[dict[str, Any]]:
    return daemon.audit()


def restart_records(daemon: RunningDaemon) -> list[dict[str, Any]]:
    """The open restart records, read from the state database as the daemon left them."""
    with sqlite3.connect(f"file:{daemon.state_dir / 'openbus.db'}?mode=ro", uri=True) as conn:
        return [json.loads(r[0]) for r in conn.execute("SELECT record FROM restarts")]


def tmux_crashes() -> list[str]:
    """The kernel log's tmux segfault lines (none where the log cannot be read)."""
    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line for line in done.stdout.splitlines() if "tmux" in line and "segfault" in line]


def directory_entry(daemon: RunningDaemon, pane: str) -> Any:
    for entry in cli_json(daemon, "directory")["panes"]:
        if entry["pane"] == pane:
            return entry
    return None


class Agent:
    """One harness in a pane: how it is launched, waited for, and where its transcript is."""

    def __init__(self, harness: ClaudeHarness | CodexHarness, tmux: TmuxServer) -> None:
        self.harness = harness
        self.tmux = tmux
        self.kind = "claude" if isinstance(harness, ClaudeHarness) else "codex"

    @property
    def launcher(self) -> dict[str, Any]:
        return {"harness": self.kind, "argv": [str(self.harness.binary)], "env": self.harness.env()}

    def ready(self, pane: str) -> None:
        if self.kind == "claude":
            self.tmux.wait_for(pane, CLAUDE_IDLE, absent=["esc to interrupt"], timeout=60)
        else:
            wait_for_codex_ready(self.tmux, pane, timeout=60)

    def transcript(self, session_id: str) -> str:
        if isinstance(self.harness, ClaudeHarness):
            found = (self.harness.config_dir / "projects").glob(f"*/{session_id}.jsonl")
            return "".join(path.read_text() for path in found)
        return "".join(p.read_text() for p in self.harness.rollouts() if session_id in p.name)


def converse(agent: Agent, stub: StubModel, pane: str, word: str) -> None:
    script = stub.script(reply(f"ANSWER-{word}"), match=word)
    agent.ready(pane)
    submit_prompt(agent.tmux, pane, f"please say {word}")
    script.wait_finished(timeout=60)
    agent.tmux.wait_for(pane, f"ANSWER-{word}", timeout=60)


def calls_an_openbus_tool(agent: Agent, stub: StubModel, pane: str, word: str) -> str:
    """The agent lists the openbus tools and calls one (retried while its MCP connects)."""
    result = ""
    for attempt in range(15):
        go = f"{word}-{attempt}"
        script = stub.script(
            call_tool("mcp__openbus__list_panes", {}), reply("LISTED {tool_result}"), match=go
        )
        agent.ready(pane)
        submit_prompt(agent.tmux, pane, f"please run {go}")
        script.wait_finished(timeout=90)
        result = script.last_tool_result or ""
        if '"panes"' in result:
            turn = next(t for t in stub.turns() if go in t.prompt)
            assert "mcp__openbus__list_panes" in turn.offered_tools
            return result
    raise AssertionError(f"no openbus tool result: {result}\n{agent.tmux.capture(pane)}")


def session_of(agent: Agent, daemon: RunningDaemon, launched: dict[str, Any]) -> str:
    if launched.get("session_id"):
        return str(launched["session_id"])
    # Codex reports its session only in the rollout it holds open: the daemon binds it then

    def bound() -> str | None:
        for record in audit(daemon):
            if record["action"] == "launch.bind" and record["target"] == launched["pane"]:
                return str(record["details"]["session_id"])
        return None

    return wait_until(bound, timeout=60, what="the launch bound to its session")


def restart_to_connect(
    tmp_path: Path,
    stub: StubModel,
    project: Path,
    tmux: TmuxServer,
    harness: ClaudeHarness | CodexHarness,
    *,
    draft: bool = False,
) -> None:
    agent = Agent(harness, tmux)
    extra = {"tmux": {"socket": str(tmux.socket)}, "launchers.agent": agent.launcher}
    (tmp_path / "d").mkdir()
    with running_daemon(tmp_path / "d", extra) as daemon:
        launched = cli_json(daemon, "launch", "agent", "--preset", "off", "--cwd", str(project))
        pane = launched["pane"]
        assert launched["connect"]["connected"] is False
        converse(agent, stub, pane, "FIRST-TURN")
        session_id = session_of(agent, daemon, launched)
        wait_until(
            lambda: "ANSWER-FIRST-TURN" in agent.transcript(session_id),
            timeout=30,
            what=f"the first turn in session {session_id}'s transcript",
        )
        wait_until(
            lambda: (directory_entry(daemon, pane) or {}).get("composer_empty") is True,
            timeout=30,
            what="the idle pane in the directory",
        )

        offered = cli_json(daemon, "connect", pane, "--preset", "observe")
        assert offered["restart"]["summary"] == "Restart this agent to connect it?"
        cards = cli_json(daemon, "cards")["cards"]
        assert [c["kind"] for c in cards] == ["restart_to_connect"]
        if draft:  # the human is typing when the tap comes: the restart waits
            tmux.send_text(pane, "half a thought")
            wait_until(
                lambda: directory_entry(daemon, pane)["composer_empty"] is False,
                timeout=30,
                what="the draft in the directory",
            )
        daemon.cli("approve", cards[0]["id"], check=True)
        if draft:
            health = wait_until(
                lambda: (h := daemon_health(daemon))["restarts"]["running"] == 1 and h,
                timeout=30,
                what="the restart waiting",
            )
            assert health["restarts"]["done"] == 0
            assert restart_records(daemon) == []  # nothing was touched: no record yet
            assert directory_entry(daemon, pane)["pid"] == launched["pid"]
            assert "half a thought" in tmux.capture(pane)
            tmux.keys(pane, *(["BSpace"] * len("half a thought")))

        def done() -> dict[str, Any] | None:
            for record in audit(daemon):
                if record["action"] == "restart.done":
                    return record
            return None

        closed = wait_until(done, timeout=120, what="the restart to finish")
        assert closed["details"]["outcome"] == "connected", closed
        assert restart_records(daemon) == []
        steps = [r["details"]["step"] for r in audit(daemon) if r["action"] == "restart.step"]
        assert steps[:1] == ["planned"] and steps[-3:] == ["respawned", "restored", "bound"]
        assert tmux.run("show-options", "-p", "-v", "-t", pane, "remain-on-exit").strip() == ""

        connections = connections_of(daemon)
        assert [(c["pane"], c["preset"]) for c in connections] == [(pane, "observe")]
        assert connections[0]["actor"] == f"agent:{agent.kind}:{session_id}"
        calls_an_openbus_tool(agent, stub, pane, "AFTER-RESTART")
        wait_until(
            lambda: "AFTER-RESTART" in agent.transcript(session_id),
            timeout=30,
            what="the new turn in the same transcript",
        )
        assert "ANSWER-FIRST-TURN" in agent.transcript(session_id)


def connections_of(daemon: RunningDaemon) -> list[dict[str, Any]]:
    with daemon.human() as client:
        found: list[dict[str, Any]] = client.get("/api/connections").json()["connections"]
    return found


def daemon_health(daemon: RunningDaemon) -> dict[str, Any]:
    with daemon.human() as client:
        body: dict[str, Any] = client.get("/healthz").json()
    return body


def test_a_claude_launched_off_is_restarted_onto_its_session_and_connected(
    tmp_path: Path, stub: StubModel, project: Path, tmux: TmuxServer
) -> None:
    restart_to_connect(tmp_path, stub, project, tmux, make_claude(tmp_path / "c", stub, project))


def test_a_draft_in_claudes_composer_holds_the_restart_until_it_is_cleared(
    tmp_path: Path, stub: StubModel, project: Path, tmux: TmuxServer
) -> None:
    claude = make_claude(tmp_path / "c", stub, project)
    restart_to_connect(tmp_path, stub, project, tmux, claude, draft=True)


def test_a_codex_launched_off_is_restarted_onto_its_session_and_connected(
    tmp_path: Path, stub: StubModel, project: Path, tmux: TmuxServer
) -> None:
    restart_to_connect(tmp_path, stub, project, tmux, make_codex(tmp_path / "x", stub, project))


def restore_after_the_server_is_killed(
    tmp_path: Path, stub: StubModel, project: Path, tmux: TmuxServer, agents: list[Agent]
) -> None:
    """Launch each agent connected (preset observe), hold a turn, kill the tmux server, run
    ``openbus restore``: each session comes back in its own pane with its grant and calls an
    openbus tool; nothing is offered twice and a stray pane gets no grant."""
    extra: dict[str, dict[str, Any]] = {"tmux": {"socket": str(tmux.socket)}}
    for i, agent in enumerate(agents):
        extra[f"launchers.agent{i}"] = agent.launcher
    (tmp_path / "d").mkdir()
    with running_daemon(tmp_path / "d", extra) as daemon:
        launched = [
            cli_json(daemon, "launch", f"agent{i}", "--preset", "observe", "--cwd", str(project))
            for i in range(len(agents))
        ]
        for i, one in enumerate(launched):
            converse(agents[i], stub, one["pane"], f"BEFORE-{i}")
        session_ids = [session_of(agents[i], daemon, one) for i, one in enumerate(launched)]
        for i, session_id in enumerate(session_ids):
            # a harness writes a turn to its transcript after it shows it: a server killed
            # before that leaves a session it refuses to resume (Claude Code: "No conversation
            # found")
            wait_until(
                lambda i=i, session_id=session_id: (
                    f"ANSWER-BEFORE-{i}" in agents[i].transcript(session_id)
                ),
                timeout=60,
                what=f"agent{i}'s turn in its transcript",
            )
        sessions = {
            session_id: one["connect"]["principal"]
            for session_id, one in zip(session_ids, launched, strict=True)
        }
        assert all(sessions.values()), launched
        agent_of = dict(zip(session_ids, agents, strict=True))
        old_panes = {one["pane"] for one in launched}

        agents_before = {one["pid"]: identity_of(one["pid"]) for one in launched}
        crashes_before = tmux_crashes()
        tmux.run("kill-server", check=False)
        # each agent ends on its lost server's hangup, not at once (measured: a Claude Code
        # still running under load when the listing came): one still running is not lost yet,
        # and restore does not resume a session beside its running process
        for pid, before in agents_before.items():
            wait_until(
                lambda pid=pid, before=before: identity_of(pid) != before,
                timeout=60,
                what=f"agent process {pid} to end with its tmux server",
            )
        listed = cli_json(daemon, "restore", "--dry-run")
        assert sorted(s["session_id"] for s in listed["sessions"]) == sorted(sessions)
        assert {s["preset"] for s in listed["sessions"]} == {"observe"}
        assert listed["restored"] == []

        answer = daemon.cli("restore", "--json")
        restored = json.loads(answer.stdout)["restored"]
        assert answer.returncode == 0 and all(r["ok"] for r in restored), restored
        assert {r["session_id"]: r["principal"] for r in restored} == sessions  # same grants
        assert {r["session_id"]: r["harness"] for r in restored} == {
            session_id: agent.kind for session_id, agent in agent_of.items()
        }
        assert len({r["pane"] for r in restored}) == len(agents)
        # the server the restore started, by pid and start time: what the known intermittent
        # below is told apart by
        server = identity_of(int(tmux.run("display-message", "-p", "#{pid}").strip()))
        assert server is not None
        for r in restored:  # an agent that exits leaves its last screen for the failure message
            tmux.run("set-option", "-p", "-t", r["pane"], "remain-on-exit", "on", check=False)
        records = [r for r in audit(daemon) if r["action"] == "session.resume"]
        assert sorted(r["details"]["session_id"] for r in records) == sorted(sessions)
        assert all(r["details"].get("rejoined") for r in records)
        assert cli_json(daemon, "restore", "--dry-run")["sessions"] == []  # nothing twice

        try:
            for i, r in enumerate(restored):
                agent = agent_of[r["session_id"]]
                calls_an_openbus_tool(agent, stub, r["pane"], f"RESTORED-{i}")
                assert f"ANSWER-BEFORE-{agents.index(agent)}" in agent.transcript(r["session_id"])
        except (AssertionError, RuntimeError):
            if identity_of(server.pid) != server:
                # seen in 1 of 21 loaded runs of the three-Claude test before the watcher's
                # all-panes subscription (which crashed tmux 3.3a when a control client's
                # session went away) was replaced by per-window ones: the whole new server went
                # away seconds into the restore. Since that fix: 3 runs of the three-Claude test
                # and 8 of both restore tests at load averages 5-22 beside other tmux-heavy test
                # runs, none lost its server and the kernel logged no tmux segfault. Tolerated
                # only once the restore has answered and only when that server is gone; the
                # message carries any tmux segfault the kernel logged meanwhile, which tells a
                # tmux crash (e.g. the `clients_calculate_size` one seen once) from an exit
                crashed = [line for line in tmux_crashes() if line not in crashes_before]
                pytest.xfail(
                    f"known intermittent: the restored tmux server {server} exited; "
                    f"tmux segfaults in the kernel log meanwhile: {crashed or 'none'}"
                )
            raise
        connections = connections_of(daemon)
        connected = {c["pane"] for c in connections}
        assert connected == {r["pane"] for r in restored}
        assert {c["actor"] for c in connections} == {
            f"agent:{agent.kind}:{session_id}" for session_id, agent in agent_of.items()
        }
        # a pane opened by hand on the new server, maybe under an old pane's id, gets no grant
        stray = tmux.run("new-window", "-d", "-P", "-F", "#{pane_id}", "sleep 600").strip()
        assert stray not in connected
        wait_until(lambda: directory_entry(daemon, stray), timeout=10, what="the stray pane")
        refused = daemon.cli("connect", stray, "--preset", "observe")
        assert refused.returncode != 0 and "runs no coding agent" in refused.stderr
        assert not any(c["pane"] in old_panes - connected for c in connections_of(daemon))


def test_restore_brings_back_three_connected_claudes_after_the_tmux_server_is_killed(
    tmp_path: Path, stub: StubModel, project: Path, tmux: TmuxServer
) -> None:
    # three profiles (own config dirs): three Claude Code TUIs starting at the same instant on
    # one config dir lost one of them now and then, whoever started them
    agents = [Agent(make_claude(tmp_path / f"c{i}", stub, project), tmux) for i in range(3)]
    restore_after_the_server_is_killed(tmp_path, stub, project, tmux, agents)


def test_restore_brings_back_connected_codexes_beside_a_claude_after_the_tmux_server_is_killed(
    tmp_path: Path, stub: StubModel, project: Path, tmux: TmuxServer
) -> None:
    # each Codex its own CODEX_HOME (its rollouts, its session ids), as each Claude its config
    agents = [Agent(make_claude(tmp_path / "c0", stub, project), tmux)]
    agents += [Agent(make_codex(tmp_path / f"x{i}", stub, project), tmux) for i in (1, 2)]
    restore_after_the_server_is_killed(tmp_path, stub, project, tmux, agents)


def kill_during_a_restart(
    daemon: RunningDaemon, tmux: TmuxServer, pane: str, target: str
) -> RunningDaemon:
    """Approve a restart of ``pane`` and SIGKILL the daemon once its record is at ``target``
    (``respawning``: the resumed process runs but the record does not say so yet), or as soon
    as it is seen past it; start the daemon again and wait until it has finished the record.
    Killed at ``planned`` or ``held`` the agent still runs: it is left alone, the option put
    back, and the next round restarts it again."""
    if connections_of(daemon):  # connected by an earlier round: off, to restart it again
        daemon.cli("connect", pane, "--preset", "off", check=True)
    wait_until(
        lambda: (directory_entry(daemon, pane) or {}).get("composer_empty") is True,
        timeout=60,
        what="the idle pane in the directory",
    )
    before = tmux.pane_field(pane, "pane_pid")
    card = cli_json(daemon, "connect", pane, "--preset", "observe")["restart"]["card"]
    daemon.cli("approve", card, check=True)
    order = [step.value for step in Step]
    seen: list[str] = []

    def reached() -> bool:
        records = restart_records(daemon)
        if not records:
            return bool(seen)  # it went past the target between two looks: kill now anyway
        step = records[0]["step"]
        seen.append(step)
        if target == "respawning":
            if step != "exited" or not records[0].get("principal"):
                return order.index(step) > order.index("exited")
            return tmux.pane_field(pane, "pane_pid") not in ("", before)
        return order.index(step) >= order.index(target)

    wait_until(reached, timeout=60, interval=0.005, what=f"the restart at {target}")
    os.killpg(daemon.process.pid, signal.SIGKILL)
    again = restart_daemon(daemon, signal.SIGKILL)
    wait_until(lambda: restart_records(again) == [], timeout=60, what="the record finished")
    return again


@pytest.mark.timeout(480)  # six rounds, four of them a restart of the real TUI
def test_a_daemon_killed_at_each_step_of_a_restart_leaves_no_pane_dead_and_no_record_open(
    tmp_path: Path, stub: StubModel, project: Path, tmux: TmuxServer
) -> None:
    agent = Agent(make_claude(tmp_path / "c", stub, project), tmux)
    extra = {"tmux": {"socket": str(tmux.socket)}, "launchers.agent": agent.launcher}
    (tmp_path / "d").mkdir()
    daemon = start_daemon(tmp_path / "d", extra)
    try:
        launched = cli_json(daemon, "launch", "agent", "--preset", "off", "--cwd", str(project))
        pane = launched["pane"]
        converse(agent, stub, pane, "BEFORE-ANY")
        targets = ("planned", "held", "exiting", "exited", "respawning", "respawned")
        for target in targets:
            daemon = kill_during_a_restart(daemon, tmux, pane, target)
            info = tmux.run("display-message", "-p", "-t", pane, "#{pane_dead}").strip()
            assert info == "0", f"{pane} left dead after a kill at {target}"
            option = tmux.run("show-options", "-p", "-v", "-t", pane, "remain-on-exit")
            assert option.strip() == "", f"remain-on-exit kept after a kill at {target}"
            converse(agent, stub, pane, f"AFTER-{target.upper()}")  # the conversation goes on
        done = [r["details"]["outcome"] for r in audit(daemon) if r["action"] == "restart.done"]
        assert len(done) == len(targets), done
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(daemon.process.pid, signal.SIGKILL)
        daemon.process.wait(timeout=30)
