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

Group commit. A call whose record carries no state change (a read, a refusal, an action whose
effects are outside the database) does not commit on its own: its draft joins the gate's open
batch and the call waits on a future. The batch is committed once per turn of the event loop
(scheduled with ``call_soon`` by the first draft to join; the first record of a loop turn
commits at once, so a lone caller waits for no turn) as one transaction: every draft is
sealed onto the chain in arrival order and inserted with one statement, then ``COMMIT``,
then each waiting call is answered. So concurrent calls share one commit, and
still no call answers before its own record is durable (WAL: the commit is in the OS's hands
when ``COMMIT`` returns, which survives a kill -9 of the daemon). If the batch cannot be
written, it is rolled back whole and every call in it fails with ``AuditUnavailable``:
nothing half-written, no seq taken, so no gap and no fork (the chain head is re-read after a
rollback).

A call that queues state changes (``call.write``) or in-process effects (``after_commit``)
commits at once, as before, so the next call on the loop sees its change: the open batch is
flushed first (keeping arrival order) and then its own writes and record commit together in
their own transaction. ``record()`` (the daemon acting on its own) does the same.

Refused agents. An agent's refused calls are sampled per agent (``core.sampling``): the first
``burst`` refusals of a window get their own records, and an agent that used its burst is
rate-limited for the rest of the window: every further call answers ``RateLimited`` without
being authorized or run, counted in one ``refusals.suppressed`` summary when the window
closes (``sweep_refusals``, on the housekeeping tick). So a token that is refused (turned Off,
lacking a scope) costs at most ``burst`` records and one summary a window, and an unrelated
agent is untouched. Humans are never rate-limited here: a human must always be able to
decide a card or disconnect a flooding agent, and their refusals stay one record each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from openbus.daemon.audit.log import AuditLog
from openbus.daemon.core.actions import Action, authorize
from openbus.daemon.core.actors import Actor
from openbus.daemon.core.audit import AuditDraft, AuditRecord
from openbus.daemon.core.sampling import RefusalSampler, Suppressed
from openbus.kernel.clock import Clock
from openbus.kernel.errors import AuditUnavailable, NotFound, OpenbusError, RateLimited
from openbus.kernel.scopes import Scope

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


