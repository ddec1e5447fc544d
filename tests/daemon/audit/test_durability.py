"""An acknowledged action's record survives a kill -9 of the daemon, group commit or not."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.daemon.audit.helpers import audited_burst, head_seq
from tests.support.daemon import RunningDaemon, running_daemon, start_daemon
from tests.support.wait import wait_until

BASE = 10**12


def recorded_afters(state_dir: Path) -> set[int]:
    conn = sqlite3.connect(f"file:{state_dir / 'openbus.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT details FROM audit WHERE action = 'audit.read'").fetchall()
    finally:
        conn.close()
    return {int(json.loads(details)["after"]) for (details,) in rows}


# Clients cut off by the kill leave their half-open sockets to the garbage collector inside
# httpcore; that is the test's doing, not the daemon's.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_every_acknowledged_action_is_on_the_chain_after_a_kill_9_under_load(
    tmp_path: Path,
) -> None:
    daemon: RunningDaemon = start_daemon(tmp_path)
    acknowledged: list[int] = []
    stop = threading.Event()
    lock = threading.Lock()
    counter = iter(range(BASE, BASE + 10**9))

    def client() -> None:
        # each call names its own ``after``, which its audit record keeps in its details
        with daemon.human(timeout=10) as http:
            while not stop.is_set():
                with lock:
                    after = next(counter)
                try:
                    response = http.get("/api/audit", params={"after": after, "limit": 1})
                except httpx.HTTPError:
                    return  # the daemon is gone
                if response.status_code == 200:
                    with lock:
                        acknowledged.append(after)

    threads = [threading.Thread(target=client) for _ in range(16)]
    try:
        for thread in threads:
            thread.start()
        wait_until(lambda: len(acknowledged) >= 1500, timeout=60, what="calls acknowledged")
        os.killpg(daemon.process.pid, signal.SIGKILL)  # mid-load: batches are open
        daemon.process.wait(timeout=10)
    finally:
        stop.set()
        if daemon.process.poll() is None:
            os.killpg(daemon.process.pid, signal.SIGKILL)
        for thread in threads:
            thread.join(timeout=30)

    with lock:
        answered = set(acknowledged)
    missing = answered - recorded_afters(daemon.state_dir)
    assert not missing, f"{len(missing)} acknowledged calls have no record"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "openbus.daemon.cli",
            "audit",
            "verify",
            "--db",
            str(daemon.state_dir / "openbus.db"),
            "--pubkey",
            str(daemon.state_dir / "audit_key.pub"),
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "chain intact" in result.stdout


def last_checkpoint(state_dir: Path) -> int:
    conn = sqlite3.connect(f"file:{state_dir / 'openbus.db'}?mode=ro", uri=True)
    try:
        return int(
            conn.execute("SELECT COALESCE(MAX(seq), 0) FROM audit_checkpoints").fetchone()[0]
        )
    finally:
        conn.close()


def test_a_restarted_daemon_signs_the_tail_a_killed_one_left_at_once(tmp_path: Path) -> None:
    """A tail left unsigned by a kill -9 is signed as the next run starts, not a cadence later:
    the next run's records must never be newer than a due checkpoint that is not there (verify
    fails such a stream as cut)."""
    audit = {"audit": {"checkpoint_every": 1000, "checkpoint_seconds": 3600}}
    daemon = start_daemon(tmp_path, audit)
    try:
        assert audited_burst(daemon, 20) == 20
        head = head_seq(daemon)
        os.killpg(daemon.process.pid, signal.SIGKILL)
        daemon.process.wait(timeout=10)
    finally:
        if daemon.process.poll() is None:
            os.killpg(daemon.process.pid, signal.SIGKILL)
    assert last_checkpoint(daemon.state_dir) < head  # the kill left a tail unsigned
    daemon.socket_path.unlink()

    with running_daemon(tmp_path, audit) as again:
        wait_until(
            lambda: last_checkpoint(again.state_dir) >= head,
            timeout=10,
            what="the restarted daemon to sign the tail it found",
        )
