"""The org policy names where the audit goes, and may require that it goes somewhere."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.daemon import running_daemon, write_config
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.policy import signed_policy
from tests.support.wait import wait_until

POLICY = """\
org = "test"
version = 1
issued = "2026-11-30T00:00:00Z"

[caps]
default = "observe"

[audit]
export_required = true
{endpoint}
"""


def test_the_policys_export_endpoint_receives_the_audit(tmp_path: Path) -> None:
    receiver = OtlpReceiver("http/protobuf", tmp_path / "collector.jsonl").start()
    try:
        text = POLICY.format(
            endpoint=f'endpoint = "{receiver.endpoint}"\nprotocol = "http/protobuf"'
        )
        section = signed_policy(tmp_path / "org", text)
        with running_daemon(tmp_path, {"policy": section}) as daemon:
            with daemon.human() as client:
                assert client.get("/api/cards").status_code == 200
                health = client.get("/healthz").json()["audit"]
            assert health["endpoint"] == receiver.endpoint
            wait_until(lambda: receiver.has_all(1), timeout=30, what="the record at the collector")
    finally:
        receiver.stop()


def test_a_policy_requiring_export_without_an_endpoint_stops_start_up(tmp_path: Path) -> None:
    section = signed_policy(tmp_path / "org", POLICY.format(endpoint=""))
    config = write_config(
        tmp_path / "openbus.toml",
        {
            "daemon": {"state_dir": str(tmp_path / "state"), "socket": str(tmp_path / "d.sock")},
            "policy": section,
        },
    )
    result = subprocess.run(
        [sys.executable, "-m", "openbus.daemon.cli", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "audit.endpoint" in result.stderr and "export_required" in result.stderr
    assert "Traceback" not in result.stderr
