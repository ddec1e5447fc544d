"""The daemon at fleet scale: start-up and memory with 200 panes and a 100,000-session index.

A private tmux server with 200 panes (10 sessions x 20 windows, each a shell loop that prints
a line a second while a flag file exists) and a 100,000-session history index (the seeded
corpus of ``bench_history``, written into the daemon's state directory before it starts, its
entries screened for the agents' masker as a running daemon keeps them).

1. Start-up: from spawning ``openbus serve`` until ``/healthz`` answers and ``/api/directory``
   lists every pane, against the floor of the same interpreter importing the daemon's modules
   (the CLI, gunicorn, the app) and opening the same index (a count of its sessions), the two
   measured alternately ``STARTS`` times each; medians and their ratio (target <= 1.5).
2. Memory: the daemon's RSS (gunicorn arbiter + worker) once ready, against a bare
   ``python -c "import openbus.daemon.app"`` (goal <= 150 MiB total).
3. Soak: every pane printing a line a second while a client searches the history and reads
   the directory (one ``find_sessions`` and one ``GET /api/directory`` a second) for
   ``SOAK_SECONDS`` (10 minutes; ``OPENBUS_BENCH_SOAK_SECONDS`` or ``--soak SECONDS`` for
   another length); RSS sampled every ``SAMPLE_SECONDS``: growth from the first sample after
   the first tenth of the soak (warm) to the last (target <= 5 %).

Run: ``.venv/bin/python -m bench.bench_daemon_scale [--soak SECONDS]`` (or ``make bench``).
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
from pathlib import Path

from bench.bench_directory import (
    PANES,
    Tmux,
    _bare_import_rss,
    _cpu_of,
    _fleet,
    _group,
    _is_python,
)
from bench.bench_directory import _rss_mib as rss_mib
from bench.bench_history import SEED, Corpus, fill_index
from openbus.daemon.history.index import DB_NAME, HistoryIndex
from openbus.daemon.history.sources import Sources
from openbus.daemon.mcp.masking import masker
from openbus.kernel.clock import SystemClock
from tests.support.daemon import RunningDaemon, start_daemon
from tests.support.wait import wait_until

SESSIONS_IN_INDEX = 100_000
STARTS = 3
SOAK_SECONDS = 600.0
SAMPLE_SECONDS = 10.0

FLOOR_SCRIPT = """
import sys
import gunicorn.app.wsgiapp, openbus.daemon.cli, openbus.daemon.app
from pathlib import Path
from openbus.daemon.history.store import HistoryStore
store = HistoryStore(Path(sys.argv[1]))
assert store.count() > 0
store.close()
"""


def soak_seconds(argv: list[str]) -> float:
    """``--soak SECONDS`` on the command line, else ``OPENBUS_BENCH_SOAK_SECONDS``, else ten
    minutes."""
    if "--soak" in argv:
        return float(argv[argv.index("--soak") + 1])
    return float(os.environ.get("OPENBUS_BENCH_SOAK_SECONDS", SOAK_SECONDS))


def _rss(daemon: RunningDaemon) -> float:
    return rss_mib([p for p in _group(daemon.process.pid) if _is_python(p)])


def _screen(index: Path) -> None:
    """The index's entries screened for the agents' masker, as a running daemon keeps them
    (its pass after each reconcile): a daemon started on it has nothing left to screen."""
    history = HistoryIndex(index, Sources(), clock=SystemClock(), screen=masker())
    try:
        history.screen_pass()
    finally:
        history.close()


def _start(root: Path, run: int, socket: Path, index: Path) -> tuple[RunningDaemon, float, float]:
    """A daemon on a copy of ``index``; seconds from spawn until it is ready (healthz and
    every pane in the directory), and the CPU seconds its processes spent by then."""
    home = root / f"d{run}"
    (home / "state").mkdir(parents=True)
    shutil.copyfile(index, home / "state" / DB_NAME)
    env = {"HOME": str(home / "home")}  # no transcripts of this host's own harnesses
    t0 = time.perf_counter()
    daemon = start_daemon(home, {"tmux": {"socket": str(socket)}}, env=env)
    with daemon.human(timeout=30) as client:
        wait_until(
            lambda: len(client.get("/api/directory").json()["panes"]) >= PANES,
            timeout=120,
            interval=0.01,
            what="every pane in the directory",
        )
    return daemon, time.perf_counter() - t0, _cpu_of(_group(daemon.process.pid))


def _floor(index: Path) -> tuple[float, float]:
    """Seconds and CPU seconds of one interpreter importing the daemon's modules and opening
    the index."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", FLOOR_SCRIPT, str(index)], check=True)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def _soak(daemon: RunningDaemon, flag: Path, seconds: float, queries: list[str]) -> list[float]:
    """RSS samples (MiB) every ``SAMPLE_SECONDS`` while every pane prints and a client
    searches and reads the directory once a second."""
    flag.touch()
    samples: list[float] = []
    started = time.monotonic()
    next_sample = started
    tick = 0
    try:
        with daemon.human(timeout=30) as client:
            while (now := time.monotonic()) - started < seconds:
                if now >= next_sample:
                    samples.append(_rss(daemon))
                    next_sample += SAMPLE_SECONDS
                query = queries[tick % len(queries)]
                found = client.get("/api/history/search", params={"q": query})
                assert found.status_code == 200, found.text
                assert client.get("/api/directory").status_code == 200
                tick += 1
                time.sleep(max(0.0, started + tick - time.monotonic()))
        samples.append(_rss(daemon))
    finally:
        flag.unlink(missing_ok=True)
    return samples


