"""The audit trail's background parts as one feature: keys, checkpoints, shipper.

``AuditExport`` makes (or loads) the box's audit key, builds the ``Checkpointer`` and the
``Shipper`` over the state database, hangs their listeners on the audit log, and registers
the ``audit.read`` and ``audit.follow`` actions. It is built by the composition root whether
or not an HTTP edge is served, so a daemon always signs checkpoints and ships. With no
``[audit] otlp_endpoint`` (and no policy export) the shipper does not run, but checkpoints
are still signed and the status still reports the local chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from dataclasses import replace
from typing import Any

from openbus.daemon.audit.checkpoints import (
    Checkpointer,
    CheckpointPolicy,
    load_or_create_key,
    public_pem,
)
from openbus.daemon.audit.log import AuditLog
from openbus.daemon.audit.shipper import Exporter, Shipper, make_exporter, resource_attributes
from openbus.daemon.config import AuditConfig, Config
from openbus.daemon.core.actions import Action
from openbus.daemon.core.consent import Tier
from openbus.daemon.feature import Feature
from openbus.daemon.gate import Call, Gate
from openbus.daemon.policy_runtime import PolicyRuntime
from openbus.kernel.clock import Clock
from openbus.kernel.errors import BadRequest

log = logging.getLogger("openbus.audit")

READ_ACTION = "audit.read"
FOLLOW_ACTION = "audit.follow"
MAX_READ = 5000
STOP_DRAIN_SECONDS = 3.0


def box_name(config: Config) -> str:
    return config.audit.box_name or socket.gethostname()


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


class AuditExport(Feature):
    name = "audit"

    def __init__(
        self,
        config: Config,
        clock: Clock,
        audit: AuditLog,
        policy: PolicyRuntime,
        gate: Gate,
        *,
        exporter: Exporter | None = None,
        backoff_cap: float = 10.0,
        batch_size: int = 512,
    ) -> None:
        key = load_or_create_key(config.daemon.state_dir)
        self.box = box_name(config)
        self.audit = audit
        self.checkpointer = Checkpointer(
            config.db_path,
            key,
            box=self.box,
            clock=clock,
            policy=CheckpointPolicy(config.audit.checkpoint_every, config.audit.checkpoint_seconds),
        )
        audit_config = export_settings(config, policy)
        if exporter is None and audit_config.otlp_endpoint:
            exporter = make_exporter(audit_config)
        self.shipper = Shipper(
            config.db_path,
            exporter,
            clock=clock,
            resource=resource_attributes(self.box, public_pem(key.public_key()).decode("ascii")),
            endpoint=audit_config.otlp_endpoint,
            backoff_cap=backoff_cap,
            batch_size=batch_size,
            head=lambda: audit.head()[0],  # the committed head, kept in memory
        )
        self.tasks: list[asyncio.Task[Any]] = []
        self.stopping = False  # True once the daemon has begun to stop (streams end then)
        audit.listeners.append(self.checkpointer.notice)
        audit.listeners.append(self.shipper.notice)
        self.checkpointer.on_checkpoint.append(self.shipper.notice)
        gate.register(Action(READ_ACTION, scope=None, tier=Tier.READ), self._read)
        gate.register(Action(FOLLOW_ACTION, scope=None, tier=Tier.READ), self._follow)

    def health(self) -> dict[str, Any]:
        return self.status()

    def status(self) -> dict[str, Any]:
        try:
            return self.shipper.status()
        except Exception as exc:  # noqa: BLE001 (/healthz must answer whatever the store does)
            return {"error": f"audit status unavailable ({exc.__class__.__name__})"}

    async def _read(self, call: Call) -> Any:
        after = _int(call.params.get("after", 0), "after", 0, 2**62)
        limit = _int(call.params.get("limit", 100), "limit", 1, MAX_READ)
        records = [r.to_dict() for r in self.audit.read(after, limit)]
        call.details["after"] = after
        call.details["count"] = len(records)
        return {
            "records": records,
            "next": records[-1]["seq"] if records else after,
            "export": self.status(),
        }

    async def _follow(self, call: Call) -> Any:
        after = _int(call.params.get("after", 0), "after", 0, 2**62)
        call.details["after"] = after
        return {"after": after}

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.tasks.append(loop.create_task(self.checkpointer.run(), name="audit-checkpoints"))
        if self.shipper.exporter is not None:
            self.tasks.append(loop.create_task(self.shipper.run(), name="audit-shipper"))

    async def stop(self) -> None:
        self.stopping = True
        shipper, checkpointer = self.shipper, self.checkpointer
        shipper.stop()
        for task in self.tasks:
            if task.get_name() == "audit-checkpoints":
                task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, timeout=STOP_DRAIN_SECONDS * 2)
        self.tasks.clear()
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
