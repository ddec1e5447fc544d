"""Wiring of the audit trail's background parts into one daemon: keys, checkpoints, shipper.

``install(services)`` makes (or loads) the box's audit key, builds the ``Checkpointer`` and
the ``Shipper`` over the state database, hangs their listeners on the audit log, registers
the ``audit.read`` action on the gate, the ``audit`` section of ``/healthz`` and the start
and stop hooks. With no ``[audit] otlp_endpoint`` the shipper does not run, but checkpoints
are still signed and the status still reports the local chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from openbus.daemon.audit.checkpoints import (
    Checkpointer,
    CheckpointPolicy,
    load_or_create_key,
    public_pem,
)
from openbus.daemon.audit.shipper import Exporter, Shipper, make_exporter, resource_attributes
from openbus.daemon.config import AuditConfig, Config
from openbus.daemon.core.errors import BadRequest

if TYPE_CHECKING:
    from openbus.daemon.gate import Call
    from openbus.daemon.policy_runtime import PolicyRuntime
    from openbus.daemon.services import Services

log = logging.getLogger("openbus.audit")

EXTRA = "audit"
READ_ACTION = "audit.read"
FOLLOW_ACTION = "audit.follow"
MAX_READ = 5000
STOP_DRAIN_SECONDS = 3.0


@dataclass
class AuditExport:
    checkpointer: Checkpointer
    shipper: Shipper
    box: str
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    stopping: bool = False

    def status(self) -> dict[str, Any]:
        try:
            return self.shipper.status()
        except Exception as exc:  # noqa: BLE001 (/healthz must answer whatever the store does)
            return {"error": f"audit status unavailable ({exc.__class__.__name__})"}


def box_name(services: Services) -> str:
    return services.config.audit.box_name or socket.gethostname()


def get(services: Services) -> AuditExport | None:
    export = services.extras.get(EXTRA)
    return export if isinstance(export, AuditExport) else None


def stopping(services: Services) -> bool:
    """True once the daemon has begun to stop (streams end then)."""
    export = get(services)
    return export is None or export.stopping


def export_settings(config: Config, policy_runtime: PolicyRuntime) -> AuditConfig:
    """Where the audit goes: the org policy's export when it names one, else ``[audit]``.

    A policy that requires export must name its endpoint (the policy schema refuses it
    otherwise, so the box does not start). A changed endpoint takes effect at the next start.
    """
    policy = policy_runtime.policy
    export = policy.audit if policy is not None else None
    if export is not None and export.endpoint:
        return replace(
            config.audit,
            otlp_endpoint=export.endpoint,
            otlp_protocol=export.protocol,
            otlp_headers_file=export.credential_file,
        )
    return config.audit


def install(
    services: Services,
    *,
    exporter: Exporter | None = None,
    backoff_cap: float = 10.0,
    batch_size: int = 512,
) -> None:
    """Build the checkpointer and shipper for ``services`` and register their hooks."""
    if get(services) is not None:
        return
    config = services.config
    key = load_or_create_key(config.daemon.state_dir)
    box = box_name(services)
    checkpointer = Checkpointer(
        config.db_path,
        key,
        box=box,
        clock=services.clock,
        policy=CheckpointPolicy(config.audit.checkpoint_every, config.audit.checkpoint_seconds),
    )
    audit_config = export_settings(config, services.policy)
    if exporter is None and audit_config.otlp_endpoint:
        exporter = make_exporter(audit_config)
    shipper = Shipper(
        config.db_path,
        exporter,
        clock=services.clock,
        resource=resource_attributes(box, public_pem(key.public_key()).decode("ascii")),
        endpoint=audit_config.otlp_endpoint,
        backoff_cap=backoff_cap,
        batch_size=batch_size,
        head=lambda: services.audit.head()[0],  # the committed head, kept in memory
    )
    export = AuditExport(checkpointer, shipper, box)
    services.extras[EXTRA] = export
    services.audit.listeners.append(checkpointer.notice)
    services.audit.listeners.append(shipper.notice)
    checkpointer.on_checkpoint.append(shipper.notice)
    services.health[EXTRA] = export.status
    _register_read(services, export)

    async def start() -> None:
        loop = asyncio.get_running_loop()
        export.tasks.append(loop.create_task(checkpointer.run(), name="audit-checkpoints"))
        if exporter is not None:
            export.tasks.append(loop.create_task(shipper.run(), name="audit-shipper"))

    async def stop() -> None:
        await _stop(export)

    services.started.append(start)
    services.stopping.append(stop)


async def _stop(export: AuditExport) -> None:
    export.stopping = True
    shipper, checkpointer = export.shipper, export.checkpointer
    shipper.stop()
    for task in export.tasks:
        if task.get_name() == "audit-checkpoints":
            task.cancel()
    for task in export.tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, timeout=STOP_DRAIN_SECONDS * 2)
    export.tasks.clear()
    await asyncio.to_thread(checkpointer.final)
    if shipper.exporter is not None and shipper.reachable is not False:

        async def drain() -> None:
            while True:
                ok, sent = await asyncio.to_thread(shipper.ship_once)
                if not ok or not sent:
                    return

        with contextlib.suppress(TimeoutError, Exception):
            await asyncio.wait_for(drain(), timeout=STOP_DRAIN_SECONDS)
    await asyncio.to_thread(shipper.close)
    checkpointer.close()


def _register_read(services: Services, export: AuditExport) -> None:
    from openbus.daemon.core.actions import Action
    from openbus.daemon.core.consent import Tier

    audit = services.audit

    async def read(call: Call) -> Any:
        after = _int(call.params.get("after", 0), "after", 0, 2**62)
        limit = _int(call.params.get("limit", 100), "limit", 1, MAX_READ)
        records = [r.to_dict() for r in audit.read(after, limit)]
        call.details["after"] = after
        call.details["count"] = len(records)
        return {
            "records": records,
            "next": records[-1]["seq"] if records else after,
            "export": export.status(),
        }

    async def follow(call: Call) -> Any:
        after = _int(call.params.get("after", 0), "after", 0, 2**62)
        call.details["after"] = after
        return {"after": after}

    services.gate.register(Action(READ_ACTION, scope=None, tier=Tier.READ, mutates=False), read)
    services.gate.register(Action(FOLLOW_ACTION, scope=None, tier=Tier.READ, mutates=False), follow)


def _int(value: Any, name: str, minimum: int, maximum: int) -> int:
    if isinstance(value, bool):
        raise BadRequest("must be an integer", field=name)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise BadRequest("must be an integer", field=name) from None
    if not minimum <= number <= maximum:
        raise BadRequest(f"must be between {minimum} and {maximum}", field=name)
    return number
