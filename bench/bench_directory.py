"""Directory benchmark: the watcher's cost per change, at 200 panes, through the real daemon.

Starts a private tmux server with 200 panes (10 sessions x 20 windows) and the real daemon
(gunicorn worker, control-mode watcher) following it, then measures in one run:

1. idle: daemon (its whole process group, incl. tmux control clients) + tmux server CPU per
   second while no pane prints, over 20 s (target <= 2 ms/s);
2. load: every pane prints a line a second; the same CPU, against a 1 Hz poll measured right
   after on the same panes (``list-panes -a`` plus one chained ``capture-pane`` of all 200
   panes, per second, as subprocesses: poll + children + tmux server) (target: <= the poll);
   plus the floor of any follower by ``%output``: the tmux server and one bare control
   client per session that only receive ``%output`` (no captures, no parsing). Each output
   burst delivered to a control client costs the server extra event-loop passes over every
   pane, whatever the number of clients (measured: one session of 200 panes with one client
   costs the same), so this floor is above the poll when every pane prints every second;
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
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from tests.support.daemon import start_daemon
from tests.support.wait import wait_until

PANES = 200
POLL_FORMAT = "#{pane_id} #{pane_pid} #{pane_current_command} #{pane_current_path} #{pane_title}"
SESSIONS = 10
WINDOW_SECONDS = 10.0
IDLE_SECONDS = 20.0  # CPU time moves in 10 ms ticks: a longer window resolves 0.5 ms/s
TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_of(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            raw = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
    return total / TICKS


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


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="obbench-"))
    tmux = Tmux(root)
    flag = root / "print"
    try:
        per_session = PANES // SESSIONS
        for s in range(SESSIONS):
            tmux.run(
                "new-session",
                "-d",
                "-s",
                f"s{s}",
                "-x",
                "120",
                "-y",
                "40",
                *_ticker(flag, s * per_session),
            )
            for w in range(1, per_session):
                tmux.run("new-window", "-d", "-t", f"s{s}:", *_ticker(flag, s * per_session + w))
        probe = tmux.run("new-window", "-d", "-t", "s0:", "-P", "-F", "#{pane_id}", "cat").strip()
        server_pid = int(tmux.run("display-message", "-p", "#{pid}").strip())
        (root / "d").mkdir()
        daemon = start_daemon(root / "d", {"tmux": {"socket": str(tmux.socket)}})
        try:
            with daemon.human() as client:
                wait_until(
                    lambda: len(client.get("/api/directory").json()["panes"]) == PANES + 1,
                    timeout=60,
                    what="all panes in the directory",
                )
                time.sleep(2.0)  # initial captures settle

                def ours() -> float:
                    return _cpu_of([*_group(daemon.process.pid), server_pid])

                before = ours()
                time.sleep(IDLE_SECONDS)
                idle_ms = (ours() - before) / IDLE_SECONDS * 1000

                flag.touch()
                time.sleep(2.0)
                group = _group(daemon.process.pid)
                parts0 = {pid: _cpu_of([pid]) for pid in [*group, server_pid]}
                before = ours()
                time.sleep(WINDOW_SECONDS)
                load_ms = (ours() - before) / WINDOW_SECONDS * 1000
                server_ms = (_cpu_of([server_pid]) - parts0[server_pid]) / WINDOW_SECONDS * 1000

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

        # the floor of following by %output: one bare control client per session draining
        # its output (no captures, no parsing): what tmux itself spends to tell us of changes
        sessions = tmux.run("list-sessions", "-F", "#{session_id}").split()
        bare = [
            subprocess.Popen(
                tmux.argv("-C", "attach-session", "-f", "ignore-size", "-t", session),
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
            )
            for session in sessions
        ]
        time.sleep(1.0)
        pids = [server_pid, *(p.pid for p in bare)]
        before = _cpu_of(pids)
        time.sleep(WINDOW_SECONDS)
        floor_ms = (_cpu_of(pids) - before) / WINDOW_SECONDS * 1000
        for proc in bare:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()

        # the 1 Hz poll on the same printing panes
        panes = [line for line in tmux.run("list-panes", "-a", "-F", "#{pane_id}").split()]
        chained: list[str] = []
        for pane in panes:
            chained += ["capture-pane", "-p", "-t", pane, ";"]
        before_server = _cpu_of([server_pid])
        usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self0 = time.process_time()
        started = time.monotonic()
        for tick in range(int(WINDOW_SECONDS)):
            subprocess.run(
                tmux.argv(
                    "list-panes",
                    "-a",
                    "-F",
                    POLL_FORMAT,
                ),
                capture_output=True,
                check=True,
            )
            subprocess.run(tmux.argv(*chained[:-1]), capture_output=True, check=True)
            time.sleep(max(0.0, started + tick + 1 - time.monotonic()))
        elapsed = time.monotonic() - started
        usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        poll_cpu = (
            (usage1.ru_utime - usage0.ru_utime)
            + (usage1.ru_stime - usage0.ru_stime)
            + (time.process_time() - self0)
            + (_cpu_of([server_pid]) - before_server)
        )
        poll_ms = poll_cpu / elapsed * 1000
    finally:
        subprocess.run(
            [tmux.binary, "-S", str(tmux.socket), "kill-server"], capture_output=True, check=False
        )
        shutil.rmtree(root, ignore_errors=True)

    print(f"panes: {PANES} (+1 probe pane), {SESSIONS} sessions")
    print(f"idle: daemon + tmux CPU {idle_ms:.2f} ms/s (target <= 2 ms/s; ratio {idle_ms / 2:.2f})")
    print(
        f"every pane printing 1 line/s: ours {load_ms:.1f} ms/s vs 1 Hz poll {poll_ms:.1f} ms/s "
        f"(ratio {load_ms / poll_ms:.2f}; target <= 1)"
    )
    print(
        f"  of which the tmux server: {server_ms:.1f} ms/s, "
        f"the daemon {load_ms - server_ms:.1f} ms/s"
    )
    print(
        f"  floor: tmux server + {SESSIONS} bare control clients only receiving %output: "
        f"{floor_ms:.1f} ms/s (ratio to the poll {floor_ms / poll_ms:.2f})"
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
