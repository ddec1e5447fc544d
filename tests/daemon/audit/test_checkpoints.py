"""The box's audit key and the checkpoints it signs."""

from __future__ import annotations

import stat
from pathlib import Path

from openbus.daemon.audit.checkpoints import (
    Checkpointer,
    CheckpointPolicy,
    load_or_create_key,
    load_public_key,
    public_pem,
    signature_valid,
)
from openbus.daemon.audit.log import AuditLog
from openbus.daemon.core.audit import AuditDraft, Checkpoint
from openbus.daemon.state import StateDB
from openbus.kernel.testing import FixedClock


def test_the_audit_key_is_made_once_readable_only_by_the_daemons_user(tmp_path: Path) -> None:
    key = load_or_create_key(tmp_path / "state")
    private = tmp_path / "state" / "audit_key.pem"
    public = tmp_path / "state" / "audit_key.pub"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert public.read_bytes() == public_pem(key.public_key())
    again = load_or_create_key(tmp_path / "state")
    assert public_pem(again.public_key()) == public_pem(key.public_key())


def test_a_checkpoint_is_due_after_every_n_records_or_t_seconds() -> None:
    policy = CheckpointPolicy(every=100, seconds=60)
    assert not policy.due(head_seq=99, last_seq=0, now=10, last_time=0)
    assert policy.due(head_seq=100, last_seq=0, now=10, last_time=0)
    assert policy.due(head_seq=101, last_seq=100, now=60, last_time=0)
    assert not policy.due(head_seq=100, last_seq=100, now=600, last_time=0)  # nothing new
    assert policy.wait(now=45, last_time=0) == 15


def make(
    tmp_path: Path, every: int = 5, seconds: float = 60
) -> tuple[AuditLog, Checkpointer, FixedClock]:
    clock = FixedClock()
    log = AuditLog(StateDB(tmp_path / "openbus.db"), clock)
    checkpointer = Checkpointer(
        tmp_path / "openbus.db",
        load_or_create_key(tmp_path),
        box="box-1",
        clock=clock,
        policy=CheckpointPolicy(every, seconds),
    )
    return log, checkpointer, clock


def draft(n: int) -> AuditDraft:
    return AuditDraft(actor="human:root", action="pane.read", outcome="ok", details={"n": n})


def test_the_checkpointer_signs_the_committed_head_after_n_records(tmp_path: Path) -> None:
    log, checkpointer, _ = make(tmp_path, every=5)
    made = []
    for n in range(12):
        log.append(draft(n))
        cp = checkpointer.tick()
        if cp:
            made.append(cp)
    assert [c.seq for c in made] == [5, 10]
    public = load_public_key(tmp_path / "audit_key.pub")
    assert all(signature_valid(public, c) for c in made)
    assert log.checkpoints() == made
    assert made[1].hash == log.read(9, 1)[0].hash


def test_the_checkpointer_signs_after_t_seconds_only_if_the_head_moved(tmp_path: Path) -> None:
    log, checkpointer, clock = make(tmp_path, every=1000, seconds=60)
    log.append(draft(1))
    assert checkpointer.tick() is None
    clock.advance(61)
    cp = checkpointer.tick()
    assert cp is not None and cp.seq == 1
    clock.advance(61)
    assert checkpointer.tick() is None  # nothing new to vouch for


def test_a_restarted_checkpointer_continues_after_the_last_checkpoint(tmp_path: Path) -> None:
    log, checkpointer, _ = make(tmp_path, every=5)
    for n in range(5):
        log.append(draft(n))
    assert checkpointer.tick() is not None
    checkpointer.close()
    _, again, _ = make(tmp_path, every=5)
    assert again.last_seq == 5 and again.tick() is None


def test_an_altered_checkpoint_no_longer_verifies(tmp_path: Path) -> None:
    log, checkpointer, _ = make(tmp_path, every=1)
    log.append(draft(1))
    cp = checkpointer.tick()
    assert cp is not None
    public = load_public_key(tmp_path / "audit_key.pub")
    moved = Checkpoint(cp.seq + 1, cp.hash, cp.time, cp.box, cp.signature)
    assert signature_valid(public, cp) and not signature_valid(public, moved)
    assert not signature_valid(public, Checkpoint(cp.seq, cp.hash, cp.time, cp.box, "zz"))


def test_a_checkpoint_is_due_a_cadence_after_the_tail_began_or_at_the_nth_record() -> None:
    policy = CheckpointPolicy(every=10, seconds=60)
    # quiet: 60 s after the later of the last checkpoint and the tail's first record
    assert policy.deadline(last_time=100, first_time=130, nth_time=None) == 190
    assert policy.deadline(last_time=100, first_time=90, nth_time=None) == 160
    # busy: when the 10th record after the checkpoint was written, if that is sooner
    assert policy.deadline(last_time=100, first_time=101, nth_time=120) == 120
    # no checkpoint yet: from the first record
    assert policy.deadline(last_time=None, first_time=5, nth_time=None) == 65
