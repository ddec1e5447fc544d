"""Delivery: type a queued message into its recipient's pane, once, at idle, and confirm it.

Theory of operation
-------------------
The engine follows the directory's change stream (no polling per message). On a change to a
pane it reconciles the messages addressed there:

* the pane is gone or its incarnation changed: a message addressed by pane id is finalized
  ``cancelled`` at once (the process it was for is gone); one addressed by a workstream handle
  is re-resolved: a handle now answering to another pane is a new recipient, so the message
  moves there only under that pair's consent (an approval, or a fresh card);
* the pane is idle with an empty composer and messages wait for it: a drain task runs.

The drain takes the pane's send lock (which revocation also takes) and, holding it, checks
again: the message is still queued, the incarnation is the one it was addressed to, a handle
still resolves to exactly this pane, both ends still hold their scopes, the directory's
reading is idle with an empty composer, and a fresh capture is the very screen that reading
came from, and tmux still reports the pane's process the directory saw (a directory that has
not caught up with a respawn must not pass a new process off as the old incarnation). Any
transient difference leaves the message queued for the next idle transition.
Then, once and only once (``book.begin_typing``), it types ONE bracketed paste holding the
daemon's provenance line and the text, each of its lines behind a quote bar
(``typed_form``: the sender's words can never look like the stamp), waits until the
composer shows it (the screen still idle, the composer no longer empty), presses Enter (for
Codex and Gemini CLI only after their paste windows; for Gemini CLI again should it have become
a line break in the draft, ``ENTER_AGAIN``), and re-parses until the turn started or the
composer emptied:

* ``delivered``: the paste landed in the idle composer and was submitted;
* ``unconfirmed``: the paste failed partway, the screen left the checked idle state before
  the text landed (then Enter is not pressed), or the submission was not seen in time.

Either way the id stays used, so a retry can never type it again, and the composer is left as
the attempt found it (``_leave_composer``): while the screen is idle with text in the composer,
the harness's own clear key is pressed (``CLEAR_KEYS``) and the screen re-parsed until the
composer reads empty. A composer that cannot be seen empty again would hold the pane out of
every later delivery, so the pane is marked as needing the human: a ``composer_left`` card
(``Outcomes.composer_left``), and the outcome's reason says which it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from openbus.daemon.core.message_text import QUOTE_BAR, line_count, typed_form
from openbus.daemon.core.messaging import CardNeed, Message, MessageBook, Outcome, Phase
from openbus.daemon.messaging.addressing import Addressing
from openbus.daemon.messaging.fleet import FleetChange, PaneView, normalize, until
from openbus.daemon.messaging.outcomes import Outcomes
from openbus.daemon.screens import Reading
from openbus.kernel.errors import OpenbusError, Refused

log = logging.getLogger("openbus.messaging")

PASTE_TIMEOUT = 3.0
CONFIRM_TIMEOUT = 8.0
# Codex treats a burst of fast input as a paste and holds an Enter that follows too closely
# (harnesses.md: 40+ characters and Enter at once stayed unsent; Enter 0.3 s later submitted).
# Gemini CLI (0.59, 0.61) takes an Enter within 40 ms of a bracketed paste as a newline in the
# draft (a terminal it does not trust to mark pastes, as tmux's is to it): the same margin.
PASTE_BURST_SECONDS = {"codex": 0.4, "gemini": 0.4}
# On a loaded host Gemini CLI can still be inside that window when the Enter comes (its timer
# and its re-render wait their turn): the draft then gains a line break instead. Seen as the
# screen changing while the composer still holds the text, Enter is pressed again after the
# window once more, this many more times at most; an Enter that finds the composer empty does
# nothing in Gemini CLI.
ENTER_AGAIN = {"gemini": 2}  # each further Enter waits the harness's paste window again
# What empties each harness's composer, pressed only while the screen is idle with text in
# the composer: Claude Code's Ctrl-U drops a pasted block (a typed line per press); Codex's
# Ctrl-C empties its whole composer at once (on an empty one it would offer to quit, so it is
# pressed once).
CLEAR_KEYS = {"claude": ("C-u", 16), "codex": ("C-c", 1)}
CLEAR_TIMEOUT = 2.0  # each press: the composer empties or changes


def provenance(message: Message) -> str:
    """The line the daemon stamps above every message: who sent it, never the sender's words,
    and how many lines of them follow behind the quote bar (``core.message_text``)."""
    where = f" (pane {message.sender_pane})" if message.sender_pane else ""
    if message.origin:
        where += f" \u00b7 origin {message.origin}"
    lines = line_count(message.text)
    return (
        f"[openbus message from {message.sender_actor}{where} \u00b7 id {message.message_id} "
        f"\u00b7 {'1 line follows' if lines == 1 else f'{lines} lines follow'}, each behind "
        f"{QUOTE_BAR.strip()} "
        "\u00b7 reply with send_message]"
    )


def payload(message: Message) -> str:
    return typed_form(provenance(message), message.text)


@dataclass(frozen=True)
class DeliveryTimeouts:
    paste: float = PASTE_TIMEOUT  # the pasted text shows in the composer
    confirm: float = CONFIRM_TIMEOUT  # after Enter, the composer empties or the turn starts


DEFAULT_TIMEOUTS = DeliveryTimeouts()


class DeliveryEngine:
    def __init__(
        self,
        book: MessageBook,
        addressing: Addressing,
        outcomes: Outcomes,
        timeouts: DeliveryTimeouts,
    ) -> None:
        self.book = book
        self.addressing = addressing
        self.outcomes = outcomes
        self.fleet = addressing.fleet
        self.paste_timeout = timeouts.paste
        self.confirm_timeout = timeouts.confirm
        self._drains: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        self.attempts = 0

    # ------------------------------------------------------------------ following the fleet

    async def run(self) -> None:
        """Follow the directory's changes until cancelled."""
        async for change in self.fleet.changes():
            try:
                self.on_change(change)
            except Exception:
                log.exception("messaging: reconciling %s failed", change)

    def on_change(self, change: FleetChange) -> None:
        if change.pane is None or change.kind == "resync":
            panes = self.book.panes_waiting()
        else:
            panes = {change.pane}
        for pane in sorted(panes):
            self.reconcile(pane)
        self._follow_handles()

    def reconcile(self, pane: str) -> None:
        messages = self.book.addressed_to(pane)
        if not messages:
            return  # (nothing for the pane: most changes of a fleet ask no look at its view)
        view = self.fleet.view(pane)
        for message in messages:
            if message.phase is Phase.TYPING:
                continue
            if view is None or view.incarnation != message.recipient.incarnation:
                if message.target.handle is None:
                    why = "the pane is gone" if view is None else "the pane's process changed"
                    self.outcomes.end_waiting(message, Outcome.CANCELLED, why + " (incarnation)")
                else:
                    self.follow_handle(message)
        if view is not None and view.deliverable and self.book.waiting_for(pane):
            self.kick(pane)

    def _follow_handles(self) -> None:
        for message in self.book.by_handle():
            if message.phase in (Phase.QUEUED, Phase.CONSENT):
                self.follow_handle(message)

    def follow_handle(self, message: Message) -> None:
        """A handle resolving elsewhere is a new recipient: move under that pair's consent."""
        handle = message.target.handle
        assert handle is not None
        try:
            found = self.addressing.resolve_handle(handle, message.sender)
        except OpenbusError:
            return
        if len(found) != 1:
            return  # unresolvable for now: it waits (and expires with its hour)
        view = found[0]
        current = message.recipient
        if view.pane == current.pane and view.incarnation == current.incarnation:
            return
        old_card = message.card_id
        try:
            recipient = self.addressing.recipient_for(
                view, control_sender=message.sender == "control"
            )
            need = self.book.retarget(
                message,
                recipient,
                pair_approved=self.addressing.pair_approved(message.sender, recipient),
                control=message.sender == "control",
            )
        except Refused as exc:
            self.outcomes.end_waiting(message, Outcome.REFUSED, f"the handle moved: {exc.message}")
            return
        if old_card is not None and old_card != message.card_id:
            self.outcomes.cancel_card(old_card)
        if need is CardNeed.NONE:
            self.outcomes.record_move(message, None)
            self.kick(view.pane)
        else:
            self.outcomes.raise_card(message, need)

    # ------------------------------------------------------------------ draining one pane

    def kick(self, pane: str) -> None:
        task = self._drains.get(pane)
        if task is not None and not task.done():
            self._again.add(pane)
            return
        self._drains[pane] = asyncio.get_running_loop().create_task(self._drain(pane))

    async def _drain(self, pane: str) -> None:
        try:
            while True:
                self._again.discard(pane)
                waiting = self.book.waiting_for(pane)
                if not waiting:
                    return
                view = self.fleet.view(pane)
                if view is None:
                    self.reconcile(pane)
                    return
                if not view.deliverable:
                    return
                async with self.fleet.send_lock(pane):
                    result = await self._attempt(waiting[0], pane)
                if result == "wait" and pane not in self._again:
                    return
        except Exception:
            log.exception("messaging: delivery to %s failed", pane)
        finally:
            self._drains.pop(pane, None)

    async def _attempt(self, message: Message, pane: str) -> str:
        """One guarded typing attempt, under the pane's send lock. "next": the message moved
        on (try the next one); "wait": the pane is not ready (wait for its next change)."""
        if message.phase is not Phase.QUEUED or message.recipient.pane != pane:
            return "next"
        view = self.fleet.view(pane)
        if view is None or view.incarnation != message.recipient.incarnation:
            self.reconcile(pane)
            return "next"
        if message.target.handle is not None:
            found = self.addressing.resolve_handle(message.target.handle, message.sender)
            if len(found) != 1 or (found[0].pane, found[0].incarnation) != (pane, view.incarnation):
                self.follow_handle(message)
                return "next" if len(found) == 1 else "wait"
        if not self.addressing.reachable_now(message):
            self.outcomes.end_waiting(message, Outcome.CANCELLED, "a grant was withdrawn")
            return "next"
        if not view.deliverable:
            return "wait"
        try:
            # the incarnation once more, from tmux itself: a directory that has not caught up
            # with a respawned pane must not make the new process look like the old one
            pid = await self.fleet.pane_pid(pane)
            screen = normalize(await self.fleet.capture(pane))
        except OpenbusError:
            return "wait"
        if pid is None or (view.pids and pid != view.pids[0]):
            return "wait"  # the directory will report the new process: then it is cancelled
        now = self.fleet.view(pane)
        if (
            message.phase is not Phase.QUEUED
            or now is None
            or now.revision != view.revision
            or now.incarnation != view.incarnation
            or screen != view.text
        ):
            return "wait"
        self.book.begin_typing(message)
        self.attempts += 1
        outcome, reason = await self._type(message, pane, view, screen)
        left = False
        if outcome is Outcome.UNCONFIRMED:
            cleared = await self._leave_composer(pane, view.harness)
            left = not cleared
            reason = f"{reason}; " + (
                "the composer was left as found"
                if cleared
                else "the composer could not be seen empty again: a card asks the human"
            )
        self.book.end_typing(message, outcome, reason)
        self.outcomes.record_outcome(message)
        if left:
            self.outcomes.composer_left(message)
        return "next"

    async def _type(
        self, message: Message, pane: str, view: PaneView, before: str
    ) -> tuple[Outcome, str | None]:
        started = time.monotonic()
        try:
            await self.fleet.paste(pane, payload(message))
        except OpenbusError as exc:
            return Outcome.UNCONFIRMED, f"the paste failed partway: {exc.message}"

        def in_composer(reading: Reading, text: str) -> bool:
            return text != before and reading.state == "idle" and reading.composer_empty is False

        landed = await self._until(pane, in_composer, self.paste_timeout)
        if landed is None:
            return (
                Outcome.UNCONFIRMED,
                "the screen left the checked idle state before the text landed; Enter was not "
                "pressed",
            )
        burst = PASTE_BURST_SECONDS.get(view.harness, 0.0) - (time.monotonic() - started)
        if burst > 0:
            await asyncio.sleep(burst)

        def submitted(reading: Reading, text: str) -> bool:
            return reading.state == "busy" or (
                reading.state == "idle" and reading.composer_empty is True and text != before
            )

        deadline = time.monotonic() + self.confirm_timeout
        again = ENTER_AGAIN.get(view.harness, 0)
        shown = landed[1]
        while True:
            try:
                await self.fleet.enter(pane)
            except OpenbusError as exc:
                return Outcome.UNCONFIRMED, f"Enter could not be sent: {exc.message}"

            def settled(
                reading: Reading, text: str, last: str = shown, more: bool = again > 0
            ) -> bool:
                # submitted, or (where Enter may have become a line break) a changed screen
                # with the text still in the composer
                return submitted(reading, text) or (
                    more and text != last and in_composer(reading, text)
                )

            seen = await self._until(pane, settled, max(0.0, deadline - time.monotonic()))
            if seen is None:
                return Outcome.UNCONFIRMED, "the submission could not be confirmed on screen"
            if submitted(*seen):
                return Outcome.DELIVERED, None
            again -= 1
            shown = seen[1]
            # the window again: the Enter just taken as a line break shows it had not closed
            await asyncio.sleep(PASTE_BURST_SECONDS.get(view.harness, 0.0))

    async def _leave_composer(self, pane: str, harness: str) -> bool:
        """After an unconfirmed attempt: empty what it left in the composer with the harness's
        own clear key, pressed only while the screen is idle with text in the composer. True
        once a re-parse reads the composer empty; False if it cannot be seen empty."""
        key, presses = CLEAR_KEYS.get(harness, CLEAR_KEYS["claude"])

        def idle(reading: Reading, text: str) -> bool:
            return reading.state == "idle" and reading.composer_empty is not None

        seen = await self._until(pane, idle, CLEAR_TIMEOUT)
        for _ in range(presses):
            if seen is None:
                return False
            if seen[0].composer_empty is True:
                return True
            try:
                await self.fleet.key(pane, key)
            except OpenbusError:
                return False

            def changed(reading: Reading, text: str, last: str = seen[1]) -> bool:
                return idle(reading, text) and (reading.composer_empty is True or text != last)

            seen = await self._until(pane, changed, CLEAR_TIMEOUT)
        return seen is not None and seen[0].composer_empty is True

    async def _until(
        self, pane: str, predicate: Callable[[Reading, str], bool], timeout: float
    ) -> tuple[Reading, str] | None:
        """The first reading (and its screen) that satisfies ``predicate``, or None."""
        return await until(self.fleet, pane, predicate, timeout)

    async def close(self) -> None:
        for task in list(self._drains.values()):
            task.cancel()
        for task in list(self._drains.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
