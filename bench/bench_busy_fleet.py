"""Busy fleet benchmark: real Claude Code and Codex TUIs busy among 200 printing panes.

One private tmux server holds 200 synthetic panes (10 sessions x 20 windows, each printing a
line a second) and ``AGENTS`` real harness TUIs (half Claude Code, half Codex, the pinned
versions in use) against the stub model (``tests.support.stub_model``), each held busy on a
turn (``hold()``: the response stream stays open, the TUI's spinner runs). Measured in one run:

1. CPU while every agent is busy: the real daemon (its process group: arbiter, worker, tmux
   control clients) plus the tmux server, against a 1 Hz poll of the same panes (``list-panes
   -a`` plus one chained ``capture-pane`` of every pane, per second, as subprocesses: poll +
   children + tmux server). Both have the tmux server's cost with no follower at all (the TUIs
   and printers drawing) taken off, measured in windows alternating with the poll's before the
   daemon starts; the daemon's windows follow once its directory is full. Printed in total and
   per busy agent.
2. Readings: ``GET /api/directory`` every 100 ms; every agent should read ``busy`` while its
   turn is held and ``idle`` once released. Three phases: held (from before the daemon starts),
   released, held again (prompted anew). A sample within ``GRACE`` of the agent's own
   transition (its release, its Enter) is not counted; every other wrong sample is counted and
   printed. Goal: 0.

Run: ``.venv/bin/python -m bench.bench_busy_fleet`` (or ``make bench``); needs ``make
harnesses`` (a harness not installed is skipped, and the bench with none).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_directory import WINDOW_SECONDS, Floor, Tmux, _cpu_of, _group, _ticker  # noqa: E402
from tests.support.daemon import start_daemon  # noqa: E402
from tests.support.harnesses import (  # noqa: E402
    CLAUDE_IDLE,
    make_claude,
    make_codex,
    pin,
    submit_prompt,
    wait_for_codex_ready,
    workdir,
)
from tests.support.stub_model import Script, StubModel, hold, reply, running_stub_model  # noqa: E402
from tests.support.tmux import TmuxServer, tmux_server  # noqa: E402
from tests.support.wait import wait_until  # noqa: E402

AGENTS = int(os.environ.get("OPENBUS_BUSY_AGENTS", "6"))
PRINTERS = 200
SESSIONS = 10

ROUNDS = 2
SAMPLE_EVERY = 0.1
GRACE = 0.3  # a sample this soon after the agent's own transition is not counted
PHASE_SECONDS = 10.0
BUSY = "esc to interrupt"  # both harnesses' footer while a turn runs
SPLIT = "=openbus-bench-split="
SAMPLED: list[float] = []  # the mean time between samples, per phase


class Agent:
    def __init__(self, name: str, pane: str) -> None:
        self.name = name
        self.pane = pane
        self.turn: Script | None = None
        self.since = 0.0  # when its screen last changed between busy and idle (monotonic)
        self.expect = ""  # what its screen shows: busy or idle


def _printers(server: TmuxServer, flag: Path) -> None:
    per_session = PRINTERS // SESSIONS
    for s in range(SESSIONS):
        server.session(f"p{s}", _ticker(flag, s * per_session))
        for w in range(1, per_session):
            server.run("new-window", "-d", "-t", f"p{s}:", *_ticker(flag, s * per_session + w))


def _agents(root: Path, stub: StubModel, server: TmuxServer) -> list[Agent]:
    agents: list[Agent] = []
    for n in range(AGENTS):
        name = "claude" if n % 2 == 0 else "codex"
        if pin(name).binary is None:
            continue
        cwd = workdir(root, f"agent{n}")
        subprocess.run(["git", "init", "-q", str(cwd)], check=True)
        maker = make_claude if name == "claude" else make_codex
        harness = maker(root / f"agent{n}", stub, cwd)
        pane = server.new_window(harness.tui_argv(), harness.env(), cwd, remain_on_exit=True)
        agents.append(Agent(f"{name}-{n}", pane))
    for agent in agents:
        if agent.name.startswith("claude"):
            server.wait_for(agent.pane, CLAUDE_IDLE, timeout=120)
        else:
            wait_for_codex_ready(server, agent.pane, timeout=120)
    return agents


def _prompt(server: TmuxServer, stub: StubModel, agents: list[Agent], round_: int) -> None:
    for agent in agents:
        words = f"busy turn {round_} for {agent.name}"
        agent.turn = stub.script(hold(), reply(f"done {round_}"), match=words)
        submit_prompt(server, agent.pane, words)
    for agent in agents:
        assert agent.turn is not None
        agent.turn.wait_holding(timeout=60)


def _release(agents: list[Agent]) -> None:
    for agent in agents:
        if agent.turn is not None:
            agent.turn.release()


def _window(pids: list[int]) -> float:
    before = _cpu_of(pids)
    time.sleep(WINDOW_SECONDS)
    return (_cpu_of(pids) - before) / WINDOW_SECONDS * 1000


def _screens(tmux: Tmux, agents: list[Agent]) -> list[str]:
    """The agents' screens now, in one chained tmux command."""
    argv: list[str] = []
    for agent in agents:
        argv += ["capture-pane", "-p", "-t", agent.pane, ";", "display-message", "-p", SPLIT, ";"]
    out = subprocess.run(tmux.argv(*argv[:-1]), capture_output=True, text=True, check=False).stdout
    return out.split(SPLIT + "\n")


