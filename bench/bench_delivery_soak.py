"""Delivery soak: many messages to each real harness TUI, idle between them.

For each pinned harness version (every pin of Claude Code, Codex, OpenCode, omp and Gemini CLI
in the Makefile's ``HARNESS_PINS``; ``OPENBUS_SOAK_PINS`` names some instead, e.g.
``claude-2.1.332,opencode-1.18.33``), the real daemon's composition (gate, audit, directory,
watcher, delivery engine) runs over a private tmux server where a fake agent sends
``OPENBUS_SOAK_MESSAGES`` (default 200) messages, one at a time, to the real harness TUI
running against the stub model, launched and configured as the real-harness tests do
(``tests.support.harnesses``, ``tests.support.more_harnesses``). The recipient is granted
Collaborate by the bench itself (as the messaging tests do): OpenCode and omp cannot be
connected through the product (``launch_plan.UNAVAILABLE``), so outside a bench no message can
be addressed to them; what is measured for them is the typing, the confirming and the screen
reading alone. The pair is approved once, as a human would. Each message waits for the
recipient to be idle with an empty composer, then ``message.send`` and its final outcome, then
the model's turn.

Printed per harness: delivered / unconfirmed / other outcomes; doubles (a delivered message
whose text reached the model in more than one turn, or twice in one), lost (never reached the
model), mangled (reached it only other than whole) and drafts touched (a composer left holding
text after a delivery). Goal: every message delivered, 0 of each of the others.

Run: ``.venv/bin/python -m bench.bench_delivery_soak`` (or ``make bench``); needs ``make
harnesses``. A harness not installed is skipped with the reason.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_messaging import SkewClock, run_world, settled  # noqa: E402
from tests.daemon.messaging.conftest import World  # noqa: E402
from tests.support.harnesses import (  # noqa: E402
    PINS,
    Pin,
    make_claude,
    make_codex,
    pin,
    submit_prompt,
    workdir,
)
from tests.support.more_harnesses import EXIT, NAMES, make_harness  # noqa: E402
from tests.support.stub_model import StubModel, running_stub_model  # noqa: E402
from tests.support.tmux import TmuxServer, tmux_server  # noqa: E402
from tests.support.wait import async_wait_until, wait_until  # noqa: E402

MESSAGES = int(os.environ.get("OPENBUS_SOAK_MESSAGES", "200"))
RATE_STEP = 7.0  # seconds the clock skips per message: under the pair's rate limit
TEXT = "soak {n}: please look at the failing billing test and report back when done"


def _pins() -> list[Pin]:
    words = [w.strip() for w in os.environ.get("OPENBUS_SOAK_PINS", "").split(",") if w.strip()]
    if not words:
        return list(PINS)
    return [pin(name, version) for name, _, version in (w.partition("-") for w in words)]


def _launch(found: Pin, root: Path, stub: StubModel, server: TmuxServer) -> str:
    cwd = workdir(root, f"project-{found.id}")
    subprocess.run(["git", "init", "-q", str(cwd)], check=True)
    if found.name == "claude":
        claude = make_claude(root / found.id, stub, cwd, found.version)
        return server.new_window(claude.tui_argv(), claude.env(), cwd, remain_on_exit=True)
    if found.name == "codex":
        codex = make_codex(root / found.id, stub, cwd, found.version)
        return server.new_window(codex.tui_argv(), codex.env(), cwd, remain_on_exit=True)
    name = next(n for n in NAMES if n == found.name)
    other = make_harness(name, root / found.id, stub, cwd, found.version)
    return server.new_window(other.tui_argv(), other.env(), cwd, remain_on_exit=True)


def _quit(found: Pin, server: TmuxServer, pane: str) -> None:
    """Quit the harness the way a person does (Gemini CLI outlives its tmux server's SIGHUP)."""
    if server.pane_dead(pane):
        return
    command = {"claude": "/exit", "codex": "/quit", **EXIT}[found.name]
    try:
        submit_prompt(server, pane, command)
        wait_until(lambda: server.pane_dead(pane), timeout=30, what=f"{found.id} to quit")
    except AssertionError as exc:
        print(f"  {found.id} did not quit ({exc}): its process group is ended", flush=True)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pane_pid(pane), signal.SIGTERM)


async def soak(w: World, clock: SkewClock, stub: StubModel, found: Pin, pane: str) -> None:
    sender = await w.agent("sender")
    recipient = await w.adopt(found.id, pane, w.root, timeout=90)
    outcomes: collections.Counter[str] = collections.Counter()
    faults: dict[str, list[str]] = {"double": [], "lost": [], "mangled": [], "draft": []}
    started = time.monotonic()
    for n in range(MESSAGES):
        clock.skip(RATE_STEP)
        await settled(w, pane)
        text = TEXT.format(n=n)
        await w.send(sender, recipient, text, f"soak-{n}")
        if n == 0:  # the pair's first message asks the human; approved once
            card = await w.until(
                lambda: w.messaging.book.get(sender.principal or "", "soak-0").card_id, "card"
            )
            await w.decide(card, "approve_pair")
        outcome = await w.final(sender, f"soak-{n}")
        outcomes[outcome] += 1
        if outcome != "delivered":
            reason = (await w.status(sender, f"soak-{n}")).get("reason")
            print(f"  {n}: {outcome} ({reason}); screen:\n{w.server.capture(pane)}", flush=True)
            continue
        tag = f"soak {n}:"

        def turns(tag: str = tag) -> list[str]:
            return [t.prompt for t in stub.turns() if tag in t.prompt]

        async def turned() -> list[str]:
            return turns()

        try:
            await async_wait_until(turned, timeout=30, what=f"message {n} at the model")
        except AssertionError:
            faults["lost"].append(f"{n}: never reached the model")
            continue
        await settled(w, pane)
        seen = turns()
        if len(seen) != 1 or seen[0].count(tag) != 1:
            faults["double"].append(f"{n}: reached the model in {len(seen)} turns")
        elif text not in seen[0]:
            faults["mangled"].append(f"{n}: reached the model as {seen[0][-200:]!r}")
        if w.directory.entry(pane).reading.composer_empty is not True:
            faults["draft"].append(f"{n}: the composer kept text after the turn")
    elapsed = time.monotonic() - started
    others = {k: v for k, v in outcomes.items() if k not in ("delivered", "unconfirmed")}
    print(
        f"{found.id}: {MESSAGES} messages in {elapsed:.0f} s: delivered {outcomes['delivered']}, "
        f"unconfirmed {outcomes['unconfirmed']}, other {others or 0}, "
        f"doubles {len(faults['double'])}, lost {len(faults['lost'])}, "
        f"mangled {len(faults['mangled'])}, drafts touched {len(faults['draft'])} "
        f"(goal: {MESSAGES} delivered, 0 of the rest)",
        flush=True,
    )
    for kind, lines in faults.items():
        for line in lines[:5]:
            print(f"  {kind}: {line}", flush=True)


def run_one(found: Pin) -> None:
    if found.binary is None:
        print(f"{found.id}: not installed (make harnesses); skipped")
        return
    # a harness may still be writing its config as its tmux server goes: cleanup is best effort
    with tempfile.TemporaryDirectory(prefix="obsoak-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        with running_stub_model() as stub, tmux_server(root / "tmux") as server:
            pane = _launch(found, root, stub, server)

            async def scenario(w: World, clock: SkewClock) -> None:
                await soak(w, clock, stub, found, pane)

            try:
                run_world(root, server, scenario)
            finally:
                _quit(found, server, pane)


def main() -> None:
    for found in _pins():
        run_one(found)


if __name__ == "__main__":
    main()
