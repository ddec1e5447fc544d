"""The one action path.

Every action by anyone, from the web UI, the CLI, MCP, control or the router, is::

    authenticate (the edge, before this) -> authorize (scope + org cap, every call)
      -> consent tier (the executor raises a card unless an approval covers it)
      -> execute -> exactly one audit record

Front ends hold only the gate: they name an action and pass parameters. Executors are
registered here and reachable no other way. State changes an executor makes are queued on
the ``Call`` as write callbacks and committed in one SQLite transaction together with the
call's audit record, so a change and its record land together or not at all ("no audit, no
action"). An executor with effects outside the database (tmux) runs them only after the gate
has checked the store is writable, and its record is written before the call returns.
Refusals are audited too.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from openbus.daemon.audit.log import AuditLog
from openbus.daemon.core.actions import Action, authorize
from openbus.daemon.core.actors import Actor
from openbus.daemon.core.audit import AuditDraft, AuditRecord
from openbus.daemon.core.errors import AuditUnavailable, NotFound, OpenbusError
from openbus.daemon.core.scopes import Scope

log = logging.getLogger("openbus.gate")

Write = Callable[[sqlite3.Connection], None]


@dataclass
class Call:
    actor: Actor
    action: Action
    params: Mapping[str, Any]
    target: str | None = None
    message_id: str | None = None
    scope: Scope | None = None
    outcome: str = "ok"
    details: dict[str, Any] = field(default_factory=dict)
    writes: list[Write] = field(default_factory=list)
    after_commit: list[Callable[[], None]] = field(default_factory=list)
    after_commit_async: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    def write(self, fn: Write) -> None:
        """Queue a state change to commit atomically with this call's audit record."""
        self.writes.append(fn)


Executor = Callable[[Call], Awaitable[Any]]


class ScopeSource(Protocol):
    def scopes_for(self, actor: Actor) -> frozenset[Scope]:
        """The scopes ``actor`` holds right now (grant capped by org policy)."""
        ...


class NoGrants:
    def scopes_for(self, actor: Actor) -> frozenset[Scope]:
        return frozenset()


class Gate:
    def __init__(self, audit: AuditLog, scopes: ScopeSource | None = None) -> None:
        self.audit = audit
        self.scopes: ScopeSource = scopes or NoGrants()
        self._registry: dict[str, tuple[Action, Executor]] = {}
        self.calls = 0  # every call that reached the gate, for the route-walk proof

    # ------------------------------------------------------------------ registry

    def register(self, action: Action, executor: Executor) -> None:
        if action.name in self._registry:
            raise ValueError(f"action {action.name} registered twice")
        self._registry[action.name] = (action, executor)

    def actions(self) -> list[Action]:
        return [action for action, _ in self._registry.values()]

    def action(self, name: str) -> Action:
        try:
            return self._registry[name][0]
        except KeyError:
            raise NotFound(f"no such action {name}") from None

    # ------------------------------------------------------------------ the path

    async def run(
        self,
        actor: Actor,
        name: str,
        params: Mapping[str, Any] | None = None,
        *,
        target: str | None = None,
        message_id: str | None = None,
    ) -> Any:
        self.calls += 1
        action, executor = self._lookup(name)
        call = Call(actor, action, dict(params or {}), target=target, message_id=message_id)
        try:
            scopes = self.scopes.scopes_for(actor) if actor.is_agent else frozenset()
            call.scope = authorize(actor, action, scopes)
            if action.mutates:
                self._check_writable()
            result = await executor(call)
        except OpenbusError as exc:
            self._record_failure(call, exc)
            raise
        except Exception as exc:
            log.exception("action %s failed", name)
            self._record_failure(call, exc)
            raise
        self._commit(call)
        for hook in call.after_commit_async:
            await hook()
        return result

    def record(self, draft: AuditDraft, writes: list[Write] | None = None) -> AuditRecord:
        """An audit record (with its state changes) for something the daemon did on its own:
        expiry sweeps, delivery outcomes, revocation cascades."""
        return self._append(list(writes or []), draft)

    # ------------------------------------------------------------------ internals

    def _lookup(self, name: str) -> tuple[Action, Executor]:
        try:
            return self._registry[name]
        except KeyError:
            raise NotFound(f"no such action {name}") from None

    def _draft(self, call: Call, outcome: str, details: Mapping[str, Any]) -> AuditDraft:
        return AuditDraft(
            actor=call.actor.name,
            action=call.action.name,
            outcome=outcome,
            scope=call.scope.value
            if call.scope
            else (call.action.scope.value if call.action.scope else None),
            target=call.target,
            message_id=call.message_id,
            details=details,
        )

    def _commit(self, call: Call) -> None:
        self._append(call.writes, self._draft(call, call.outcome, call.details))
        for fn in call.after_commit:
            fn()

    def _record_failure(self, call: Call, exc: Exception) -> None:
        if isinstance(exc, AuditUnavailable):
            return  # nothing can be recorded; the caller is told the action did not happen
        outcome = (
            "refused" if isinstance(exc, OpenbusError) and exc.code != "unavailable" else "error"
        )
        reason = exc.code if isinstance(exc, OpenbusError) else "internal"
        message = exc.message if isinstance(exc, OpenbusError) else "internal error"
        self._append(
            [], self._draft(call, outcome, {**call.details, "reason": reason, "message": message})
        )

    def _append(self, writes: list[Write], draft: AuditDraft) -> AuditRecord:
        conn = self.audit.db.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for write in writes:
                    write(conn)
                record = self.audit.append_in_txn(draft)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                self.audit.forget_head()
                raise
        except sqlite3.Error as exc:
            self.audit.forget_head()
            log.error("audit store refused a record: %s", exc)
            raise AuditUnavailable(
                f"the audit record could not be written ({exc}); the action did not happen"
            ) from None
        self.audit.committed(record)
        return record

    def _check_writable(self) -> None:
        conn = self.audit.db.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            raise AuditUnavailable(
                f"the audit store is not writable ({exc}); the action did not happen"
            ) from None