@dataclass
class GateStats:
    """What the gate has done since the daemon started (for ``/healthz``)."""

    calls: int = 0  # actions run through the gate, whatever their outcome
    batches: int = 0  # group commits: record-only calls committed together
    batched_records: int = 0  # the records those group commits wrote
    rate_limited: int = 0  # agents' calls answered rate_limited without running
    refusals_sampled_out: int = 0  # agents' refusals counted in a summary, no record of their own

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class Gate:
    def __init__(
        self,
        audit: AuditLog,
        scopes: ScopeSource | None = None,
        *,
        clock: Clock,
        agent_refusals: RefusalSampler,
    ) -> None:
        self.audit = audit
        self.scopes: ScopeSource = scopes or NoGrants()
        self.clock = clock
        self.agent_refusals = agent_refusals  # keyed by the agent's actor name
        self._registry: dict[str, tuple[Action, Executor]] = {}
        self.stats = GateStats()
        # group commit: drafts waiting for the next flush, each with its caller's future
        self._batch: list[tuple[AuditDraft, asyncio.Future[AuditRecord]]] = []
        self._flush_scheduled = False
        self._hot = False  # a record committed in this loop turn: later ones batch

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
        self.stats.calls += 1
        action, executor = self._lookup(name)
        self.throttle(actor)
        call = Call(actor, action, dict(params or {}), target=target, message_id=message_id)
        try:
            scopes = self.scopes.scopes_for(actor) if actor.is_agent else frozenset()
            call.scope = authorize(actor, action, scopes)
            if action.outside_effects:
                self._check_writable()
            result = await executor(call)
        except OpenbusError as exc:
            await self._record_failure(call, exc)
            raise
        except Exception as exc:
            log.exception("action %s failed", name)
            await self._record_failure(call, exc)
            raise
        await self._commit(call)
        for hook in call.after_commit_async:
            await hook()
        return result

    def record(self, draft: AuditDraft, writes: list[Write] | None = None) -> AuditRecord:
        """An audit record (with its state changes) for something the daemon did on its own:
        expiry sweeps, delivery outcomes, revocation cascades. Durable when this returns."""
        self.flush()
        return self._append(list(writes or []), draft)

    def throttle(self, actor: Actor) -> None:
        """Refuse (``RateLimited``) a call of an agent that used its window's refusals, before
        anything of the call runs; the call is counted in the window's summary."""
        if not actor.is_agent:
            return
        now = self.clock.monotonic()
        wait = self.agent_refusals.retry_after(actor.name, now)
        if wait is None:
            return
        _, due = self.agent_refusals.admit(actor.name, now)
        self._summarise(due)
        self.stats.rate_limited += 1
        raise RateLimited(
            f"too many refused calls: calls are refused for the next {wait:.0f} s", field="rate"
        )

    async def refuse(self, actor: Actor, draft: AuditDraft) -> None:
        """Audit a refusal of ``actor``'s call: an agent's are sampled per agent (the first of
        a window recorded, the rest counted in its summary), a human's always recorded."""
        if actor.is_agent:
            admitted, due = self.agent_refusals.admit(actor.name, self.clock.monotonic())
            self._summarise(due)
            if not admitted:
                self.stats.refusals_sampled_out += 1
                return
        await self._grouped(draft)

    def sweep_refusals(self) -> None:
        """Record the summaries of agents' refusal windows that have closed."""
        self._summarise(self.agent_refusals.sweep(self.clock.monotonic()))

    def _summarise(self, due: list[Suppressed]) -> None:
        for summary in due:
            self.record(summary.draft())

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

    async def _commit(self, call: Call) -> None:
        draft = self._draft(call, call.outcome, call.details)
        if call.writes or call.after_commit:
            self.flush()
            self._append(call.writes, draft)
            for fn in call.after_commit:
                fn()
            return
        await self._grouped(draft)

    async def _record_failure(self, call: Call, exc: Exception) -> None:
        if isinstance(exc, AuditUnavailable):
            return  # nothing can be recorded; the caller is told the action did not happen
        outcome = (
            "refused" if isinstance(exc, OpenbusError) and exc.code != "unavailable" else "error"
        )
        reason = exc.code if isinstance(exc, OpenbusError) else "internal"
        message = exc.message if isinstance(exc, OpenbusError) else "internal error"
        draft = self._draft(call, outcome, {**call.details, "reason": reason, "message": message})
        if outcome == "refused":
            await self.refuse(call.actor, draft)
        else:
            await self._grouped(draft)

    # ------------------------------------------------------------------ group commit

    async def _grouped(self, draft: AuditDraft) -> AuditRecord:
        """Join the open batch; return once the batch holding ``draft`` has committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[AuditRecord] = loop.create_future()
        self._batch.append((draft, future))
        if not self._flush_scheduled:
            if not self._hot:
                # The first record since the loop last went round: commit it at once (a lone
                # caller pays no loop turns). ``_cool`` runs after every callback already
                # queued, so records from the rest of this turn's requests batch.
                self._hot = True
                loop.call_soon(self._cool)
                self.flush()
                return future.result()
            self._flush_scheduled = True
            loop.call_soon(self.flush)
        # A caller cancelled while it waits (its client went away) cancels only its future:
        # its draft stays in the batch, so the record is still written.
        return await future

    def _cool(self) -> None:
        self._hot = False

    def flush(self) -> None:
        """Commit the open batch now, in one transaction, and answer its callers."""
        self._flush_scheduled = False
        batch, self._batch = self._batch, []
        if not batch:
            return
        conn = self.audit.db.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                results = self.audit.append_many_in_txn([draft for draft, _ in batch])
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):  # keep the first error
                        conn.execute("ROLLBACK")
                raise
        except BaseException as exc:
            self.audit.forget_head()
            if isinstance(exc, sqlite3.Error):
                log.error("audit store refused a batch of %d records: %s", len(batch), exc)
            for _, future in batch:
                if not future.done():
                    future.set_exception(
                        AuditUnavailable(
                            f"the audit record could not be written ({exc}); "
                            "the action did not happen"
                        )
                    )
            if not isinstance(exc, Exception):
                raise  # KeyboardInterrupt, SystemExit: not ours to swallow
            return
        self.stats.batches += 1
        self.stats.batched_records += sum(isinstance(r, AuditRecord) for r in results)
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():
                continue
            if isinstance(result, AuditRecord):
                future.set_result(result)
            else:
                future.set_exception(result)
        for result in results:
            if isinstance(result, AuditRecord):
                try:
                    self.audit.committed(result)
                except Exception:
                    log.exception("an audit listener failed on record %d", result.seq)

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
