"""The same delivery against the real OpenTelemetry Collector image, where Docker runs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.daemon.audit.helpers import audited_burst, head_seq
from tests.support.daemon import running_daemon
from tests.support.wait import wait_until

IMAGE = "otel/opentelemetry-collector-contrib:0.120.0"
COLLECTOR_CONFIG = """
receivers:
  otlp:
    protocols:
      grpc: {endpoint: 0.0.0.0:4317}
      http: {endpoint: 0.0.0.0:4318}
exporters:
  file: {path: /out/audit.jsonl}
service:
  pipelines:
    logs: {receivers: [otlp], exporters: [file]}
"""


def docker_unavailable() -> str | None:
    """Why no Docker engine can run the collector here, or None when one answers."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return None  # a remote engine: let testcontainers try it
    path = host.removeprefix("unix://")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(3)
            probe.connect(path)
            probe.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            answer = probe.recv(64)
    except OSError as exc:
        return f"no Docker engine answers on {path} ({exc.strerror or exc.__class__.__name__})"
    if b" 200 " not in answer:
        return f"the Docker engine on {path} did not answer its ping"
    return None


def seqs_in(path: Path) -> set[int]:
    seqs: set[int] = set()
    if not path.exists():
        return seqs
    for line in path.read_text().splitlines():
        for rl in json.loads(line).get("resourceLogs", []):
            for sl in rl.get("scopeLogs", []):
                for item in sl.get("logRecords", []):
                    attrs = {a["key"]: a["value"] for a in item.get("attributes", [])}
                    if attrs.get("openbus.kind", {}).get("stringValue") == "record":
                        seqs.add(int(attrs["openbus.seq"]["intValue"]))
    return seqs


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_the_real_collector_receives_an_outage_burst_and_its_file_verifies(
    tmp_path: Path, protocol: str
) -> None:
    reason = docker_unavailable()
    if reason:
        print(f"skipping the OpenTelemetry Collector container test: {reason}")
        pytest.skip(reason)
    from testcontainers.core.container import DockerContainer  # noqa: PLC0415 - loads the docker SDK only where an engine answers

    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    (tmp_path / "collector.yaml").write_text(COLLECTOR_CONFIG)
    port = 4317 if protocol == "grpc" else 4318
    container = (
        DockerContainer(IMAGE)
        .with_volume_mapping(str(tmp_path / "collector.yaml"), "/etc/otelcol/config.yaml", "ro")
        .with_volume_mapping(str(out), "/out", "rw")
        .with_command("--config=/etc/otelcol/config.yaml")
        .with_exposed_ports(port)
    )
    with container:
        host_port = container.get_exposed_port(port)
        endpoint = f"http://{container.get_container_host_ip()}:{host_port}"
        audit = {"otlp_endpoint": endpoint, "otlp_protocol": protocol, "checkpoint_every": 500}
        with running_daemon(tmp_path, {"audit": audit}) as daemon:
            container.stop()  # the outage
            assert audited_burst(daemon, 10_000) == 10_000
            head = head_seq(daemon)
            container.start()
            wait_until(lambda: seqs_in(out / "audit.jsonl") >= set(range(1, head + 1)), timeout=120)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "openbus.daemon.cli",
            "audit",
            "verify",
            "--otlp-json",
            str(out / "audit.jsonl"),
            "--pubkey",
            str(tmp_path / "state" / "audit_key.pub"),
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
