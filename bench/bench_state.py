"""State database benchmark: what the idle daemon asks of its principals every second, on a box
that has launched and ended many agents, against the same on a box with no such history.

The principals table keeps every principal ever minted (a launch's token, revoked or ended,
stays for the audit's sake and for "revoked on this pane" answers). Every second the launch
sweep asks for the active principals twice and control's tick for the control principal, and
every directory listing asks for control again; per pane, Connect's refusals ask whether it
held a revoked token and addressing which agents it holds. The floor is the same calls on a
table holding only the live principals; the code before is the same table with the indexes of
migration 9 dropped.

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
        for name, reads in (
            ("a second of the idle daemon's principal reads (active x2, control x2)", _second),
            ("one pane's (its agents, a revoked token there)", _pane),
        ):
            ours = _per_call_us(reads(history))
            floor = _per_call_us(reads(fresh))
            before = _per_call_us(reads(bare))
            print(
                f"{name}, {ENDED:,} ended principals + {LIVE} live: ours {ours:.0f} us; "
                f"the same with no ended principals {floor:.0f} us, ratio {ours / floor:.2f}; "
                f"without migration 9's indexes {before:.0f} us ({before / floor:.1f}x)"
            )


if __name__ == "__main__":
    main()
