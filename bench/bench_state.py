"""State database benchmark: what the idle daemon asks of its principals every second, on a box
that has launched and ended many agents, against the same on a box with no such history.

The principals table keeps every principal ever minted (a launch's token, revoked or ended,
stays for the audit's sake and for "revoked on this pane" answers). Every second the launch
sweep asks for the active principals twice and control's tick for the control principal, and
every directory listing asks for control again; per pane, Connect's refusals ask whether it
held a revoked token and addressing which agents it holds; a hosted user's view, built on
every listing and agent call, holds the panes that user launched into. The floor is the same
calls on a table holding only the live principals; the code before is the same table with the
indexes of migration 9 dropped, and the view read by a ``Grants`` that keeps nothing.

Run: ``.venv/bin/python -m bench.bench_state`` (or ``make bench``).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from openbus.daemon.grants import Grants
from openbus.daemon.state import StateDB
from openbus.kernel.clock import SystemClock, SystemRandom
from openbus.kernel.scopes import Preset

ENDED = 10_000  # principals launched and revoked before (a year of a few dozen a day)
LIVE = 20
ROUNDS = 7
CALLS = 50
INDEXES = ("principals_state", "principals_pane", "principals_owner")
Reads = Callable[[Grants], Callable[[], object]]


def _grants(path: Path, ended: int) -> tuple[StateDB, Grants]:
    db = StateDB(path)
    grants = Grants(db, SystemClock(), SystemRandom(), cap_for=lambda owner: Preset.COLLABORATE)
    with db.conn:
        for n in range(ended + LIVE):
            principal, _token, mint = grants.mint(
                harness="claude", owner="alice", preset=Preset.OBSERVE, launcher="claude"
            )
            mint(db.conn)
            grants.attach_pane(principal, f"%{n % 200}", 1000 + n, "1", f"i{n}")(db.conn)
            if n < ended:
                grants.revoke(principal)(db.conn)
    return db, grants


def _second(grants: Grants) -> Callable[[], object]:
    """One second of the idle daemon's reads of the principals, and one directory listing."""

    def reads() -> object:
        grants.active()
        grants.active()
        grants.control()
        return grants.control()

    return reads


def _view(grants: Grants) -> Callable[[], object]:
    """A hosted user's view, built on every listing and agent call: the panes they launched
    into (every principal of theirs, whatever its state)."""
    return lambda: grants.panes_owned_by("alice")


def _view_unkept(grants: Grants) -> Callable[[], object]:
    """The same read by a new ``Grants`` each time (nothing kept: the code before)."""
    db = grants.db
    return lambda: Grants(db, grants.clock, grants.random, cap_for=grants.cap_for).panes_owned_by(
        "alice"
    )


def _pane(grants: Grants) -> Callable[[], object]:
    """What is asked of one pane: the agents it holds, and whether one was revoked there."""

    def reads() -> object:
        grants.by_pane("%7")
        return grants.revoked_on_pane("%7", "alice")

    return reads


def _per_call_us(fn: Callable[[], object]) -> float:
    best = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        best.append((time.perf_counter() - t0) / CALLS * 1e6)
    return statistics.median(best)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="obbench-state-") as tmp:
        root = Path(tmp)
        _db, history = _grants(root / "history.db", ENDED)
        _fresh_db, fresh = _grants(root / "fresh.db", 0)
        bare_db, bare = _grants(root / "bare.db", ENDED)
        for index in INDEXES:
            bare_db.conn.execute(f"DROP INDEX {index}")
        indexes_dropped = "without migration 9's indexes"
        rows: list[tuple[str, Reads, Callable[[], object], str]] = [
            (
                "a second of the idle daemon's principal reads (active x2, control x2)",
                _second,
                _second(bare),
                indexes_dropped,
            ),
            ("one pane's (its agents, a revoked token there)", _pane, _pane(bare), indexes_dropped),
            (
                "a hosted user's view (the panes they launched into)",
                _view,
                _view_unkept(history),
                "read anew each time, with the indexes",
            ),
        ]
        for name, reads, code_before, before_is in rows:
            ours = _per_call_us(reads(history))
            floor = _per_call_us(reads(fresh))
            before = _per_call_us(code_before)
            print(
                f"{name}, {ENDED:,} ended principals + {LIVE} live: ours {ours:.2f} us; "
                f"the same with no ended principals {floor:.2f} us, ratio {ours / floor:.2f}; "
                f"{before_is} {before:.0f} us"
            )


if __name__ == "__main__":
    main()