def _sample(
    client: object, tmux: Tmux, agents: list[Agent], seconds: float, wrong: Counter[str]
) -> tuple[int, list[str]]:
    """Every ``SAMPLE_EVERY`` for ``seconds``: each agent's screen (busy while it shows the
    harness's busy footer) and the daemon's reading of it; a reading other than the screen
    counts as wrong once the screen has shown the same for ``GRACE``."""
    get = client.get  # type: ignore[attr-defined]
    samples = rounds = 0
    shown: list[str] = []
    started = time.monotonic()
    end = started + seconds
    while (now := time.monotonic()) < end:
        screens = _screens(tmux, agents)
        states = {p["pane"]: p["state"] for p in get("/api/directory").json()["panes"]}
        for agent, screen in zip(agents, screens, strict=False):
            truth = "busy" if BUSY in screen else "idle"
            if truth != agent.expect:
                agent.expect, agent.since = truth, now
            if now - agent.since < GRACE:
                continue
            samples += 1
            state = states.get(agent.pane, "absent")
            if state != truth:
                wrong[agent.name] += 1
                if len(shown) < 10:
                    why = get("/api/panes/" + quote(agent.pane, safe="")).json()["explain"]
                    shown.append(
                        f"{agent.name} {agent.pane} read {state} while its screen has shown "
                        f"{truth} for {now - agent.since:.1f}s (rule {why['rule']}: "
                        f"{why['evidence'].get('status_file')})"
                    )
        time.sleep(max(0.0, now + SAMPLE_EVERY - time.monotonic()))
        rounds += 1
    SAMPLED.append((time.monotonic() - started) / max(rounds, 1))
    return samples, shown


