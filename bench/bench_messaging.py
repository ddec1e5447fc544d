"""Messaging benchmarks, each against its floor measured in the same run.

1. ``send_message`` to ``delivered`` on an idle pane (an approved pair, a fake agent pane on a
   real tmux server, the daemon's real gate, audit, directory, watcher and delivery engine),
   p50 and p95, against the floor of raw ``tmux send-keys`` of the same text plus
   ``capture-pane`` until the text shows. Target: <= 3x the floor.
2. Refusals before admission (a character-set refusal through the gate, each audited):
   rate, and the daemon's memory before and after. Target: >= 5,000/s, memory flat.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from openbus.daemon import compose  # noqa: E402
from openbus.daemon.config import parse_config  # noqa: E402
from openbus.daemon.messaging.fleet import normalize  # noqa: E402
from openbus.kernel.clock import SystemClock, SystemRandom  # noqa: E402
from openbus.kernel.errors import Refused  # noqa: E402
from tests.daemon.messaging.conftest import World  # noqa: E402
from tests.support.tmux import TmuxServer, tmux_server  # noqa: E402

ROUNDS = 40
FLOOD = 20_000
RATE_STEP = 7.0  # seconds skipped per round: under 10 a minute per pair
TEXT = "bench message: please look at the failing test in billing and report back"


def rss_kib() -> int:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") // 1024


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def floor_round(w: World, pane: str, n: int) -> float:
    text = f"floor {n} {TEXT}"
    base = [w.server.binary, "-S", str(w.server.socket)]
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(*base, "send-keys", "-t", pane, "-l", text)
    await proc.wait()
    while True:
        cap = await asyncio.create_subprocess_exec(
            *base, "capture-pane", "-p", "-t", pane, stdout=subprocess.PIPE
        )
        out, _ = await cap.communicate()
        if text in out.decode():
            break
    elapsed = time.perf_counter() - started
    w.server.keys(pane, "C-u")
    return elapsed


async def settled(w: World, pane: str) -> None:
    """Idle with an empty composer, and the directory has caught up with the screen."""

    def ready() -> bool:
        entry = w._idle_entry(pane)
        return bool(entry) and entry.text == normalize(w.server.capture(pane))

    await w.until(ready, f"{pane} settled")


class SkewClock(SystemClock):
    """The system clock, which the bench may move forward (never back)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return super().now() + self.offset

    def monotonic(self) -> float:
        return super().monotonic() + self.offset

    def skip(self, seconds: float) -> None:
        self.offset += seconds


async def scenario(w: World, clock: SkewClock) -> None:
    a, b = await w.agent("a"), await w.agent("b")
    (b.control / "turn").write_text("0")
    floor_pane = await w.agent("floor", preset=None)
    # the pair is approved once, as a human would
    await w.send(a, b, "hello", "warm-0")
    card = await w.until(lambda: w.messaging.book.get(a.principal or "", "warm-0").card_id, "card")
    await w.decide(card, "approve_pair")
    assert await w.final(a, "warm-0") == "delivered"

    sends: list[float] = []
    floors: list[float] = []
    for n in range(ROUNDS):
        clock.skip(RATE_STEP)  # stay under the pair's rate limit (the latency is what we measure)
        await settled(w, b.pane)
        started = time.perf_counter()
        await w.send(a, b, f"{n} {TEXT}", f"m-{n}")
        outcome = await w.final(a, f"m-{n}")
        sends.append(time.perf_counter() - started)
        assert outcome == "delivered", outcome
        await settled(w, floor_pane.pane)
        floors.append(await floor_round(w, floor_pane.pane, n))

    p50, p95 = statistics.median(sends), pct(sends, 0.95)
    f50, f95 = statistics.median(floors), pct(floors, 0.95)
    print(f"send_message -> delivered: p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms")
    print(f"floor send-keys + capture: p50 {f50 * 1000:.1f} ms, p95 {f95 * 1000:.1f} ms")
    print(f"ratio p50 {p50 / f50:.2f}x, p95 {p95 / f95:.2f}x (target <= 3x)")

    book = w.messaging.book
    before_fp = book.footprint()
    assert a.actor is not None
    bad = {"target": b.pane, "incarnation": b.incarnation, "text": "x\x1b[2J"}
    for i in range(500):  # warm the path and SQLite's page cache
        with contextlib.suppress(Refused):
            await w.gate.run(a.actor, "message.send", {**bad, "message_id": f"w{i}"})
    before = rss_kib()
    started = time.perf_counter()
    middle = before
    for i in range(FLOOD):
        with contextlib.suppress(Refused):
            await w.gate.run(a.actor, "message.send", {**bad, "message_id": f"f{i}"})
        if i == FLOOD // 2:
            middle = rss_kib()
    elapsed = time.perf_counter() - started
    after = rss_kib()
    rate = FLOOD / elapsed
    print(
        f"refusals before admission: {rate:,.0f}/s over {FLOOD:,} (target >= 5,000/s, "
        f"ratio {rate / 5000:.2f}x)"
    )
    print(
        f"memory: RSS {before / 1024:.1f} MiB -> {after / 1024:.1f} MiB "
        f"({(after - before) / 1024:+.1f} MiB; second half {(after - middle) / 1024:+.1f} MiB); "
        "book " + ("unchanged" if before_fp == book.footprint() else "CHANGED")
    )


def run_world(
    root: Path,
    server: TmuxServer,
    scenario: Callable[[World, SkewClock], Awaitable[None]],
    **config: dict[str, Any],
) -> None:
    """The real daemon's composition over ``server`` (state under ``root``, a clock the bench
    may move forward), running ``scenario`` in its loop; ``config`` adds config sections."""
    parsed = parse_config(
        {
            "daemon": {"state_dir": str(root / "state"), "socket": str(root / "d.sock")},
            "tmux": {"socket": str(server.socket)},
            "history": {"claude_config_dirs": [], "codex_homes": []},
            **config,
        },
        "<bench>",
    )

    async def run() -> None:
        clock = SkewClock()
        daemon = compose.build(parsed, clock=clock, random=SystemRandom())
        await daemon.start()
        try:
            await scenario(World(daemon, server, root), clock)
        finally:
            await daemon.stop()

    asyncio.run(run())


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="obmsg-") as tmp:
        root = Path(tmp)
        with tmux_server(root / "tmux") as server:
            # the flood measures the messaging refusals themselves, not the gate's rate limit
            # that would answer an agent refused this often
            run_world(root, server, scenario, audit={"agent_refusal_burst": 10 * FLOOD})


if __name__ == "__main__":
    main()
