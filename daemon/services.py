"""The composition root: every long-lived service of one daemon process.

Thin wiring only. Each service is built from the config with its clock and randomness
injected; tests build a ``Services`` with a ``FixedClock`` and call the app factory with it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from openbus.daemon.audit.log import AuditLog
from openbus.daemon.config import Config
from openbus.daemon.core.clock import Clock, Random
from openbus.daemon.state import StateDB

log = logging.getLogger("openbus")


@dataclass
class Services:
    config: Config
    clock: Clock
    random: Random
    db: StateDB
    audit: AuditLog
    started: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    stopping: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    @classmethod
    def build(cls, config: Config, *, clock: Clock, random: Random) -> Services:
        config.daemon.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        db = StateDB(config.db_path)
        return cls(config=config, clock=clock, random=random, db=db, audit=AuditLog(db, clock))

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
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self.tasks.clear()

    def lifespan_middleware(self) -> object:
        services = self

        class Lifespan:
            async def process_startup(self, scope: Any, event: Any) -> None:
                await services.start()

            async def process_shutdown(self, scope: Any, event: Any) -> None:
                await services.stop()

        return Lifespan()
