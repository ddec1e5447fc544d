"""The systemd units: systemd's own security rating and verifier."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

UNITS_DIR = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
SERVICES = ["openbus.service", "openbus-tunnel.service", "openbus-agent.service"]
CEILING = 2.0

needs_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze is not installed (make system-deps)",
)


def exposure(unit: Path) -> float:
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        check=False,
    )
    if "--offline" in result.stderr and "unrecognized" in result.stderr:
        pytest.skip(f"this systemd-analyze has no --offline security: {result.stderr.strip()}")
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout + result.stderr)
    assert match, f"no exposure level in:\n{result.stdout}\n{result.stderr}"
    return float(match.group(1))


@needs_analyze
@pytest.mark.parametrize("unit", SERVICES)
def test_every_unit_rates_at_most_2_0_in_systemd_security(unit: str) -> None:
    score = exposure(UNITS_DIR / unit)
    print(f"{unit}: exposure {score}")
    assert score <= CEILING


def test_the_tunnel_unit_starts_as_root_only_with_the_capabilities_to_drop_privileges() -> None:
    text = (UNITS_DIR / "openbus-tunnel.service").read_text()
    assert "CapabilityBoundingSet=CAP_SETUID CAP_SETGID\n" in text
    assert "NoNewPrivileges=yes" in text
    assert "Requires=openbus-tunnel.socket" in text


def test_the_daemon_runs_as_its_own_user_with_no_capabilities() -> None:
    text = (UNITS_DIR / "openbus.service").read_text()
    assert re.search(r"^User=openbus$", text, re.M)
    assert "CapabilityBoundingSet=\n" in text
    assert "NoNewPrivileges=yes" in text


def test_the_agents_server_holds_only_what_sudo_needs_to_start_each_agent_as_its_pool_user() -> (
    None
):
    text = (UNITS_DIR / "openbus-agent.service").read_text()
    assert re.search(r"^User=openbus-agent$", text, re.M)
    # sudo (the one way to a pool uid) needs setuid and its audit record; nothing else
    assert "CapabilityBoundingSet=CAP_SETUID CAP_SETGID CAP_AUDIT_WRITE\n" in text
    assert "SystemCallFilter=~@privileged @resources" in text
