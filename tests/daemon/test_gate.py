"""The one action path: authorize, execute, exactly one audit record, fail closed."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon.audit.log import AuditLog
from openbus.daemon.core import actors
from openbus.daemon.core.actions import Action
from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.core.sampling import RefusalSampler
from openbus.daemon.gate import Call, Gate
from openbus.daemon.grants import Grants
from openbus.daemon.state import StateDB
from openbus.kernel.errors import AuditUnavailable, Conflict, NotConnected, RateLimited
from openbus.kernel.scopes import Preset, Scope
from openbus.kernel.testing import FixedClock, SeededRandom
from tests.support.wait import let_others_run

READ = Action("thing.read", scope=Scope.READ)
WRITE = Action("thing.write", outside_effects=True)
QUEUED = Action("thing.queue")  # every effect queued on the call


def build(
    tmp_path: Path, clock: FixedClock | None = None, burst: int = 100
) -> tuple[Gate, AuditLog, Grants]:
    clock = clock or FixedClock()
    db = StateDB(tmp_path / "state.db")
    audit = AuditLog(db, clock)
    grants = Grants(db, clock, SeededRandom(), cap_for=lambda owner: Preset.COLLABORATE)
    gate = Gate(audit, grants, clock=clock, agent_refusals=RefusalSampler(burst=burst, window=60))
    return gate, audit, grants


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_read_runs_and_leaves_exactly_one_record(tmp_path: Path) -> None:
    gate, audit, _ = build(tmp_path)

    async def executor(call: Call) -> str:
        call.details["rows"] = 2
        return "data"

    gate.register(READ, executor)
    assert run(gate.run(actors.human("alice"), "thing.read", target="%1")) == "data"
    [record] = audit.read()
    assert (record.actor, record.action, record.outcome, record.target) == (
        "human:alice",
        "thing.read",
        "ok",
        "%1",
    )
    assert record.details == {"rows": 2}


def test_an_agent_without_scope_is_refused_and_the_refusal_is_audited(tmp_path: Path) -> None:
    gate, audit, _ = build(tmp_path)
    ran = []

    async def executor(call: Call) -> None:
        ran.append(call)

    gate.register(READ, executor)
    with pytest.raises(NotConnected):
        run(gate.run(actors.agent_session("claude", "s1", "p_missing"), "thing.read"))
    assert ran == []
    [record] = audit.read()
    assert record.outcome == "refused" and record.details["reason"] == "not_connected"


def test_an_agent_refused_beyond_its_burst_is_rate_limited_and_counted_in_one_summary(
    tmp_path: Path,
) -> None:
    clock = FixedClock()
    gate, audit, _ = build(tmp_path, clock, burst=3)
    ran = []

    async def executor(call: Call) -> None:
        ran.append(call)
        raise Conflict("not now")  # what a human's refused call looks like

    gate.register(READ, executor)
    flooder = actors.agent_session("claude", "s1", "p_missing")
    other = actors.agent_session("claude", "s2", "p_other")
    errors = []
    for _ in range(10):
        with pytest.raises((NotConnected, RateLimited)) as refused:
            run(gate.run(flooder, "thing.read"))
        errors.append(refused.value.code)
    assert errors == ["not_connected"] * 3 + ["rate_limited"] * 7
    with pytest.raises(NotConnected):  # another agent's window is its own
        run(gate.run(other, "thing.read"))
    for _ in range(5):  # a human is never rate-limited, each refusal recorded
        with pytest.raises(Conflict):
            run(gate.run(actors.human("alice"), "thing.read"))
    assert [call.actor.kind for call in ran] == ["human"] * 5  # no agent call ran
    assert [(r.actor, r.outcome) for r in audit.read()] == [
        *[(flooder.name, "refused")] * 3,
        (other.name, "refused"),
        *[("human:alice", "refused")] * 5,
    ]
    clock.advance(60)
    gate.sweep_refusals()
    [summary] = audit.read(after=9)
    assert (summary.action, summary.target, summary.details["count"]) == (
        "refusals.suppressed",
        flooder.name,
        7,
    )
    with pytest.raises(NotConnected):  # a new window: refused, recorded, not rate-limited
        run(gate.run(flooder, "thing.read"))


def test_a_granted_agent_runs_and_narrowing_takes_effect_on_the_next_call(tmp_path: Path) -> None:
    gate, audit, grants = build(tmp_path)

    async def executor(call: Call) -> str:
        return "ok"

    gate.register(READ, executor)
    principal, _token, write = grants.mint(
        harness="claude", owner="alice", preset=Preset.OBSERVE, launcher="claude"
    )
    gate.record(AuditDraft(actor="human:alice", action="launch", outcome="ok"), [write])
    agent = actors.agent_session("claude", "s1", principal)
    assert run(gate.run(agent, "thing.read")) == "ok"
    gate.record(
        AuditDraft(actor="human:alice", action="connect.set", outcome="ok"),
        [grants.set_preset(principal, Preset.OFF)],
    )
    with pytest.raises(NotConnected):
        run(gate.run(agent, "thing.read"))
    assert [r.outcome for r in audit.read()] == ["ok", "ok", "ok", "refused"]


def test_a_state_change_and_its_record_commit_together(tmp_path: Path) -> None:
    gate, audit, _ = build(tmp_path)

    async def executor(call: Call) -> None:
        call.write(lambda conn: conn.execute("INSERT INTO restarts VALUES ('%1', '{}', 0)"))
        raise NotConnected("changed my mind")

    gate.register(WRITE, executor)
    with pytest.raises(NotConnected):
        run(gate.run(actors.human("alice"), "thing.write"))
    assert audit.db.conn.execute("SELECT COUNT(*) FROM restarts").fetchone() == (0,)
    assert [r.outcome for r in audit.read()] == ["refused"]


@pytest.mark.parametrize(
    ("action", "runs"),
    # one with effects outside the database is not run; one whose effects are all queued on
    # the call runs, and its writes fall with its record (one transaction)
    [(WRITE, False), (QUEUED, True)],
    ids=["outside effects", "all queued"],
)
def test_when_the_audit_store_fails_the_action_does_not_happen(
    tmp_path: Path, action: Action, runs: bool
) -> None:
    gate, audit, _ = build(tmp_path)
    ran = []

    async def executor(call: Call) -> None:
        ran.append(call)
        call.write(lambda conn: conn.execute("INSERT INTO restarts VALUES ('%1', '{}', 0)"))
        call.after_commit.append(lambda: ran.append("after commit"))

    gate.register(action, executor)
    # Another connection holds the write lock: the audit cannot be written.
    other = sqlite3.connect(str(tmp_path / "state.db"), isolation_level=None)
    other.execute("PRAGMA busy_timeout=0")
    audit.db.conn.execute("PRAGMA busy_timeout=0")
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(AuditUnavailable, match="did not happen"):
            run(gate.run(actors.human("alice"), action.name))
    finally:
        other.execute("ROLLBACK")
    assert len(ran) == (1 if runs else 0) and "after commit" not in ran
    assert audit.db.conn.execute("SELECT COUNT(*) FROM restarts").fetchone() == (0,)
    assert audit.read() == []


def test_the_chain_links_every_record_to_the_one_before(tmp_path: Path) -> None:
    gate, audit, _ = build(tmp_path)

    async def executor(call: Call) -> None:
        return None

    gate.register(READ, executor)
    for _ in range(3):
        run(gate.run(actors.human("alice"), "thing.read"))
    records = audit.read()
    assert [r.seq for r in records] == [1, 2, 3]
    assert records[1].prev_hash == records[0].hash and records[2].prev_hash == records[1].hash


# ---------------------------------------------------------------------------- group commit


def many_reads(gate: Gate, count: int, prefix: str = "t") -> Any:
    async def go() -> list[Any]:
        return await asyncio.gather(
            *(
                gate.run(actors.human("alice"), "thing.read", target=f"{prefix}{i}")
                for i in range(count)
            ),
            return_exceptions=True,
        )

    return run(go())


def test_concurrent_calls_share_a_commit_and_each_gets_its_record_in_a_gap_free_chain(
    tmp_path: Path,
) -> None:
    gate, audit, _ = build(tmp_path)

    async def executor(call: Call) -> str:
        return str(call.target)

    gate.register(READ, executor)
    results = many_reads(gate, 50)
    assert results == [f"t{i}" for i in range(50)]
    assert gate.stats.batches < 50  # shared commits, not one per call
    assert gate.stats.as_dict() == {
        "calls": 50,
        "batches": gate.stats.batches,
        "batched_records": 50,
        "rate_limited": 0,
        "refusals_sampled_out": 0,
    }
    records = audit.read()
    assert [r.seq for r in records] == list(range(1, 51))
    assert sorted(r.target or "" for r in records) == sorted(f"t{i}" for i in range(50))
    for before, after in itertools.pairwise(records):
        assert after.prev_hash == before.hash


def test_a_batch_that_cannot_commit_fails_every_call_in_it_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    gate, audit, _ = build(tmp_path)

    async def executor(call: Call) -> str:
        return "secret"

    gate.register(READ, executor)
    # the store refuses the third record of the batch, after the first two were inserted
    audit.db.conn.execute(
        "CREATE TEMP TRIGGER refuse BEFORE INSERT ON main.audit WHEN NEW.target = 't2' "
        "BEGIN SELECT RAISE(ABORT, 'disk says no'); END"
    )
    results = many_reads(gate, 5)
    # the first record of the loop turn committed alone; the other four were one batch
    assert results[0] == "secret"
    assert all(isinstance(r, AuditUnavailable) for r in results[1:]), results
    assert [r.target for r in audit.read()] == ["t0"]
    audit.db.conn.execute("DROP TRIGGER refuse")
    # the chain goes on after the committed head: no seq was taken, no fork
    assert many_reads(gate, 3, prefix="u") == ["secret"] * 3
    records = audit.read()
    assert [r.seq for r in records] == [1, 2, 3, 4]
    for before, after in itertools.pairwise(records):
        assert after.prev_hash == before.hash


def test_a_record_that_cannot_be_sealed_fails_only_its_own_call(tmp_path: Path) -> None:
    gate, audit, _ = build(tmp_path)

    async def executor(call: Call) -> str:
        if call.target == "t1":
            call.details["bad"] = object()  # not JSON
        return "ok"

    gate.register(READ, executor)
    results = many_reads(gate, 3)
    assert results[0] == "ok" and results[2] == "ok"
    assert isinstance(results[1], TypeError)
    records = audit.read()
    assert [(r.seq, r.target) for r in records] == [(1, "t0"), (2, "t2")]
    assert records[1].prev_hash == records[0].hash


def test_a_state_change_commits_at_once_after_the_open_batch_keeping_arrival_order(
    tmp_path: Path,
) -> None:
    gate, audit, _ = build(tmp_path)
    seen: list[int] = []

    async def read(call: Call) -> None:
        return None

    async def write(call: Call) -> None:
        call.write(lambda conn: conn.execute("INSERT INTO restarts VALUES ('%1', '{}', 0)"))

    async def check(call: Call) -> None:
        # a later call on the loop already sees the earlier call's change
        seen.append(audit.db.conn.execute("SELECT COUNT(*) FROM restarts").fetchone()[0])

    gate.register(READ, read)
    gate.register(WRITE, write)
    gate.register(Action("thing.check"), check)

    async def go() -> None:
        alice = actors.human("alice")
        await asyncio.gather(
            gate.run(alice, "thing.read", target="r1"),
            gate.run(alice, "thing.write", target="w"),
            gate.run(alice, "thing.check", target="c"),
            gate.run(alice, "thing.read", target="r2"),
        )

    run(go())
    assert seen == [1]
    assert [r.target for r in audit.read()] == ["r1", "w", "c", "r2"]


def test_a_caller_that_goes_away_while_waiting_still_leaves_its_record(tmp_path: Path) -> None:
    gate, audit, _ = build(tmp_path)

    async def executor(call: Call) -> None:
        return None

    gate.register(READ, executor)

    async def go() -> None:
        alice = actors.human("alice")
        tasks = [
            asyncio.ensure_future(gate.run(alice, "thing.read", target=f"t{i}")) for i in range(3)
        ]
        await let_others_run()  # every call is now waiting on the open batch
        tasks[1].cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    run(go())
    assert [r.target for r in audit.read()] == ["t0", "t1", "t2"]
