"""The shipper in-process against a real OTLP receiver: cursor, backoff, headers, status."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import pytest

from openbus.daemon.audit.log import AuditLog
from openbus.daemon.audit.shipper import (
    Shipper,
    http_logs_url,
    make_exporter,
    read_headers_file,
    resource_attributes,
)
from openbus.daemon.config import AuditConfig
from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.state import StateDB
from openbus.kernel.errors import ConfigError
from openbus.kernel.testing import FixedClock
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.wait import async_wait_until

SECRET = "Bearer s3cr3t-never-logged"


def fill(tmp_path: Path, count: int, clock: FixedClock | None = None) -> AuditLog:
    log = AuditLog(StateDB(tmp_path / "openbus.db"), clock or FixedClock())
    for n in range(count):
        log.append(
            AuditDraft(actor="human:root", action="fleet.list", outcome="ok", details={"n": n})
        )
    return log


def shipper_for(
    tmp_path: Path, receiver: OtlpReceiver, clock: FixedClock | None = None, **kw: object
) -> Shipper:
    config = AuditConfig(otlp_endpoint=receiver.endpoint, otlp_protocol=receiver.protocol)
    return Shipper(
        tmp_path / "openbus.db",
        make_exporter(config, timeout=2.0),
        clock=clock or FixedClock(),
        resource=resource_attributes("box-7"),
        endpoint=receiver.endpoint,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_each_record_carries_seq_and_hash_and_the_resource_names_the_box(
    tmp_path: Path, protocol: str
) -> None:
    log = fill(tmp_path, 3)
    with OtlpReceiver(protocol, tmp_path / "c.jsonl") as receiver:
        shipper = shipper_for(tmp_path, receiver)
        assert shipper.ship_once() == (True, 3)
        shipper.close()
    assert receiver.record_seqs == [1, 2, 3]
    resource = receiver.resources[0]
    assert resource["service.name"] == "openbus"
    assert resource["openbus.box"] == "box-7"
    assert resource["host.name"] == socket.gethostname()
    line = (tmp_path / "c.jsonl").read_text()
    assert log.read(2, 1)[0].hash in line and '"openbus.prev_hash"' in line


def test_the_cursor_advances_only_on_success_and_survives_a_restart(tmp_path: Path) -> None:
    fill(tmp_path, 10)
    receiver = OtlpReceiver("grpc", tmp_path / "c.jsonl")
    shipper = shipper_for(tmp_path, receiver, batch_size=4)
    assert shipper.ship_once() == (False, 0)  # nobody listening
    assert shipper.exported_seq == 0 and shipper.status()["endpoint_reachable"] is False
    with receiver:
        assert shipper.ship_once() == (True, 4)
        shipper.close()
        again = shipper_for(tmp_path, receiver, batch_size=100)
        assert again.exported_seq == 4
        assert again.ship_once() == (True, 6)
        again.close()
    assert receiver.record_seqs == list(range(1, 11))  # nothing sent twice, nothing skipped


def test_status_shows_lag_in_records_and_seconds(tmp_path: Path) -> None:
    clock = FixedClock()
    fill(tmp_path, 5, clock)
    clock.advance(7.5)
    with OtlpReceiver("grpc", tmp_path / "c.jsonl") as receiver:
        shipper = shipper_for(tmp_path, receiver, clock=clock, batch_size=2)
        before = shipper.status()
        assert before["seq"] == 5 and before["lag_records"] == 5 and before["lag_seconds"] == 7.5
        assert before["endpoint_reachable"] is None
        shipper.ship_once()
        after = shipper.status()
        shipper.close()
    assert after["exported_seq"] == 2 and after["lag_records"] == 3
    assert after["endpoint_reachable"] is True


def test_the_running_shipper_wakes_on_a_new_record_and_rides_out_an_outage(tmp_path: Path) -> None:
    log = fill(tmp_path, 1)
    receiver = OtlpReceiver("http/protobuf", tmp_path / "c.jsonl")

    async def scenario() -> None:
        shipper = shipper_for(tmp_path, receiver, backoff_start=0.05, backoff_cap=0.2)
        log.listeners.append(shipper.notice)
        task = asyncio.create_task(shipper.run())
        try:
            await async_wait_until(
                lambda: _value(shipper.failures >= 2), timeout=20, what="retries during the outage"
            )
            receiver.start()
            await async_wait_until(lambda: _value(receiver.has_all(1)), timeout=20, what="delivery")
            for n in range(50):
                log.append(
                    AuditDraft(actor="system", action="tick", outcome="ok", details={"n": n})
                )
            await async_wait_until(lambda: _value(receiver.has_all(51)), timeout=20, what="wake-up")
        finally:
            shipper.stop()
            await asyncio.wait_for(task, 10)
            shipper.close()
            receiver.stop()

    asyncio.run(scenario())


async def _value(value: bool) -> bool:
    return value


def test_headers_come_from_the_file_and_never_reach_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    headers = tmp_path / "headers"
    headers.write_text(f"# collector auth\nAuthorization: {SECRET}\nX-Scope-OrgID: team-a\n\n")
    fill(tmp_path, 2)
    caplog.set_level(logging.DEBUG)
    with OtlpReceiver("grpc", tmp_path / "c.jsonl") as receiver:
        config = AuditConfig(
            otlp_endpoint=receiver.endpoint, otlp_protocol="grpc", otlp_headers_file=headers
        )
        shipper = Shipper(
            tmp_path / "openbus.db",
            make_exporter(config),
            clock=FixedClock(),
            resource=resource_attributes("b"),
            endpoint=receiver.endpoint,
        )
        assert shipper.ship_once() == (True, 2)
        shipper.close()
    assert receiver.headers_seen[0]["authorization"] == SECRET
    assert receiver.headers_seen[0]["x-scope-orgid"] == "team-a"
    assert "s3cr3t" not in caplog.text


def test_a_malformed_headers_file_names_the_file_and_line_but_not_its_content(
    tmp_path: Path,
) -> None:
    headers = tmp_path / "headers"
    headers.write_text(f"Authorization: ok\n{SECRET}\n")
    with pytest.raises(ConfigError) as caught:
        read_headers_file(headers)
    assert "line 2" in caught.value.message and str(headers) in caught.value.message
    assert "s3cr3t" not in caught.value.message
    with pytest.raises(ConfigError, match="cannot read"):
        read_headers_file(tmp_path / "missing")


def test_an_http_base_url_gets_the_logs_path() -> None:
    assert http_logs_url("http://c:4318") == "http://c:4318/v1/logs"
    assert http_logs_url("http://c:4318/") == "http://c:4318/v1/logs"
    assert http_logs_url("https://c/custom/logs") == "https://c/custom/logs"
