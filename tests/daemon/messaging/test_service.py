"""The messaging service and delivery engine over a scripted fleet (deterministic cases the
real-tmux tests cannot stage: the hour running out, a paste failing, the screen moving
between the check and the paste, a handle moving to another pane)."""

from __future__ import annotations

import asyncio
import getpass
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from openbus.daemon import messaging as messaging_feature
from openbus.daemon.config import parse_config
from openbus.daemon.core.actors import Actor, human
from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.foundation import Foundation
from openbus.daemon.messaging.delivery import DeliveryTimeouts
from openbus.daemon.messaging.fleet import FleetChange, PaneView
from openbus.daemon.messaging.service import MessagingService
from openbus.daemon.pane_owners import PaneOwners
from openbus.daemon.policy_runtime import PolicyRuntime
from openbus.daemon.screens import Reading
from openbus.kernel.errors import Refused, Unavailable
from openbus.kernel.limits import Limits
from openbus.kernel.scopes import Preset
from openbus.kernel.testing import FixedClock, SeededRandom
from tests.support.wait import let_others_run


@dataclass
class FakePane:
    view: PaneView
    composer: str = ""
    submitted: list[str] = field(default_factory=list)
    fail_paste: bool = False
    gate: asyncio.Event | None = None  # a paste waits for this (a slow tmux)
    steal_focus: bool = False  # a menu opens right as the paste arrives


class ScriptedFleet:
    def __init__(self) -> None:
        self.panes: dict[str, FakePane] = {}
        self.locks: dict[str, asyncio.Lock] = {}
        self.queue: asyncio.Queue[FleetChange] = asyncio.Queue()

    def add(self, pane: str, incarnation: str, title: str | None = None, pid: int = 0) -> None:
        view = PaneView(
            pane, incarnation, "claude", "idle", True, 1, f"screen {pane}", title, (pid,)
        )
        self.panes[pane] = FakePane(view)

    def set(self, pane: str, **changes: Any) -> None:
        p = self.panes[pane]
        p.view = replace(p.view, revision=p.view.revision + 1, **changes)
        self.queue.put_nowait(FleetChange("updated", pane))

    def remove(self, pane: str) -> None:
        del self.panes[pane]
        self.queue.put_nowait(FleetChange("removed", pane))

    def view(self, pane: str) -> PaneView | None:
        p = self.panes.get(pane)
        return p.view if p else None

    def resolve(self, handle: str) -> list[PaneView]:
        return [p.view for p in self.panes.values() if p.view.title == handle]

    def send_lock(self, pane: str) -> asyncio.Lock:
        return self.locks.setdefault(pane, asyncio.Lock())

    async def changes(self) -> AsyncIterator[FleetChange]:
        while True:
            yield await self.queue.get()

    def _screen(self, p: FakePane) -> str:
        return f"{p.view.text}|{p.composer}" if p.composer else str(p.view.text)

    async def paste(self, pane: str, text: str) -> None:
        p = self.panes[pane]
        if p.fail_paste:
            raise Unavailable("tmux failed: server exited")
        if p.gate is not None:
            await p.gate.wait()
        if p.steal_focus:
            p.view = replace(p.view, state="menu", composer_empty=None)
            return
        p.composer = text

    async def enter(self, pane: str) -> None:
        p = self.panes[pane]
        p.submitted.append(p.composer)
        p.composer = ""
        p.view = replace(p.view, state="busy", text=f"{p.view.text}+")

    async def key(self, pane: str, key: str) -> None:
        self.panes[pane].composer = ""

    async def capture(self, pane: str) -> str:
        return self._screen(self.panes[pane])

    async def pane_pid(self, pane: str) -> int | None:
        p = self.panes.get(pane)
        return p.view.pids[0] if p else None

    def reparse(self, pane: str, text: str) -> Reading | None:
        p = self.panes[pane]
        if p.view.state != "idle":
            return Reading(p.view.state)  # type: ignore[arg-type]
        return Reading("idle", composer_empty=not p.composer)