def main() -> None:
    if pin("claude").binary is None and pin("codex").binary is None:
        print("no Claude Code or Codex installed (make harnesses): skipped")
        return
    with (
        tempfile.TemporaryDirectory(prefix="obbusy-", ignore_cleanup_errors=True) as tmp,
        running_stub_model() as stub,
        tmux_server(Path(tmp) / "tmux") as server,
    ):
        root = Path(tmp)
        flag = root / "print"
        _printers(server, flag)
        agents = _agents(root, stub, server)
        tmux = Tmux(server.socket.parent)
        server_pid = int(server.run("display-message", "-p", "#{pid}").strip())
        panes = server.run("list-panes", "-a", "-F", "#{pane_id}").split()
        floor = Floor(tmux, server_pid)
        flag.touch()
        _prompt(server, stub, agents, 1)
        load_before = os.getloadavg()
        base_ms: list[float] = []
        poll_ms: list[float] = []
        for _ in range(ROUNDS):  # no follower, then the poll, alternating
            base_ms.append(_window([server_pid]))
            poll_ms.append(floor.poll_window())
        (root / "d").mkdir()
        daemon = start_daemon(root / "d", {"tmux": {"socket": str(server.socket)}})
        wrong: Counter[str] = Counter()
        shown: list[str] = []
        samples = 0
        try:
            with daemon.human(timeout=60) as client:
                wait_until(
                    lambda: len(client.get("/api/directory").json()["panes"]) >= len(panes),
                    timeout=120,
                    what="all panes in the directory",
                )
                time.sleep(2.0)  # the first captures settle
                ours_ms: list[float] = []
                server_ms: list[float] = []
                for _ in range(ROUNDS):
                    before_server = _cpu_of([server_pid])
                    ours_ms.append(_window([*_group(daemon.process.pid), server_pid]))
                    server_ms.append(
                        (_cpu_of([server_pid]) - before_server) / WINDOW_SECONDS * 1000
                    )
                load_after = os.getloadavg()
                for phase in ("held", "released", "held again"):
                    if phase == "released":
                        _release(agents)
                    elif phase == "held again":
                        _prompt(server, stub, agents, 2)
                    n, lines = _sample(client, tmux, agents, PHASE_SECONDS, wrong)
                    samples += n
                    shown += lines
        finally:
            daemon.stop()
            _release(agents)
            flag.unlink(missing_ok=True)

    base = statistics.median(base_ms)
    ours = statistics.median(ours_ms) - base
    poll = statistics.median(poll_ms) - base
    busy = len(agents)
    kinds = Counter(a.name.split("-")[0] for a in agents)
    print(
        f"fleet: {busy} busy agents ({', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))}) "
        f"among {PRINTERS} panes printing 1 line/s; load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after the CPU windows"
    )
    print(
        f"CPU with every agent busy, above the tmux server with no follower ({base:.1f} ms/s): "
        f"ours (daemon + tmux) {ours:.1f} ms/s ({ours / busy:.1f} per busy agent) vs a 1 Hz "
        f"poll of the same {len(panes)} panes {poll:.1f} ms/s ({poll / busy:.1f} per busy "
        f"agent): ratio {ours / poll:.2f}; windows ours "
        f"{', '.join(f'{x:.0f}' for x in ours_ms)}, poll {', '.join(f'{x:.0f}' for x in poll_ms)}, "
        f"no follower {', '.join(f'{x:.0f}' for x in base_ms)}"
    )
    total_ours, total_poll = statistics.median(ours_ms), statistics.median(poll_ms)
    print(
        f"  totals with the tmux server (the TUIs' and printers' own drawing included): ours "
        f"{total_ours:.1f} ms/s vs the poll {total_poll:.1f} ms/s: ratio "
        f"{total_ours / total_poll:.2f} (the difference above is small beside load swings)"
    )
    server = statistics.median(server_ms) - base
    print(
        f"  of ours, the tmux server {server:.1f} ms/s above no follower, the daemon "
        f"{ours - server:.1f} ms/s"
    )
    total = sum(wrong.values())
    print(
        f"readings: {samples} agent samples, one a {SAMPLE_EVERY * 1000:.0f} ms or as answered "
        f"(mean {statistics.mean(SAMPLED) * 1000:.0f} ms) "
        f"(held, released, held again; each against the agent's screen, {GRACE * 1000:.0f} ms "
        f"after its screen turned not counted): {total} wrong "
        f"(goal 0){': ' + ', '.join(f'{k} {v}' for k, v in sorted(wrong.items())) if total else ''}"
    )
    for line in shown:
        print(f"  {line}")


if __name__ == "__main__":
    main()