def main(argv: list[str] | None = None) -> None:
    soak = soak_seconds(sys.argv[1:] if argv is None else argv)
    root = Path(tempfile.mkdtemp(prefix="obscale-"))
    tmux = Tmux(root)
    flag = root / "print"
    try:
        index = root / "index.db"
        t0 = time.perf_counter()
        fill_index(index, SESSIONS_IN_INDEX, SEED)
        _screen(index)
        size = sum(p.stat().st_size for p in root.glob("index.db*")) / 2**20
        print(
            f"{SESSIONS_IN_INDEX:,}-session index ({size:.0f} MiB) built in "
            f"{time.perf_counter() - t0:.0f}s"
        )
        _fleet(tmux, flag)
        ours: list[tuple[float, float]] = []
        floor: list[tuple[float, float]] = []
        daemon: RunningDaemon | None = None
        for run in range(STARTS):  # alternately: both see the same host
            floor.append(_floor(index))
            daemon, seconds, cpu = _start(root, run, tmux.socket, index)
            ours.append((seconds, cpu))
            if run < STARTS - 1:
                daemon.stop()
        assert daemon is not None
        try:
            time.sleep(2.0)  # the first captures settle
            ready_rss = _rss(daemon)
            corpus = Corpus(SEED)
            queries = [corpus.query() for _ in range(50)]
            samples = _soak(daemon, flag, soak, queries)
        finally:
            daemon.stop()
    finally:
        subprocess.run(tmux.argv("kill-server"), capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)

    ours_s, floor_s = (statistics.median(x for x, _ in runs) for runs in (ours, floor))
    ours_cpu, floor_cpu = (statistics.median(c for _, c in runs) for runs in (ours, floor))
    ratio = ours_s / floor_s
    print(
        f"start-up to ready (/healthz and {PANES} panes in the directory), "
        f"{SESSIONS_IN_INDEX:,}-session index: ours {ours_s:.2f}s vs importing the daemon's "
        f"modules and opening the index {floor_s:.2f}s: ratio {ratio:.2f} "
        f"(target <= 1.5: {'met' if ratio <= 1.5 else 'MISSED'}); CPU by then ours "
        f"{ours_cpu:.2f}s (arbiter, worker, tmux clients) vs {floor_cpu:.2f}s: ratio "
        f"{ours_cpu / floor_cpu:.2f}; runs ours {', '.join(f'{x:.2f}' for x, _ in ours)}, "
        f"floor {', '.join(f'{x:.2f}' for x, _ in floor)}"
    )
    bare = _bare_import_rss()
    print(
        f"memory: daemon RSS (arbiter + worker) {ready_rss:.0f} MiB with {PANES} panes and a "
        f"{SESSIONS_IN_INDEX:,}-session index vs a bare python importing openbus.daemon.app "
        f"{bare:.0f} MiB (ratio {ready_rss / bare:.2f}; goal <= 150 MiB total: "
        f"{'met' if ready_rss <= 150 else 'MISSED'})"
    )
    warm = samples[min(len(samples) - 1, max(1, len(samples) // 10))]
    growth = (samples[-1] / warm - 1) * 100
    print(
        f"soak {soak:.0f}s (every pane printing, 1 search + 1 directory read a second): RSS "
        f"{samples[0]:.0f} MiB at the start, {warm:.0f} warm, {samples[-1]:.0f} at the end, "
        f"max {max(samples):.0f}: growth {growth:+.1f} % "
        f"(target <= 5 %: {'met' if growth <= 5 else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