@dataclass
class Setup:
    services: Foundation
    clock: FixedClock
    fleet: ScriptedFleet
    messaging: MessagingService
    actors: dict[str, Actor]
    principals: dict[str, str]

    @property
    def human(self) -> Actor:
        return human(getpass.getuser())

    async def send(self, sender: str, target: str, mid: str, text: str = "hi", **kw: Any) -> Any:
        params = {"target": target, "text": text, "message_id": mid, **kw}
        if target.startswith("%") and "incarnation" not in kw:
            params["incarnation"] = self.fleet.panes[target].view.incarnation
        return await self.services.gate.run(self.actors[sender], "message.send", params)

    def message(self, sender: str, mid: str) -> Any:
        return self.messaging.book.get(self.principals[sender], mid)

    def audit(self, mid: str) -> list[str]:
        db = sqlite3.connect(self.services.config.db_path)
        try:
            rows = db.execute("SELECT outcome FROM audit WHERE message_id = ? ORDER BY seq", (mid,))
            return [r[0] for r in rows]
        finally:
            db.close()

    async def settle(self) -> None:
        for _ in range(20):
            await let_others_run()


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    built: list[Foundation] = []

    def build() -> Setup:
        config = parse_config(
            {
                "daemon": {"state_dir": str(tmp_path / "state"), "socket": str(tmp_path / "s")},
                "history": {"claude_config_dirs": [], "codex_homes": []},
            },
            "<test>",
        )
        clock = FixedClock()
        services = Foundation.build(config, clock=clock, random=SeededRandom(3))
        built.append(services)
        fleet = ScriptedFleet()
        messaging = messaging_feature.build(
            gate=services.gate,
            grants=services.grants,
            cards=services.cards,
            connect=services.connect,
            clock=clock,
            policy=services.policy,
            fleet=fleet,
            db=services.db,
            owners=PaneOwners(services.grants, config.hosted),
            timeouts=DeliveryTimeouts(paste=0.05, confirm=0.05),
        )
        actors, principals = {}, {}
        for n, name in enumerate(["a", "b", "c"], start=1):
            pane = f"%{n}"
            fleet.add(pane, f"inc_{name}", title=f"title-{name}", pid=100 + n)
            pid, _t, mint = services.grants.mint(
                harness="claude", owner=getpass.getuser(), preset=Preset.COLLABORATE, launcher=None
            )
            attach = services.grants.attach_pane(pid, pane, 100 + n, None, f"inc_{name}")
            services.gate.record(
                AuditDraft(actor="system", action="t", outcome="ok"), [mint, attach]
            )
            actors[name] = services.grants.get(pid).actor()
            principals[name] = pid
        return Setup(services, clock, fleet, messaging, actors, principals)

    yield build
    for services in built:
        services.db.close()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_message_still_waiting_when_its_hour_ends_is_recorded_expired_before_release(
    make: Callable[[], Setup],
) -> None:
    async def main() -> None:
        s = make()
        await s.send("a", "%2", "m-1")
        message = s.message("a", "m-1")
        s.clock.advance(3600)
        assert s.messaging.sweep() == 1
        assert message.outcome.value == "expired"
        assert s.audit("m-1") == ["queued", "expired"]
        assert s.message("a", "m-1") is None  # released only after the record
        [card] = s.services.cards.listing(getpass.getuser(), pending_only=False)
        assert card.state.value == "cancelled"
        await s.send("a", "%2", "m-1")  # the id is free again
        assert s.audit("m-1") == ["queued", "expired", "queued"]

    run(main())


def test_an_expiry_that_cannot_be_recorded_keeps_the_id_held(make: Callable[[], Setup]) -> None:
    async def main() -> None:
        s = make()
        await s.send("a", "%2", "m-1")
        s.clock.advance(3600)
        real = s.messaging.outcomes._write_outcome

        def failing(message: Any) -> None:
            raise Unavailable("audit store is full")

        s.messaging.outcomes._write_outcome = failing  # type: ignore[method-assign]
        s.messaging.sweep()
        assert s.message("a", "m-1") is not None
        s.messaging.outcomes._write_outcome = real  # type: ignore[method-assign]
        s.messaging.sweep()
        assert s.message("a", "m-1") is None
        assert s.audit("m-1") == ["queued", "expired"]

    run(main())


async def approve(s: Setup, sender: str, mid: str) -> None:
    card = s.message(sender, mid).card_id
    await s.services.gate.run(s.human, "cards.decide", {"card": card, "decision": "approve_pair"})


def test_a_failed_paste_is_unconfirmed_and_the_id_stays_used(make: Callable[[], Setup]) -> None:
    async def main() -> None:
        s = make()
        s.fleet.panes["%2"].fail_paste = True
        await s.send("a", "%2", "m-1")
        await approve(s, "a", "m-1")
        await s.messaging.delivery._drains["%2"]
        message = s.message("a", "m-1")
        assert message.outcome.value == "unconfirmed"
        assert "paste failed" in message.reason
        assert s.audit("m-1") == ["queued", "unconfirmed"]

    run(main())


def test_a_screen_leaving_idle_before_the_text_lands_is_unconfirmed_without_enter(
    make: Callable[[], Setup],
) -> None:
    async def main() -> None:
        s = make()
        s.fleet.panes["%2"].steal_focus = True
        await s.send("a", "%2", "m-1")
        await approve(s, "a", "m-1")
        await s.messaging.delivery._drains["%2"]
        assert s.message("a", "m-1").outcome.value == "unconfirmed"
        assert s.fleet.panes["%2"].submitted == []  # no Enter into the menu

    run(main())


