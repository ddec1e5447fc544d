"""The composition root: every long-lived service of one daemon process.

Thin wiring only. Each service is built from the config with its clock and randomness
injected; tests build a ``Services`` with a ``FixedClock`` and call the app factory with it.
Feature modules add themselves through ``install(services)`` functions, which register
their actions on the gate and their start/stop hooks here.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from openbus.daemon.audit.log import AuditLog
from openbus.daemon.cards import Cards
from openbus.daemon.config import Config
from openbus.daemon.connect import Connect
from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.core.clock import Clock, Random
from openbus.daemon.core.sampling import RefusalSampler, Suppressed
from openbus.daemon.gate import Gate
from openbus.daemon.grants import Grants
from openbus.daemon.policy_runtime import PolicyRuntime
from openbus.daemon.state import StateDB
from openbus.policy.loader import PolicyRejection

log = logging.getLogger("openbus")

HOUSEKEEPING_SECONDS = 1.0  # card expiry, message expiry, agents' exits, the policy file

Job = Callable[[], object]  # plain, or returning an awaitable


@dataclass
class Services:
    config: Config
    clock: Clock
    random: Random
    db: StateDB
    audit: AuditLog
    gate: Gate
    grants: Grants
    cards: Cards
    connect: Connect
    policy: PolicyRuntime
    started: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    stopping: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)  # feature services by name
    health: dict[str, Callable[[], Any]] = field(default_factory=dict)  # /healthz sections
    refusals: RefusalSampler = field(default_factory=RefusalSampler)
    housekeeping: list[tuple[str, Job]] = field(default_factory=list)

    @classmethod
    def build(cls, config: Config, *, clock: Clock, random: Random) -> Services:
        config.daemon.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        db = StateDB(config.db_path)
        audit = AuditLog(db, clock)
        grants = Grants(db, clock, random)
        gate = Gate(audit, grants)
        cards = Cards(db, clock, random)

        def policy_rejected(rejection: PolicyRejection) -> None:
            gate.record(
                AuditDraft(
                    actor="system",
                    action="policy.rejected",
                    outcome="refused",
                    target=str(rejection.path),
                    details={
                        "reason": rejection.reason,
                        "in_force": rejection.in_force.version if rejection.in_force else None,
                    },
                )
            )

        policy = PolicyRuntime.from_config(config, clock=clock, on_rejected=policy_rejected)
        grants.cap_for = lambda owner: policy.cap_for(owner).preset
        services = cls(
            config=config,
            clock=clock,
            random=random,
            db=db,
            audit=audit,
            gate=gate,
            grants=grants,
            cards=cards,
            connect=Connect(gate, grants, policy.cap_for),
            policy=policy,
        )
        from openbus.daemon import consent_actions

        consent_actions.register(gate, cards)
        from openbus.daemon.history import service as history_service

        history_service.install(services)
        from openbus.daemon.http import directory as directory_http

        directory_http.install(services)
        from openbus.daemon import mcp

        mcp.install(services)
        from openbus.daemon import messaging

        messaging.install(services)
        services.every_second("card expiry sweep", services._sweep_cards)
        services.every_second("policy watch", services._watch_policy)
        services.started.append(services._start_housekeeping)
        return services

    def every_second(self, name: str, job: Job) -> None:
        """Run ``job`` (plain or async) about once a second, from start until stop, on the one
        housekeeping tick: one wake-up a second for every sweep, which is most of what an idle
        daemon costs. A failing job is logged under ``name``; the others still run."""
        self.housekeeping.append((name, job))

    async def _start_housekeeping(self) -> None:
        async def tick() -> None:
            while True:
                for name, job in list(self.housekeeping):
                    try:
                        pending = job()
                        if inspect.isawaitable(pending):
                            await pending
                    except Exception:
                        log.exception("%s failed", name)
                await asyncio.sleep(HOUSEKEEPING_SECONDS)

        self.spawn(tick())

    async def _watch_policy(self) -> None:
        """Poll the policy file (two stat calls); a new policy cascades at once."""
        if self.policy.loaded is None:
            return
        before = self.connect.effective_presets()
        if self.policy.check_for_change():
            await self.connect.policy_changed(before)

    def _sweep_cards(self) -> None:
        from openbus.daemon.consent_actions import sweep_expired

        sweep_expired(self.gate, self.cards)
        self.flush_refusals()

    def refuse_anonymously(self, key: str, draft: AuditDraft) -> None:
        """Audit a refusal of a caller with no identity, sampled per ``key`` (a flood of them
        is counted in summary records instead of filling the store; see core.sampling)."""
        admitted, due = self.refusals.admit(key, self.clock.monotonic())
        self._record_suppressed(due)
        if admitted:
            self.gate.record(draft)

    def flush_refusals(self) -> None:
        self._record_suppressed(self.refusals.sweep(self.clock.monotonic()))

    def _record_suppressed(self, due: list[Suppressed]) -> None:
        for summary in due:
            self.gate.record(
                AuditDraft(
                    actor="system",
                    action="refusals.suppressed",
                    outcome="refused",
                    target=summary.key,
                    details={
                        "count": summary.count,
                        "seconds": round(summary.until - summary.since, 3),
                    },
                )
            )

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.append(task)
        return task

    async def start(self) -> None:
        for hook in self.started:
            await hook()

    async def stop(self) -> None:
        for hook in reversed(self.stopping):
            try:
                await hook()
            except Exception:
                log.exception("error while stopping")
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                try:
                    await task
                except Exception:
                    log.exception("a background task failed while stopping")
        self.tasks.clear()
        self.db.close()

    def lifespan_middleware(self) -> object:
        services = self

        class Lifespan:
            async def process_startup(self, scope: Any, event: Any) -> None:
                await services.start()

            async def process_shutdown(self, scope: Any, event: Any) -> None:
                await services.stop()

        return Lifespan()
