"""Delivery soak: many messages to the real Claude Code and Codex TUIs, each idle between them.

For each harness (the pinned version in use; ``OPENBUS_SOAK_PINS`` names the pins instead,
e.g. ``claude-2.1.332,codex-0.171.0``), the real daemon's composition (gate, audit, directory,
watcher, delivery engine) runs over a private tmux server where a fake agent sends
``OPENBUS_SOAK_MESSAGES`` (default 200) messages, one at a time, to the real harness TUI
running against the stub model.
The pair is approved once, as a human would. Each message waits for the recipient to be idle
with an empty composer, then ``message.send`` and its final outcome, then the model's turn.

Printed per harness: delivered / unconfirmed / other outcomes, and "wrong": a message whose
text reached the model other than exactly once in one turn (a double, a lost or a mangled
message), or a composer left holding text after a delivery (a draft touched). Goal: every
message delivered, 0 wrong.

Run: ``.venv/bin/python -m bench.bench_delivery_soak`` (or ``make bench``); needs ``make
harnesses``. A harness not installed is skipped with the reason.
"""

from __future__ import annotations

import collections
import os
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
from tests.support.harnesses import Pin, make_claude, make_codex, pin, workdir  # noqa: E402
from tests.support.stub_model import StubModel, running_stub_model  # noqa: E402
from tests.support.tmux import TmuxServer, tmux_server  # noqa: E402
from tests.support.wait import async_wait_until  # noqa: E402

MESSAGES = int(os.environ.get("OPENBUS_SOAK_MESSAGES", "200"))
RATE_STEP = 7.0  # seconds the clock skips per message: under the pair's rate limit
TEXT = "soak {n}: please look at the failing billing test and report back when done"


def _pins() -> list[Pin]:
    words = [w.strip() for w in os.environ.get("OPENBUS_SOAK_PINS", "").split(",") if w.strip()]
    if not words:
        return [pin("claude"), pin("codex")]
    return [pin(name, version) for name, _, version in (w.partition("-") for w in words)]


def _launch(found: Pin, root: Path, stub: StubModel, server: TmuxServer) -> str:
    cwd = workdir(root, f"project-{found.id}")
    subprocess.run(["git", "init", "-q", str(cwd)], check=True)
    if found.name == "claude":
        claude = make_claude(root / found.id, stub, cwd, found.version)
        return server.new_window(claude.tui_argv(), claude.env(), cwd)
    codex = make_codex(root / found.id, stub, cwd, found.version)
    return server.new_window(codex.tui_argv(), codex.env(), cwd)


async def soak(w: World, clock: SkewClock, stub: StubModel, found: Pin) -> None:
    sender = await w.agent("sender")
    pane = _launch(found, w.root, stub, w.server)
    recipient = await w.adopt(found.id, pane, w.root, timeout=90)
    outcomes: collections.Counter[str] = collections.Counter()
    wrong: list[str] = []
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
            continue

        def turns(text: str = text) -> list[str]:
            return [t.prompt for t in stub.turns() if text in t.prompt]

        async def turned() -> list[str]:
            return turns()

        try:
            await async_wait_until(turned, timeout=30, what=f"message {n} at the model")
        except AssertionError:
            wrong.append(f"{n}: never reached the model")
            continue
        await settled(w, pane)
        seen = turns()
        if len(seen) != 1 or seen[0].count(text) != 1:
            wrong.append(f"{n}: reached the model {len(seen)} times")
        if w.directory.entry(pane).reading.composer_empty is not True:
            wrong.append(f"{n}: the composer kept text after the turn")
    elapsed = time.monotonic() - started
    others = {k: v for k, v in outcomes.items() if k not in ("delivered", "unconfirmed")}
    print(
        f"{found.id}: {MESSAGES} messages in {elapsed:.0f} s: delivered {outcomes['delivered']}, "
        f"unconfirmed {outcomes['unconfirmed']}, other {others or 0}, wrong {len(wrong)} "
        f"(goal: {MESSAGES} delivered, 0 wrong)"
    )
    for line in wrong[:10]:
        print(f"  wrong: {line}")


def run_one(found: Pin) -> None:
    if found.binary is None:
        print(f"{found.id}: not installed (make harnesses); skipped")
        return
    # a harness may still be writing its config as its tmux server goes: cleanup is best effort
    with tempfile.TemporaryDirectory(prefix="obsoak-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        with running_stub_model() as stub, tmux_server(root / "tmux") as server:

            async def scenario(w: World, clock: SkewClock) -> None:
                await soak(w, clock, stub, found)

            run_world(root, server, scenario)


def main() -> None:
    for found in _pins():
        run_one(found)


if __name__ == "__main__":
    main()