def test_delivery_waits_for_a_changed_screen_and_types_at_the_next_idle(
    make: Callable[[], Setup],
) -> None:
    async def main() -> None:
        s = make()
        engine = s.messaging.delivery
        assert engine is not None
        task = asyncio.ensure_future(engine.run())
        s.fleet.set("%2", state="busy")
        await s.send("a", "%2", "m-1")
        await approve(s, "a", "m-1")
        await s.settle()
        assert s.message("a", "m-1").outcome.value == "queued"
        s.fleet.set("%2", state="idle", composer_empty=False)  # a draft
        await s.settle()
        assert s.message("a", "m-1").outcome.value == "queued"
        s.fleet.set("%2", composer_empty=True)
        await asyncio.wait_for(_until(lambda: s.message("a", "m-1").final), 2)
        assert s.message("a", "m-1").outcome.value == "delivered"
        [typed] = s.fleet.panes["%2"].submitted
        assert typed.startswith(f"[openbus message from {s.actors['a'].name} (pane %1)")
        task.cancel()

    run(main())


def test_a_handle_moving_to_another_pane_needs_that_pairs_consent(
    make: Callable[[], Setup],
) -> None:
    async def main() -> None:
        s = make()
        engine = s.messaging.delivery
        assert engine is not None
        task = asyncio.ensure_future(engine.run())
        s.fleet.set("%2", state="busy")
        await s.send("a", "title-b", "m-1")  # by handle
        await approve(s, "a", "m-1")  # approves the pair a -> b
        message = s.message("a", "m-1")
        assert message.recipient.pane == "%2"
        s.fleet.set("%2", title="renamed")
        s.fleet.set("%3", title="title-b")  # the workstream is now in c's pane
        await asyncio.wait_for(_until(lambda: message.recipient.pane == "%3"), 2)
        assert message.phase.value == "consent"  # a -> c was never approved
        cards = s.services.cards.listing(getpass.getuser())
        assert [c.target for c in cards] == ["%3"]
        await approve(s, "a", "m-1")
        await asyncio.wait_for(_until(lambda: message.final), 2)
        assert message.outcome.value == "delivered"
        assert s.fleet.panes["%3"].submitted and not s.fleet.panes["%2"].submitted
        assert s.audit("m-1") == ["queued", "delivered"]
        task.cancel()

    run(main())


def test_a_gone_pane_cancels_messages_addressed_by_pane_id(make: Callable[[], Setup]) -> None:
    async def main() -> None:
        s = make()
        engine = s.messaging.delivery
        assert engine is not None
        task = asyncio.ensure_future(engine.run())
        s.fleet.set("%2", state="busy")
        await s.send("a", "%2", "m-1")
        s.fleet.remove("%2")
        await asyncio.wait_for(_until(lambda: s.message("a", "m-1").final), 2)
        assert s.message("a", "m-1").outcome.value == "cancelled"
        assert s.services.cards.listing(getpass.getuser()) == []
        task.cancel()

    run(main())


POLL = 0.005


async def _until(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    """Wait for ``predicate`` on the test's loop, failing after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() >= deadline:
            raise AssertionError("timed out waiting for the condition")
        await asyncio.sleep(POLL)


def test_an_org_policy_tightens_the_limits_on_the_next_call(
    make: Callable[[], Setup], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        s = make()
        await s.send("a", "%2", "m-1", text="x" * 50)
        tightened = Limits(message_bytes=20)
        monkeypatch.setattr(PolicyRuntime, "limits", property(lambda self: tightened))
        with pytest.raises(Refused, match="20-byte cap"):
            await s.send("a", "%2", "m-2", text="x" * 50)
        assert s.message("a", "m-2") is None

    run(main())


def test_revocation_waits_for_a_typing_attempt_and_nothing_lands_after_it_returns(
    make: Callable[[], Setup],
) -> None:
    async def main() -> None:
        s = make()
        slow = s.fleet.panes["%2"]
        slow.gate = asyncio.Event()
        await s.send("a", "%2", "m-1")
        await approve(s, "a", "m-1")
        drain = s.messaging.delivery._drains["%2"]
        await _until(lambda: s.message("a", "m-1").phase.value == "typing")
        await s.send("c", "%2", "m-2")  # waits for its card
        toggle = asyncio.ensure_future(
            s.services.gate.run(s.human, "connect.set", {"pane": "%2", "preset": "off"})
        )
        await s.settle()
        assert not toggle.done()  # the Off waits on B's send lock
        slow.gate.set()
        await asyncio.wait_for(toggle, 2)
        # the attempt under way finished before the Off took effect; the rest is cancelled
        assert s.message("a", "m-1").outcome.value == "delivered"
        assert s.message("c", "m-2").outcome.value == "cancelled"
        await drain
        assert len(slow.submitted) == 1

    run(main())
