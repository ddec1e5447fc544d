"""Masking: what masking a line costs before an agent reads it, against scanning the line with
every detector.

Ours: ``Masker.mask_line`` (``daemon.mcp.masking``), which runs on a line only the detector
patterns whose requirements the line meets, on the lines agents read: every captured screen
of every pinned harness (``tests/daemon/screens/captured``: TUI lines, most of them past ASCII
for their borders and prompts), session titles as the history bench writes them (ASCII
prose), and the same titles naming a key or a token (what sends a title to the keyword
detector by its words alone). Each line once: a line seen again is an answer from a cache,
not a mask. The peer: the same masker with its pre-tests off, every detector on every line
(what scanning each line with detect-secrets' plugins costs). The answers are checked equal.
No target; printed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.bench_history import SEED, Corpus
from openbus.daemon.mcp.masking import Masker
from tests.support.masking import every_detector

SCREENS = Path(__file__).resolve().parent.parent / "tests" / "daemon" / "screens" / "captured"
TITLES = 3000
ROUNDS = 5


def screen_lines() -> list[str]:
    lines: set[str] = set()
    for path in sorted(SCREENS.rglob("*.txt")):
        lines.update(line for line in path.read_text(errors="replace").split("\n") if line.strip())
    return sorted(lines)


def titles() -> tuple[list[str], list[str]]:
    corpus = Corpus(SEED)
    plain = [corpus.sentence(6, 14) for _ in range(TITLES)]
    rng = random.Random(SEED)
    words = ["key", "keys", "token", "password", "secret", "api key", "auth token"]
    named = [f"{title} and rotate the {rng.choice(words)}" for title in plain]
    return plain, named


def per_line(mask: Callable[[str], object], lines: Sequence[str]) -> float:
    """The best of ROUNDS passes over ``lines``, in µs a line."""
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for line in lines:
            mask(line)
        best = min(best, time.perf_counter() - started)
    return best / len(lines) * 1e6


def main() -> None:
    plain, named = titles()
    sets = {"screen lines": screen_lines(), "titles": plain, "titles naming a key": named}
    ours, peer = Masker(), every_detector()
    for name, lines in sets.items():
        for line in lines:
            assert ours.mask_line(line) == peer.mask_line(line), line
        mine = per_line(ours.mask_line, lines)
        floor = per_line(peer.mask_line, lines)
        print(
            f"  {name:20s} {len(lines):5d} lines: ours {mine:6.2f} us a line, every detector "
            f"{floor:6.2f} us: ratio {mine / floor:.2f} (no target; printed)"
        )


if __name__ == "__main__":
    main()
