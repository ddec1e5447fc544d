"""The human's keys into a pane: answering the menu on its screen, and typing to an idle agent.

Theory of operation
-------------------
Two human actions, each one call through the gate and one audit record, typed through the
fleet's one keystroke path (``messaging.fleet``: paste, Enter, a named key) under the pane's
send lock, the lock message delivery and revocation take too, so nothing else types into the
pane meanwhile:

* ``pane.answer`` presses one option's key of the menu the pane shows (a permission prompt, a
  question). The caller names the pane's incarnation and the fingerprint of the menu it was
  shown (``screens.Menu.fingerprint``: question, detail, options). Holding the lock, the
  daemon captures the screen afresh, re-parses it and presses the key only if the pane is
  still that process and the menu on screen now is the very one the person saw; otherwise
  the answer is refused (``Conflict``) saying what changed, so a tap meant for one question
  can never answer another.
* ``pane.type`` types a line of text into an agent that is idle with an empty composer (a
  fresh capture must say so), as one bracketed paste, then presses Enter once the composer
  shows it. A pane that is busy, in a menu, holding a draft, a shell or not a known agent is
  refused with the reason.

A pane the caller does not see (``PaneOwners``) is not found, as everywhere else.
"""

from __future__ import annotations

import asyncio
from typing import Any

from openbus.daemon.core.actions import Action
from openbus.daemon.core.consent import Tier
from openbus.daemon.gate import Call, Gate
from openbus.daemon.messaging.delivery import PASTE_BURST_SECONDS
from openbus.daemon.messaging.fleet import Fleet, PaneView, normalize, until
from openbus.daemon.pane_owners import PaneOwners
from openbus.daemon.screens import Reading
from openbus.kernel.errors import BadRequest, Conflict, NotFound
from openbus.kernel.ids import check_pane_id

ANSWER = Action("pane.answer", tier=Tier.HUMAN, outside_effects=True)
TYPE = Action("pane.type", tier=Tier.HUMAN, outside_effects=True)
MAX_TEXT = 4000
LANDED_TIMEOUT = 3.0  # the pasted text shows in the composer within this
AGENTS = frozenset({"claude", "codex", "opencode", "omp", "gemini"})


def _text(call: Call, name: str) -> str:
    value = call.params.get(name)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{name} is required", field=name)
    return value


class PaneInput:
    def __init__(self, gate: Gate, fleet: Fleet, owners: PaneOwners) -> None:
        self.fleet = fleet
        self.owners = owners
        gate.register(ANSWER, self._answer)
        gate.register(TYPE, self._type)

    def _view(self, call: Call) -> PaneView:
        pane = check_pane_id(call.params.get("pane"), "pane")
        call.target = pane
        view = self.fleet.view(pane)
        if view is None or not self.owners.view(call.actor).sees(pane, view.incarnation):
            raise NotFound(f"no pane {pane} in the directory", field="pane")
        if _text(call, "incarnation") != view.incarnation:
            raise Conflict(
                f"{pane} is no longer the process you saw: it now runs another one",
                field="incarnation",
            )
        return view

    async def _fresh(self, view: PaneView) -> tuple[Reading, str]:
        """The pane's screen now, re-parsed, and still the process the directory saw."""
        pid = await self.fleet.pane_pid(view.pane)
        if pid is None or (view.pids and pid != view.pids[0]):
            raise Conflict(
                f"{view.pane} is no longer the process you saw: it now runs another one",
                field="incarnation",
            )
        text = normalize(await self.fleet.capture(view.pane))
        reading = self.fleet.reparse(view.pane, text)
        if reading is None:
            raise NotFound(f"no pane {view.pane} in the directory", field="pane")
        return reading, text

    async def _answer(self, call: Call) -> Any:
        view = self._view(call)
        fingerprint = _text(call, "fingerprint")
        key = _text(call, "key")
        async with self.fleet.send_lock(view.pane):
            reading, _ = await self._fresh(view)
            menu = reading.menu if reading.state == "menu" else None
            if menu is None:
                raise Conflict(
                    f"{view.pane} is no longer asking anything (it is {reading.state} now): "
                    "nothing was pressed",
                    field="fingerprint",
                )
            if menu.fingerprint() != fingerprint:
                raise Conflict(
                    f"the screen of {view.pane} changed since it was shown; it now asks: "
                    f"{menu.question} Nothing was pressed: answer the new question",
                    field="fingerprint",
                )
            option = next((o for o in menu.options if o.key == key), None)
            if option is None:
                raise BadRequest(f"{key!r} is not one of this menu's options", field="key")
            call.details.update(
                {"question": menu.question, "option": option.label, "key": option.key}
            )
            await self.fleet.key(view.pane, option.key)
        return {"pane": view.pane, "pressed": option.key, "option": option.label}

    async def _type(self, call: Call) -> Any:
        view = self._view(call)
        text = _text(call, "text")
        if len(text) > MAX_TEXT:
            raise BadRequest(f"at most {MAX_TEXT} characters", field="text")
        if any(ord(c) < 32 and c not in "\n\t" for c in text) or "\x7f" in text:
            raise BadRequest("control characters cannot be typed", field="text")
        if view.harness not in AGENTS:
            raise Conflict(
                f"{view.pane} is not a known agent ({view.harness}): text is typed only into "
                "an agent's composer",
                field="pane",
            )
        async with self.fleet.send_lock(view.pane):
            reading, before = await self._fresh(view)
            if reading.state != "idle" or reading.composer_empty is not True:
                doing = (
                    "holding a draft in its composer"
                    if reading.state == "idle"
                    else f"{reading.state}, not idle"
                )
                raise Conflict(
                    f"{view.pane} is {doing}: text is typed only into an idle, empty composer",
                    field="pane",
                )
            call.details["chars"] = len(text)
            await self.fleet.paste(view.pane, text)

            def landed(now: Reading, screen: str) -> bool:
                return screen != before and now.state == "idle" and now.composer_empty is False

            if await until(self.fleet, view.pane, landed, LANDED_TIMEOUT) is None:
                call.details["submitted"] = False
                return {"pane": view.pane, "typed": True, "submitted": False}
            burst = PASTE_BURST_SECONDS.get(view.harness, 0.0)
            if burst:
                await asyncio.sleep(burst)
            await self.fleet.enter(view.pane)
        call.details["submitted"] = True
        return {"pane": view.pane, "typed": True, "submitted": True}
