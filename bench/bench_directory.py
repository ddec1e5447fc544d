"""Directory benchmark: the watcher's cost per change, at 200 panes, through the real daemon.

Starts a private tmux server with 200 panes (10 sessions x 20 windows) and the real daemon
(gunicorn worker, control-mode watcher) following it, then measures in one run:

1. idle: daemon (its whole process group, incl. tmux control clients) + tmux server CPU per
   second while no pane prints, over 60 s (target <= 2 ms/s);
2. load: every pane prints a line a second; the same CPU, against the floor of any follower
   by ``%output`` on a twin server of the same 200 panes (the tmux server and one bare control
   client per session that only receive ``%output``: no captures, no parsing; target <= 1.2x)
   and a 1 Hz poll of the twin's panes (``list-panes -a`` plus one chained ``capture-pane`` of
   all 200 panes, per second, as subprocesses: poll + children + tmux server). The three are
   measured in alternating windows (ours, floor, poll; ``ROUNDS`` times), only the measured
   server's panes printing, so a busy host weighs on all three alike. Each output burst
   delivered to a control client costs the server extra event-loop passes over every pane,
   whatever the number of clients, so the floor is above the poll when every pane prints
   every second;
3. change-to-``/api/panes`` latency p95 under that load (target <= 300 ms);
4. ``GET /api/directory`` p50 with 200 panes (target <= 2 ms), audit record included.

Run: ``.venv/bin/python -m bench.bench_directory`` (or ``make bench``).
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from openbus.daemon.directory_probe import WALK_EVERY
from openbus.daemon.directory_service import EVIDENCE_EVERY
from tests.support.daemon import start_daemon
from tests.support.wait import wait_until

PANES = 200
POLL_FORMAT = "#{pane_id} #{pane_pid} #{pane_current_command} #{pane_current_path} #{pane_title}"
SESSIONS = 10
WINDOW_SECONDS = 5.0
ROUNDS = 3
# CPU time read from the scheduler's own account (ns), not in 10 ms ticks, over two of the
# watcher's 30 s safety checks: a shorter window weighs one check or none, by its phase
IDLE_SECONDS = 60.0
TICKS = os.sysconf("SC_CLK_TCK")


def _sum_over(pids: list[int], name: str, field: Callable[[bytes], int]) -> int:
    """One number read from ``/proc/<pid>/<name>``, summed over processes (gone ones skipped)."""
    total = 0
    for pid in pids:
        try:
            raw = Path(f"/proc/{pid}/{name}").read_bytes()
        except OSError:
            continue
        total += field(raw)
    return total


def _ticks(stat: bytes) -> int:
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def _rss_kib(status: bytes) -> int:
    return next((int(x.split()[1]) for x in status.splitlines() if x.startswith(b"VmRSS:")), 0)


def _cpu_of(pids: list[int]) -> float:
    return _sum_over(pids, "stat", _ticks) / TICKS


def _run_ns(stat: bytes) -> int:
    return int(stat.split()[0])


def _cpu_exact(pids: list[int]) -> float:
    """CPU seconds of processes as the scheduler counts them (``/proc/<pid>/task/*/schedstat``,
    nanoseconds): 10 ms ticks sampled over a 20 s window of ~2 ms/s put the figure 1 ms/s
    either way. Threads that ended during the window are not counted."""
    total = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        total += _sum_over([int(t) for t in tasks], "schedstat", _run_ns)
    return total / 1e9


def _group(root: int) -> list[int]:
    """``root`` and all its descendants (the daemon, its worker and its tmux control clients)."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        parent[int(name)] = int(raw[raw.rfind(b")") + 2 :].split()[1])
    out = [root]
    for pid in parent:
        cursor = pid
        while cursor in parent and cursor > 1:
            cursor = parent[cursor]
            if cursor == root:
                out.append(pid)
                break
    return out


class Tmux:
    def __init__(self, root: Path) -> None:
        self.socket = root / "sock"
        self.binary = shutil.which("tmux") or "tmux"

    def argv(self, *args: str) -> list[str]:
        return [self.binary, "-S", str(self.socket), "-f", "/dev/null", *args]

    def run(self, *args: str) -> str:
        return subprocess.run(self.argv(*args), capture_output=True, text=True, check=True).stdout


def _ticker(flag: Path, index: int) -> list[str]:
    offset = f"0.{index % 100:02d}"
    script = (
        f"sleep {offset}; while :; do if [ -e {flag} ]; then echo tick {index}; fi; sleep 1; done"
    )
    return ["sh", "-c", script]


def _rss_mib(pids: list[int]) -> float:
    return _sum_over(pids, "status", _rss_kib) / 1024


def _bare_import_rss() -> float:
    """RSS of a bare interpreter that imports the daemon's app module (the memory floor)."""
    script = (
        "import openbus.daemon.app, pathlib\n"
        "print(next(l for l in pathlib.Path('/proc/self/status').read_text().splitlines()"
        " if l.startswith('VmRSS:')).split()[1])"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return int(out.stdout.strip()) / 1024


def _is_python(pid: int) -> bool:
    """The daemon's own processes (the arbiter and its worker), not its tmux clients."""
    try:
        return "python" in os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False


def _fleet(tmux: Tmux, flag: Path) -> int:
    """200 ticker panes in ``SESSIONS`` sessions; the server's pid."""
    per_session = PANES // SESSIONS
    for s in range(SESSIONS):
        first = _ticker(flag, s * per_session)
        tmux.run("new-session", "-d", "-s", f"s{s}", "-x", "120", "-y", "40", *first)
        for w in range(1, per_session):
            tmux.run("new-window", "-d", "-t", f"s{s}:", *_ticker(flag, s * per_session + w))
    return int(tmux.run("display-message", "-p", "#{pid}").strip())


class Floor:
    """The twin server's followers: bare control clients (the floor) or the 1 Hz poll."""

    def __init__(self, tmux: Tmux, server_pid: int) -> None:
        self.tmux = tmux
        self.server_pid = server_pid
        self.sessions = tmux.run("list-sessions", "-F", "#{session_id}").split()
        panes = tmux.run("list-panes", "-a", "-F", "#{pane_id}").split()
        self.chained: list[str] = []
        for pane in panes:
            self.chained += ["capture-pane", "-p", "-t", pane, ";"]

    def bare_window(self) -> float:
        """ms/s of the tmux server plus one bare control client per session draining its
        ``%output``: what tmux itself spends to tell any follower of changes."""
        bare = [
            subprocess.Popen(
                self.tmux.argv("-C", "attach-session", "-f", "ignore-size", "-t", session),
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
            )
            for session in self.sessions
        ]
        time.sleep(1.0)
        pids = [self.server_pid, *(p.pid for p in bare)]
        before = _cpu_of(pids)
        time.sleep(WINDOW_SECONDS)
        used = (_cpu_of(pids) - before) / WINDOW_SECONDS * 1000
        for proc in bare:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()
        return used

    def poll_window(self) -> float:
        """ms/s of a 1 Hz poll (list-panes + one chained capture of every pane) + the server."""
        tmux = self.tmux
        before_server = _cpu_of([self.server_pid])
        usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self0 = time.process_time()
        started = time.monotonic()
        for tick in range(int(WINDOW_SECONDS)):
            subprocess.run(
                tmux.argv("list-panes", "-a", "-F", POLL_FORMAT), capture_output=True, check=True
            )
            subprocess.run(tmux.argv(*self.chained[:-1]), capture_output=True, check=True)
            time.sleep(max(0.0, started + tick + 1 - time.monotonic()))
        elapsed = time.monotonic() - started
        usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (
            (usage1.ru_utime - usage0.ru_utime)
            + (usage1.ru_stime - usage0.ru_stime)
            + (time.process_time() - self0)
            + (_cpu_of([self.server_pid]) - before_server)
        )
        return cpu / elapsed * 1000


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="obbench-"))
    (root / "ours").mkdir()
    (root / "twin").mkdir()
    tmux = Tmux(root / "ours")
    twin = Tmux(root / "twin")
    flag = root / "print"
    twin_flag = root / "print-twin"
    try:
        server_pid = _fleet(tmux, flag)
        twin_pid = _fleet(twin, twin_flag)
        probe = tmux.run("new-window", "-d", "-t", "s0:", "-P", "-F", "#{pane_id}", "cat").strip()
        floor = Floor(twin, twin_pid)
        (root / "d").mkdir()
        daemon = start_daemon(root / "d", {"tmux": {"socket": str(tmux.socket)}})
        ours_ms: list[float] = []
        server_ms: list[float] = []
        floor_ms: list[float] = []
        poll_ms: list[float] = []
        try:
            with daemon.human() as client:
                wait_until(
                    lambda: len(client.get("/api/directory").json()["panes"]) == PANES + 1,
                    timeout=120,
                    what="all panes in the directory",
                )
                # the initial captures settle, and the walks below launchers' processes they
                # put off are paid (every pane here runs a script): idle is what follows
                time.sleep(2.0 + WALK_EVERY + EVIDENCE_EVERY)

                def ours() -> float:
                    return _cpu_of([*_group(daemon.process.pid), server_pid])

                idle_pids = [*_group(daemon.process.pid), server_pid]
                before = _cpu_exact(idle_pids)
                time.sleep(IDLE_SECONDS)
                idle_ms = (_cpu_exact(idle_pids) - before) / IDLE_SECONDS * 1000

                for _ in range(ROUNDS):  # ours, the floor and the poll in alternating windows
                    flag.touch()
                    time.sleep(2.0)
                    before, before_server = ours(), _cpu_of([server_pid])
                    time.sleep(WINDOW_SECONDS)
                    ours_ms.append((ours() - before) / WINDOW_SECONDS * 1000)
                    server_ms.append(
                        (_cpu_of([server_pid]) - before_server) / WINDOW_SECONDS * 1000
                    )
                    flag.unlink()
                    twin_flag.touch()
                    time.sleep(1.0)
                    floor_ms.append(floor.bare_window())
                    poll_ms.append(floor.poll_window())
                    twin_flag.unlink()
                rss = _rss_mib([p for p in _group(daemon.process.pid) if _is_python(p)])
                flag.touch()  # the latency is measured with every pane printing
                time.sleep(2.0)

                latencies: list[float] = []
                path = "/api/panes/" + quote(probe, safe="")
                for n in range(40):
                    marker = f"mark{n}x{os.getpid()}"
                    subprocess.run(tmux.argv("send-keys", "-t", probe, marker, "Enter"), check=True)
                    sent = time.monotonic()
                    while marker not in client.get(path).json()["summary"]:
                        if time.monotonic() - sent > 5:
                            break
                        time.sleep(0.005)
                    latencies.append(time.monotonic() - sent)
                    time.sleep(0.1)
                p95 = statistics.quantiles(latencies, n=20)[-1] * 1000

                samples: list[float] = []
                for _ in range(300):
                    t0 = time.perf_counter()
                    response = client.get("/api/directory")
                    samples.append(time.perf_counter() - t0)
                    assert response.status_code == 200
                get_p50 = statistics.median(samples) * 1000
        finally:
            daemon.stop()
    finally:
        for server in (tmux, twin):
            subprocess.run(
                [server.binary, "-S", str(server.socket), "kill-server"],
                capture_output=True,
                check=False,
            )
        shutil.rmtree(root, ignore_errors=True)

    load = statistics.median(ours_ms)
    server = statistics.median(server_ms)
    floor_med = statistics.median(floor_ms)
    poll = statistics.median(poll_ms)
    print(f"panes: {PANES} (+1 probe pane), {SESSIONS} sessions; {ROUNDS} alternating rounds")
    print(f"idle: daemon + tmux CPU {idle_ms:.2f} ms/s (target <= 2 ms/s; ratio {idle_ms / 2:.2f})")
    print(
        f"every pane printing 1 line/s: ours {load:.1f} ms/s vs the %output floor "
        f"(tmux server + {SESSIONS} bare control clients) {floor_med:.1f} ms/s: "
        f"ratio {load / floor_med:.2f} (target <= 1.2); windows ours "
        f"{', '.join(f'{x:.0f}' for x in ours_ms)}, floor {', '.join(f'{x:.0f}' for x in floor_ms)}"
    )
    print(
        f"  of ours, the tmux server {server:.1f} ms/s, the daemon {load - server:.1f} ms/s; "
        f"1 Hz poll of the same panes {poll:.1f} ms/s (ours / poll {load / poll:.2f})"
    )
    bare_rss = _bare_import_rss()
    print(
        f"memory: daemon RSS (arbiter + worker) {rss:.0f} MiB with {PANES} panes, empty history "
        f"index, vs a bare python importing openbus.daemon.app {bare_rss:.0f} MiB "
        f"(ratio {rss / bare_rss:.2f}; goal <= 150 MiB total)"
    )
    print(
        f"change -> /api/panes latency p95 {p95:.0f} ms (target <= 300 ms; ratio {p95 / 300:.2f})"
    )
    print(
        f"GET /api/directory p50 {get_p50:.2f} ms with {PANES + 1} panes "
        f"(target <= 2 ms; ratio {get_p50 / 2:.2f})"
    )


if __name__ == "__main__":
    main()
