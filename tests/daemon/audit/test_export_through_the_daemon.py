"""The real daemon ships its audit trail to a real OTLP receiver and loses nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.daemon.audit.helpers import audited_burst, head_seq, health
from tests.support.daemon import running_daemon, start_daemon
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.wait import wait_until

PROTOCOLS = ["grpc", "http/protobuf"]


def verify_otlp(path: Path, pubkey: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "openbus.daemon.cli",
            "audit",
            "verify",
            "--otlp-json",
            str(path),
            "--pubkey",
            str(pubkey),
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_burst_written_during_a_collector_outage_is_all_delivered_when_it_returns(
    tmp_path: Path, protocol: str
) -> None:
    receiver = OtlpReceiver(protocol, tmp_path / "collector.jsonl")
    audit = {
        "otlp_endpoint": receiver.endpoint,
        "otlp_protocol": protocol,
        "checkpoint_every": 1000,
    }
    with running_daemon(tmp_path, {"audit": audit}) as daemon:
        # the collector is down for the whole burst
        assert audited_burst(daemon, 10_000) == 10_000
        head = head_seq(daemon)
        assert head >= 10_000
        status = wait_until(
            lambda: (s := health(daemon))["endpoint_reachable"] is False and s,
            timeout=30,
            what="the shipper to notice the outage",
        )
        assert status["lag_records"] > 0
        assert receiver.requests == 0

        receiver.start()
        try:
            wait_until(lambda: receiver.has_all(head), timeout=90, what="every record delivered")
            wait_until(lambda: health(daemon)["lag_records"] == 0, timeout=30, what="no lag")
            assert health(daemon)["endpoint_reachable"] is True
        finally:
            daemon.stop()
            receiver.stop()
    result = verify_otlp(tmp_path / "collector.jsonl", daemon.state_dir / "audit_key.pub")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "chain intact" in result.stdout
    assert "unverified tail" not in result.stdout  # the clean stop signed the head


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_daemon_killed_mid_export_delivers_everything_after_restart_with_no_gap(
    tmp_path: Path, protocol: str
) -> None:
    receiver = OtlpReceiver(protocol, tmp_path / "collector.jsonl")
    audit = {"otlp_endpoint": receiver.endpoint, "otlp_protocol": protocol, "checkpoint_every": 500}
    daemon = start_daemon(tmp_path, {"audit": audit})
    try:
        assert audited_burst(daemon, 6_000) == 6_000
        head = head_seq(daemon)
        receiver.start()
        wait_until(lambda: receiver.requests >= 1, timeout=60, what="the export to begin")
        os.killpg(daemon.process.pid, signal.SIGKILL)
        daemon.process.wait(timeout=10)
        assert not receiver.has_all(head), "the kill came too late to be mid-export"
    finally:
        if daemon.process.poll() is None:
            os.killpg(daemon.process.pid, signal.SIGKILL)
    received_before = len(receiver.distinct_seqs())
    # a killed daemon leaves its socket file; probing it before the new daemon binds would
    # only measure the probe (serve clears it anyway)
    daemon.socket_path.unlink()

    daemon = start_daemon(tmp_path, {"audit": audit}, port=daemon.port)
    try:
        wait_until(lambda: receiver.has_all(head), timeout=90, what="every record after restart")
        # the cursor survived: the restart did not start over from seq 1
        assert len(receiver.record_seqs) < head + received_before + 1024
    finally:
        daemon.stop()
        receiver.stop()
    result = verify_otlp(tmp_path / "collector.jsonl", daemon.state_dir / "audit_key.pub")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"seq 1..{head}" in result.stdout or "chain intact" in result.stdout
