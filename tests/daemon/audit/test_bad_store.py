"""A full disk under a running daemon: actions are refused with a clear error, nothing is
half-written, and the daemon stays up. The state dir is a tiny tmpfs of its own.

A state dir turning read-only under a running daemon cannot be staged here: the kernel
refuses ``remount,ro`` while SQLite holds its files open for writing ("mount point is busy"),
and permission changes do not affect already-open descriptors. Both end in the same SQLite
write error on the same path (``AuditLog.append`` / the gate's append), which this covers."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import RunningDaemon, running_daemon
from tests.support.wait import wait_until

pytestmark = pytest.mark.root


def _mount(target: Path, options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)],
        capture_output=True,
        check=False,
        text=True,
    )


@contextlib.contextmanager
def tiny_state_dir(tmp_path: Path) -> Iterator[Path]:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tiny tmpfs as the state dir")
    result = _mount(state, "size=4m,mode=0700")
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield state
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)


def audited_read(daemon: RunningDaemon) -> tuple[int, dict[str, object]]:
    with daemon.human() as client:
        response = client.get("/api/audit", params={"after": 10**12, "limit": 1})
        return response.status_code, response.json()


def healthy(daemon: RunningDaemon) -> bool:
    with daemon.human() as client:
        return client.get("/healthz").status_code == 200


def verify_db(daemon: RunningDaemon) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
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
        timeout=60,
    )


def count(daemon: RunningDaemon, query: str) -> int:
    conn = sqlite3.connect(f"file:{daemon.state_dir / 'openbus.db'}?mode=ro", uri=True)
    try:
        return int(conn.execute(query).fetchone()[0])
    finally:
        conn.close()


def count_reads(daemon: RunningDaemon) -> int:
    return count(daemon, "SELECT COUNT(*) FROM audit WHERE action = 'audit.read'")


def test_a_full_disk_refuses_actions_writes_nothing_half_and_the_daemon_stays_up(
    tmp_path: Path,
) -> None:
    with (
        tiny_state_dir(tmp_path) as state,
        running_daemon(tmp_path, {"audit": {"checkpoint_every": 10}}) as daemon,
    ):
        ok = 0
        for _ in range(20):
            status, _ = audited_read(daemon)
            ok += status == 200
        # a checkpoint before the disk fills, so that verify can prove where the records
        # come from (it trusts nothing signed by a key it has not been given)
        wait_until(
            lambda: count(daemon, "SELECT COUNT(*) FROM audit_checkpoints") > 0,
            what="a checkpoint",
        )
        filler = state / "filler"
        with filler.open("wb") as out, contextlib.suppress(OSError):
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        refused: list[dict[str, object]] = []
        for _ in range(3000):  # enough to outgrow whatever space the WAL already holds
            status, body = audited_read(daemon)
            if status == 200:
                ok += 1
                continue
            assert status == 503, body
            refused.append(body)
            if len(refused) >= 5:
                break
        assert refused, "the disk never filled up"
        assert all(b["error"] == "audit_unavailable" for b in refused)
        assert "did not happen" in str(refused[0]["message"])
        assert "Traceback" not in str(refused[0])
        assert healthy(daemon)

        filler.unlink()
        status, _ = audited_read(daemon)
        assert status == 200
        ok += 1
        assert count_reads(daemon) == ok  # one record per answered action, none for refusals
        result = verify_db(daemon)
        assert result.returncode == 0, result.stdout + result.stderr
