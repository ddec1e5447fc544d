"""Control and routing in the daemon: requests, threads, the feed, control's act actions.

Theory of operation
-------------------
* ``control.ask`` (human): a front end's request (``openbus ask``, the page's request box)
  becomes a ``request`` entry in the requester's thread. The fast dispatcher
  (``core.dispatch``) decides over the directory as it is now; its decision and reason are an
  entry (``route``) and in the call's audit record. Direct: the text is sent to the one
  matching pane as control (``message.send`` with the pane's incarnation, the screen
  revision the decision was made on, and the request as origin, so the recipient's stamp
  names it), an ``input`` entry links the pane to the request, and the message's outcome is
  followed: if it ends undelivered (the pane was recycled, exited, changed), the request falls
  back to control. Otherwise (or if the send is refused: the screen changed between the
  decision and the send) the request is ``delegated``: a ``thread`` change on the feed wakes control
  blocked in ``wait_for_changes``; a control whose turn ended gets a line typed into its
  pane; with no control running, the request starts it (first use, as the requester: one
  start for requests arriving together), and its first wait answers with what waits.
* ``threads.get`` (human): the requester's thread, or one request with what it caused;
  ``wait_seconds`` blocks until a newer entry arrives (control's reply), event-driven.
* ``directory.wait`` (scope read; the ``wait_for_changes`` tool): the feed's changes since a
  revision, at most 50 s (``daemon.control.feed``). Thread entries are shown to control only.
* Act actions (scope ``act``: control only; no grant, preset or policy gives it to anyone
  else, and ``core.actions.authorize`` refuses it to every ordinary agent):

  - ``control.reply``: lands in the request's thread with an origin link;
  - ``control.hand_off``: a brief sent to one pane (message send as control, origin linked:
    the hop limit applies), an ``input`` entry on the pane. With ``open`` (a launcher, and
    a folder and title) instead of ``to`` (exactly one of the two), the pane is a new window
    opened as ``open_window`` opens one: the same card (its payload carries the hand-off, so
    it survives a restart), approved by the human, launches it as them; the call's record
    names the card and a ``note`` in the thread says what waits. Once the new agent is first
    idle with an empty composer (``LaunchService.until_ready``, the wait a started session's
    brief takes), the brief is the same message (its id ``handoff-<request>-<n>`` fixed at
    the call, so at most once), and its ``input`` entry and the request's move are written
    with a system record (``control.handed_off``). A declined, expired or cancelled card is
    a note (``control.hand_off_note``) on the thread and on control's feed: nothing typed,
    the request not moved;
  - ``control.press_key``: checked against the incarnation and the screen revision the
    caller saw; a key that answers an agent's menu (a permission prompt) or goes to a shell
    pane is a card showing the question on screen, and nothing is typed until the human
    approves (then the incarnation is checked again);
  - ``control.open_window``: a configured launcher only (no command); a card, whose
    approval launches it as the human who approved;
  - ``control.resume_session``: a past session, reopened through the ``Resumer`` port as the
    human who started control; a card, whose approval resumes it.

  Both open a pane without a card once the human allowed "control may open panes"
  (``control.allow_panes``, approval kind ``open_panes`` on ``control:<user>``: it outlives
  control's re-seeds, and the human takes it back with ``allow: false``).

* Re-seed (``tick``): control's transcript is read as it grows (``control.reseed``); past
  ``[control] reseed_tokens`` of context, or once it edited files or ran commands, control is
  revoked, its pane closed and a fresh one started with the charter and the directory; the
  restart is an audit record (``control.reseed``) and a line in the ``control`` thread.
* ``pane_section``: the origins of a pane's inputs, for the human's ``openbus pane %3``.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from openbus.daemon.cards import Cards
from openbus.daemon.config import Config, Launcher
from openbus.daemon.control.charter import first_prompt
from openbus.daemon.control.feed import ControlFeed
from openbus.daemon.control.reseed import TranscriptFollower
from openbus.daemon.control.threads import ThreadStore
from openbus.daemon.core.actions import Action
from openbus.daemon.core.actors import CONTROL, human
from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.core.consent import Approval, ApprovalKind, Card, CardState, Tier
from openbus.daemon.core.dispatch import PaneFacts, Route, RoutingIndex, decide
from openbus.daemon.core.message_text import check_text
from openbus.daemon.core.messaging import Outcome
from openbus.daemon.core.sessions import brief_line
from openbus.daemon.core.threads import (
    Entry,
    EntryKind,
    RequestEvent,
    RequestState,
    check_request,
    may,
    move,
    parse_entry_id,
)
from openbus.daemon.directory import Directory
from openbus.daemon.directory import Entry as PaneEntry
from openbus.daemon.feature import Feature
from openbus.daemon.gate import Call, Gate, Write
from openbus.daemon.grants import CONTROL_ROLE, Grants, Principal
from openbus.daemon.launch import LaunchService
from openbus.daemon.launch_plan import PROMPTABLE, connect_unavailable, one_shot
from openbus.daemon.messaging.service import MessagingService
from openbus.daemon.pane_owners import PaneOwners
from openbus.daemon.resume import Resumer, session_ref
from openbus.daemon.state import StateDB
from openbus.daemon.tmux.adapter import Tmux
from openbus.kernel.clock import Clock
from openbus.kernel.errors import (
    BadRequest,
    Conflict,
    NotFound,
    OpenbusError,
    Refused,
    Unavailable,
)
from openbus.kernel.ids import check_pane_id
from openbus.kernel.scopes import Scope

log = logging.getLogger("openbus.control")

ASK = Action("control.ask", None, Tier.HUMAN, outside_effects=True)
THREADS = Action("threads.get", None, Tier.HUMAN)
WAIT = Action("directory.wait", Scope.READ, Tier.READ)
REPLY = Action("control.reply", Scope.ACT, Tier.NEVER_FOR_PEERS, outside_effects=True, humans=False)
HAND_OFF = Action(
    "control.hand_off", Scope.ACT, Tier.NEVER_FOR_PEERS, outside_effects=True, humans=False
)
PRESS_KEY = Action(
    "control.press_key", Scope.ACT, Tier.NEVER_FOR_PEERS, outside_effects=True, humans=False
)
START = Action("control.start", None, Tier.HUMAN, outside_effects=True)
OPEN_WINDOW = Action(
    "control.open_window", Scope.ACT, Tier.NEVER_FOR_PEERS, outside_effects=True, humans=False
)
RESUME_SESSION = Action(
    "control.resume_session", Scope.ACT, Tier.NEVER_FOR_PEERS, outside_effects=True, humans=False
)
ALLOW_PANES = Action("control.allow_panes", None, Tier.HUMAN, outside_effects=True)

CONTROL_SESSION = "control"
CONTROL_THREAD = "control"  # control's own thread: its starts and re-seeds
KEY_CARD = "control_key"
WINDOW_CARD = "control_window"
RESUME_CARD = "control_resume"
MAX_REPLY_CHARS = 8000
MAX_THREAD_WAIT = 50.0
FOLLOW_SECONDS = 3600.0  # a direct send's outcome is followed for the message's hour


def control_unfit(launcher: Launcher) -> str | None:
    """Why a launcher cannot run control (it must be connected, for its tools, and take the
    charter as its first prompt), or None."""
    unavailable = connect_unavailable(launcher)
    if unavailable is not None:
        return unavailable
    if launcher.harness not in PROMPTABLE:
        return f"{launcher.harness} takes no first prompt, which carries control's charter"
    if one_shot(launcher):
        return "it runs the harness one-shot, which ends after one turn; control waits for changes"
    return None


def facts_of(entry: PaneEntry) -> PaneFacts:
    return PaneFacts(
        pane=entry.pane_id,
        incarnation=entry.incarnation,
        revision=entry.revision,
        harness=entry.harness,
        state=entry.state,
        cwd=entry.info.cwd,
        branch=entry.branch,
        title=entry.title,
        pr_links=tuple(entry.pr_links),
    )


class ControlService(Feature):
    name = "control"

    def __init__(
        self,
        *,
        gate: Gate,
        grants: Grants,
        cards: Cards,
        directory: Directory,
        tmux: Tmux,
        owners: PaneOwners,
        messaging: MessagingService,
        launch: LaunchService,
        resumer: Resumer,
        config: Config,
        clock: Clock,
        db: StateDB,
    ) -> None:
        self.gate = gate
        self.grants = grants
        self.cards = cards
        self.directory = directory
        self.tmux = tmux
        self.owners = owners
        self.messaging = messaging
        self.launch = launch
        self.resumer = resumer
        self.config = config
        self.clock = clock
        self.threads = ThreadStore(db)
        self.feed = ControlFeed(directory, clock)
        self._index: tuple[int, RoutingIndex] | None = None
        self._entry_added = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.routed = {"direct": 0, "control": 0, "fallback": 0}
        self.reseeds = 0
        self.looks = 0  # re-seed looks at a running control's transcript (one a tick)
        self.nudges = 0  # lines typed into control's pane to wake it for a request
        self._control_waiting = 0  # control's wait_for_changes calls blocked right now
        self._follower: TranscriptFollower | None = None
        self._reseeding = False
        self._starting = asyncio.Lock()
        cards.listeners.append(self._on_card)
        gate.register(ASK, self.ask)
        gate.register(THREADS, self.thread)
        gate.register(WAIT, self.wait)
        gate.register(REPLY, self.reply)
        gate.register(HAND_OFF, self.hand_off)
        gate.register(PRESS_KEY, self.press_key)
        gate.register(OPEN_WINDOW, self.open_window)
        gate.register(RESUME_SESSION, self.resume_session)
        gate.register(ALLOW_PANES, self.allow_panes)
        gate.register(START, self.start_control)

    # ------------------------------------------------------------------ feature

    async def start(self) -> None:
        self.feed.start()
        for request in self.threads.open_requests():
            self.feed.thread_entry(request.to_dict())

    async def stop(self) -> None:
        await self.feed.stop()
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def health(self) -> dict[str, Any]:
        return {
            "feed_revision": self.feed.revision,
            "routed": dict(self.routed),
            "reseeds": self.reseeds,
            "looks": self.looks,
            "nudges": self.nudges,
            # control's context as its transcript last showed it (None: not followed)
            "context_tokens": self._follower.watch.context_tokens if self._follower else None,
        }

    async def tick(self) -> None:
        await self.check_reseed()

    async def check_reseed(self) -> None:
        """Re-seed control when its transcript shows its context past the limit or project
        work (``core.reseed``): a fresh control with the charter and the directory."""
        current = self.grants.control()
        if current is None:
            self._follower = None
            return
        if self._follower is None or self._follower.principal != current.id:
            launcher = self.config.launchers.get(current.launcher or "")
            self._follower = (
                TranscriptFollower.of(current, launcher) if launcher is not None else None
            )
        self.looks += 1
        if self._follower is None:
            return
        limit = self.config.control.reseed_tokens
        watch = self._follower.read()
        reason = watch.verdict(limit)
        if watch.born_over(limit) and not self._follower.told:
            self._follower.told = True
            self._control_note(
                "control.too_large",
                current,
                f"control's first request already carried {watch.first_context} tokens, past "
                f"reseed_tokens ({limit}): it is not re-seeded for size, since a fresh control "
                "would start as large (raise [control] reseed_tokens)",
            )
        if reason is None or self._reseeding:
            return
        self._reseeding = True
        try:
            await self._reseed(current, reason)
        finally:
            self._reseeding = False

    def _control_note(
        self, action: str, principal: Principal, text: str, reason: str | None = None
    ) -> None:
        """A line in control's own thread, with its system record."""
        note = Entry(
            seq=self.threads.next_seq(),
            thread=CONTROL_THREAD,
            kind=EntryKind.NOTE,
            time=self.clock.now(),
            actor="system",
            text=text,
            pane=principal.pane_id,
            incarnation=principal.incarnation,
        )
        self._recorded(
            action,
            principal.pane_id,
            {"principal": principal.id, "reason": reason or text},
            [self.threads.add(note)],
        )

    async def _reseed(self, old: Principal, reason: str) -> None:
        self._control_note("control.reseed", old, f"control was re-seeded: {reason}", reason)
        self.reseeds += 1
        self._follower = None
        await self.launch.revoke(old, f"re-seeded: {reason}")
        if old.pane_id is not None:
            await self.launch.close_pane(old.pane_id)  # (and a harness that ignores the hangup)
        try:
            await self.gate.run(human(old.owner), "control.start", {})
        except OpenbusError as exc:
            log.error("control could not be started again after its re-seed: %s", exc.message)

    def pane_section(self, pane: str) -> dict[str, Any]:
        """What a pane received because of front-end requests, each with its request."""
        out = []
        for entry in self.threads.for_pane(pane):
            if entry.kind is not EntryKind.INPUT:
                continue
            row = entry.to_dict()
            if entry.origin is not None:
                with contextlib.suppress(OpenbusError):
                    request = self.threads.get(parse_entry_id(entry.origin))
                    row["request"] = {"id": request.id, "text": request.text, "by": request.thread}
            out.append(row)
        return {"origins": out}

    # ------------------------------------------------------------------ the session

    async def start_control(self, call: Call) -> Any:
        """Start the control session (tmux session ``control``), unless it already runs."""
        current = self.grants.control()
        if current is not None and await self.launch.ensure_live(current):
            call.details.update({"pane": current.pane_id, "started": False})
            return {"started": False, "pane": current.pane_id, "principal": current.id}
        launcher = self.config.control.launcher
        why_not = control_unfit(self.config.launchers[launcher])
        if why_not is not None:
            raise Unavailable(f"control cannot run on launcher {launcher!r}: {why_not}")
        first_use = call.params.get("first_use")
        if first_use is not None:
            call.details["first_use"] = str(first_use)  # the request that needed control
        call.params = {
            "launcher": launcher,
            "preset": "collaborate",
            "prompt": first_prompt(self.directory.snapshot()["panes"]),
        }
        launched = await self.launch.execute(call, role=CONTROL_ROLE, session=CONTROL_SESSION)
        call.details["started"] = True
        return {"started": True, **launched}

    def control_pane(self) -> str | None:
        current = self.grants.control()
        return current.pane_id if current is not None else None

    # ------------------------------------------------------------------ routing

    def index(self) -> RoutingIndex:
        """The routing index of the directory as it is now (rebuilt when it changed)."""
        version = self.directory.version
        if self._index is None or self._index[0] != version:
            entries = [facts_of(e) for e in self.directory.entries()]
            self._index = (version, RoutingIndex.build(entries))
        return self._index[1]

    def _entry(self, request: Entry, kind: EntryKind, actor: str, text: str, **kw: Any) -> Entry:
        return Entry(
            seq=self.threads.next_seq(),
            thread=request.thread,
            kind=kind,
            time=self.clock.now(),
            actor=actor,
            text=text,
            origin=request.id,
            **kw,
        )

    async def ask(self, call: Call) -> Any:
        text = check_request(call.params.get("text"))
        front = call.params.get("front_end") or "cli"
        if front not in ("cli", "web"):
            raise BadRequest("front_end is cli or web", field="front_end")
        actor = call.actor
        request = Entry(
            seq=self.threads.next_seq(),
            thread=actor.name,
            kind=EntryKind.REQUEST,
            time=self.clock.now(),
            actor=actor.name,
            text=text,
            state=RequestState.RECEIVED,
            details={"front_end": front},
        )
        view = self.owners.view(actor)
        if view.every:
            index = self.index()
        else:
            index = RoutingIndex.build(
                facts_of(e) for e in self.directory.entries() if view.sees(e.pane_id, e.incarnation)
            )
        decision = decide(text, index)
        call.target = request.id
        call.details.update({"request": request.id, **decision.to_dict()})
        entries = [
            self._entry(
                request,
                EntryKind.ROUTE,
                "dispatcher",
                decision.reason,
                pane=decision.pane,
                incarnation=decision.incarnation,
                details=decision.to_dict(),
            )
        ]
        state = RequestState.RECEIVED
        sent: dict[str, Any] | None = None
        if decision.route is Route.DIRECT:
            assert decision.pane is not None
            try:
                sent = await self.gate.run(
                    CONTROL,
                    "message.send",
                    {
                        "target": decision.pane,
                        "incarnation": decision.incarnation,
                        "revision": decision.revision,
                        "text": text,
                        "message_id": f"ask-{request.id}",
                        "origin": request.id,
                    },
                )
            except OpenbusError as exc:
                entries.append(
                    self._entry(
                        request,
                        EntryKind.NOTE,
                        "system",
                        f"the direct send to {decision.pane} was refused ({exc.message}): "
                        "control works it out",
                    )
                )
                call.details["direct_refused"] = exc.message
            else:
                state = move(state, RequestEvent.DIRECT)
                entries.append(
                    self._entry(
                        request,
                        EntryKind.INPUT,
                        "control",
                        text,
                        pane=decision.pane,
                        incarnation=decision.incarnation,
                        details={"message_id": sent["message_id"], "via": "dispatcher"},
                    )
                )
        if state is RequestState.RECEIVED:
            state = move(state, RequestEvent.DELEGATE)
        request = _with_state(request, state)
        call.details["state"] = state.value
        for entry in (request, *entries):
            call.write(self.threads.add(entry))
        self.routed["direct" if state is RequestState.DIRECT else "control"] += 1

        def committed() -> None:
            self._entry_added.set()
            self._entry_added = asyncio.Event()
            if state is RequestState.DELEGATED:
                self._delegated(request)
            elif sent is not None:
                self._spawn(self._follow(request, str(sent["message_id"])))

        call.after_commit.append(committed)
        return {
            "request": request.to_dict(),
            "route": decision.to_dict(),
            "sent_to": decision.pane if state is RequestState.DIRECT else None,
            "entries": [e.to_dict() for e in entries],
        }

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _follow(self, request: Entry, message_id: str) -> None:
        """Fall back to control when a direct send ends undelivered (recycled, changed pane)."""
        message = self.messaging.book.get("control", message_id)
        if message is None:
            return
        done = self.messaging.outcomes.done(message)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout=FOLLOW_SECONDS)
        if message.outcome in (Outcome.DELIVERED, Outcome.QUEUED, Outcome.UNCONFIRMED):
            return
        current = self.threads.get(request.seq)
        if current.state is None or not may(current.state, RequestEvent.FALLBACK):
            return
        note = self._entry(
            request,
            EntryKind.NOTE,
            "system",
            f"the direct send to {message.recipient.pane} ended {message.outcome.value} "
            f"({message.reason or 'no reason given'}): control works it out",
            pane=message.recipient.pane,
        )
        state = move(current.state, RequestEvent.FALLBACK)
        self._recorded(
            "control.fallback",
            request.id,
            {"request": request.id, "outcome": message.outcome.value},
            [self.threads.add(note), self.threads.set_state(request.seq, state)],
        )
        self.routed["fallback"] += 1
        self._added()
        self._delegated(_with_state(current, state))

    def _delegated(self, request: Entry) -> None:
        """A request is control's: on the feed; and if control is not blocked in
        ``wait_for_changes`` (its turn ended), a line typed into its pane wakes it. With no
        control running, this first use starts it (as the requester), and its first
        ``wait_for_changes`` answers with the requests waiting."""
        self.feed.thread_entry(request.to_dict())
        if self._control_waiting == 0:
            self._spawn(self._wake(request))

    async def _wake(self, request: Entry) -> None:
        current = self.grants.control()
        if current is not None and await self.launch.ensure_live(current):
            await self._nudge(current, request)
            return
        async with self._starting:  # two requests at once start one control
            if self.grants.control() is not None:
                return  # started meanwhile: its first wait answers with this request
            await self._start_on_first_use(request)

    async def _start_on_first_use(self, request: Entry) -> None:
        kind, _, user = request.thread.partition(":")
        if kind != "human":
            return
        try:
            await self.gate.run(human(user), "control.start", {"first_use": request.id})
        except OpenbusError as exc:
            note = self._entry(
                request,
                EntryKind.NOTE,
                "system",
                f"control could not be started for this request: {exc.message}",
            )
            self._recorded(
                "control.start_failed",
                request.id,
                {"request": request.id, "reason": exc.message},
                [self.threads.add(note)],
            )
            self._added()

    async def _nudge(self, current: Principal, request: Entry) -> None:
        if current.pane_id is None or current.incarnation is None:
            return
        with contextlib.suppress(OpenbusError):
            await self.gate.run(
                CONTROL,
                "message.send",
                {
                    "target": current.pane_id,
                    "incarnation": current.incarnation,
                    "text": f"Request {request.id} is waiting for you: call wait_for_changes.",
                    "message_id": f"nudge-{request.id}-{self.threads.next_seq()}",
                    "origin": request.id,
                },
            )
            self.nudges += 1

    # ------------------------------------------------------------------ threads

    async def thread(self, call: Call) -> Any:
        actor = call.actor
        wanted = call.params.get("request")
        wait = _seconds(call.params.get("wait_seconds"), "wait_seconds", MAX_THREAD_WAIT)
        after = call.params.get("after")
        if after is not None and (not isinstance(after, int) or isinstance(after, bool)):
            raise BadRequest("after must be an entry number", field="after")
        if wanted is None:
            name = actor.name
            if call.params.get("thread") == CONTROL_THREAD:
                name = CONTROL_THREAD  # control's own: its starts and re-seeds
            return {"thread": name, "entries": [e.to_dict() for e in self.threads.thread(name)]}
        seq = parse_entry_id(wanted, "request")
        call.target = f"r{seq}"
        deadline = self.clock.monotonic() + wait
        while True:
            request = self.threads.request(seq)
            if request.thread != actor.name:
                raise NotFound(f"no request r{seq}", field="request")
            caused = self.threads.of_request(request.id)
            newest = max((e.seq for e in caused), default=request.seq)
            left = deadline - self.clock.monotonic()
            if after is None or newest > after or left <= 0:
                return {"request": request.to_dict(), "entries": [e.to_dict() for e in caused]}
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._entry_added.wait(), timeout=left)

    async def wait(self, call: Call) -> Any:
        actor = call.actor
        view = self.owners.view(actor)
        control = actor.kind == "control"

        def visible(change: dict[str, Any]) -> bool:
            if change["kind"] == "thread":
                return control
            pane = change.get("pane")
            return pane is None or view.sees(pane, change.get("incarnation"))

        since = call.params.get("since")
        waiting = self.threads.open_requests() if control else []
        if control and since is None and waiting:
            # a fresh control (started, re-seeded) takes the requests already waiting at once
            result: dict[str, Any] = {
                "revision": self.feed.revision,
                "resync": False,
                "changes": [],
            }
        else:
            result = await self._waiting(
                since, call.params.get("timeout_seconds"), visible, control
            )
        call.details.update({"revision": result["revision"], "changes": len(result["changes"])})
        if control:
            result["open_requests"] = [e.to_dict() for e in self.threads.open_requests()]
        return result

    async def _waiting(self, since: object, timeout: object, visible: Any, control: bool) -> Any:
        if control:
            self._control_waiting += 1
        try:
            return await self.feed.wait(since, timeout, visible)
        finally:
            if control:
                self._control_waiting -= 1

    # ------------------------------------------------------------------ act: reply, hand off

    def _request_for(self, value: object) -> Entry:
        return self.threads.request(parse_entry_id(value, "thread"))

    async def reply(self, call: Call) -> Any:
        request = self._request_for(call.params.get("thread"))
        text = call.params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise BadRequest("a reply needs some text", field="text")
        if len(text) > MAX_REPLY_CHARS:
            raise BadRequest(f"a reply is at most {MAX_REPLY_CHARS} characters", field="text")
        assert request.state is not None
        state = move(request.state, RequestEvent.REPLY)
        entry = self._entry(request, EntryKind.REPLY, call.actor.name, text.strip())
        call.target = request.id
        call.details.update({"request": request.id, "entry": entry.id})
        call.write(self.threads.add(entry))
        call.write(self.threads.set_state(request.seq, state))
        call.after_commit.append(self._added)
        return {"entry": entry.to_dict(), "request_state": state.value}

    def _added(self) -> None:
        self._entry_added.set()
        self._entry_added = asyncio.Event()

    async def hand_off(self, call: Call) -> Any:
        """A brief for a request, sent to one pane that runs (``to``) or into a new window
        opened for it (``open``)."""
        params = call.params
        request = self._request_for(params.get("thread"))
        brief = params.get("brief")
        to = params.get("to")
        window = params.get("open")
        if to is not None and window is not None:
            raise BadRequest(
                "give either to (a pane that runs) or open (a window to open for it), not both",
                field="open",
            )
        if window is None and (not isinstance(to, str) or not to.strip()):
            raise BadRequest(
                "to is a pane id (with incarnation) or a workstream handle; or give open "
                "(a launcher) to hand off into a new window",
                field="to",
            )
        assert request.state is not None
        if not may(request.state, RequestEvent.HAND_OFF):
            raise Conflict(
                f"request {request.id} is {request.state.value}: only a request control holds "
                "is handed off",
                field="thread",
            )
        message_id = f"handoff-{request.id}-{len(self.threads.of_request(request.id))}"
        if window is not None:
            return await self._hand_off_open(call, request, window, brief, message_id)
        sent = await self.gate.run(
            CONTROL,
            "message.send",
            {
                "target": to,
                "incarnation": params.get("incarnation"),
                "text": brief,
                "message_id": message_id,
                "origin": request.id,
            },
        )
        pane = str(sent["recipient_pane"])
        incarnation = self.directory.entry(pane).incarnation
        state, entry = self._input(request, str(brief), pane, incarnation, sent["message_id"])
        call.target = pane
        call.details.update({"request": request.id, "entry": entry.id, "pane": pane})
        call.write(self.threads.add(entry))
        call.write(self.threads.set_state(request.seq, state))
        call.after_commit.append(self._added)
        return {"entry": entry.to_dict(), "message": sent, "request_state": state.value}

    def _input(
        self,
        request: Entry,
        brief: str,
        pane: str,
        incarnation: str | None,
        message_id: object,
        **details: Any,
    ) -> tuple[RequestState, Entry]:
        """The ``input`` entry of a brief handed to ``pane``, and the state it moves to."""
        assert request.state is not None
        state = move(request.state, RequestEvent.HAND_OFF)
        entry = self._entry(
            request,
            EntryKind.INPUT,
            CONTROL.name,
            brief,
            pane=pane,
            incarnation=incarnation,
            details={"message_id": message_id, "via": "hand_off", **details},
        )
        return state, entry

    async def _hand_off_open(
        self, call: Call, request: Entry, window: object, brief: object, message_id: str
    ) -> Any:
        """Hand off into a new window: opened as ``open_window`` opens one (its card, or at
        once when control may open panes); the brief is sent at its agent's first idle."""
        if not isinstance(window, dict):
            raise BadRequest("open is {launcher, cwd?, title?}: the window to open", field="open")
        unknown = sorted(set(window) - {"launcher", "cwd", "title"})
        if unknown:
            raise BadRequest(f"open has no field {unknown[0]}", field=f"open.{unknown[0]}")
        launcher, cwd, title = self._window(window, "open.")
        if not isinstance(brief, str) or not brief.strip():
            raise BadRequest("brief is the text the new pane's agent is given", field="brief")
        try:
            check_text(brief, self.messaging.book.limits.message_bytes)
        except OpenbusError as exc:
            raise type(exc)(exc.message.replace("text", "brief", 1), field="brief") from None
        owner = self._control_owner()
        handing = {"thread": request.id, "brief": brief, "message_id": message_id}
        payload = {"launcher": launcher, "cwd": cwd, "title": title, "hand_off": handing}
        call.target = launcher
        call.details.update({"request": request.id, "launcher": launcher, "open": True})
        where = f" in {cwd}" if cwd else ""
        if self.cards.has(_open_panes(owner)):
            call.details["allowed_by"] = "approval: control may open panes"
            opened = await self.gate.run(human(owner), "launch", _launch_params(launcher, cwd))
            pane = str(opened["pane"])
            note = self._entry(
                request,
                EntryKind.NOTE,
                CONTROL.name,
                f"control opened a {launcher} window{where} ({pane}) for this request: the "
                "brief is sent at its agent's first idle",
                pane=pane,
            )
            call.write(self.threads.add(note))
            call.after_commit.append(self._added)
            call.after_commit.append(lambda: self._spawn(self._deliver(handing, opened, None)))
            return {
                "opened": True,
                **opened,
                "entry": note.to_dict(),
                "waiting_for": "the new pane's agent to be idle: the brief is sent then",
            }
        answer = self._card(
            call,
            kind=WINDOW_CARD,
            owner=owner,
            summary=f"control wants to open a {launcher} window{where}"
            + (f" for {title!r}" if title else "")
            + f" and hand it request {request.id}: {brief_line(brief)}",
            payload=payload,
        )
        note = self._entry(
            request,
            EntryKind.NOTE,
            CONTROL.name,
            f"control asked to open a {launcher} window{where} for this request (card "
            f"{answer['card']}): the brief is sent there once the human approves",
            details={"card": answer["card"]},
        )
        call.write(self.threads.add(note))
        call.after_commit.append(self._added)
        return {
            **answer,
            "entry": note.to_dict(),
            "waiting_for": "the human's consent (a card in Needs you); then the window opens "
            "and the brief is sent at its agent's first idle",
        }

    async def _open_and_hand_off(self, card: Card) -> None:
        """An approved hand-off card: the window opened as the human who approved it (the
        launch's own record), then the brief sent there."""
        handing = card.payload["hand_off"]
        try:
            opened = await self.gate.run(
                human(card.owner), "launch", _launch_params(**card.payload)
            )
        except OpenbusError as exc:
            self._hand_off_note(
                handing,
                f"the {card.payload['launcher']} window could not be opened ({exc.message}): "
                "nothing was sent",
                card.id,
            )
            return
        await self._deliver(handing, opened, card.id)

    async def _deliver(
        self, handing: dict[str, Any], opened: dict[str, Any], card: str | None
    ) -> None:
        """The brief sent into a window opened for it, once its agent is first idle with an
        empty composer (``LaunchService.until_ready``, as a started session's brief): one
        message from control with the request as origin; its ``input`` entry and the request
        moved are written with a system record."""
        pane, incarnation = str(opened["pane"]), str(opened["incarnation"])
        principal = (opened.get("connect") or {}).get("principal")
        ready = await self.launch.until_ready(pane, incarnation, principal)
        request = self._request_for(handing["thread"])
        brief = str(handing["brief"])
        try:
            sent = await self.gate.run(
                CONTROL,
                "message.send",
                {
                    "target": pane,
                    "incarnation": incarnation,
                    "text": brief,
                    "message_id": handing["message_id"],
                    "origin": request.id,
                },
            )
        except OpenbusError as exc:
            self._hand_off_note(
                handing, f"the brief for the new pane {pane} was refused ({exc.message})", card
            )
            return
        assert request.state is not None
        if not may(request.state, RequestEvent.HAND_OFF):
            return  # a request nobody holds any more (it cannot be: hand_off checked it)
        extra = {"card": card} if card else {}
        state, entry = self._input(
            request, brief, pane, incarnation, sent["message_id"], opened=True, **extra
        )
        message_id = sent["message_id"]
        self._recorded(
            "control.handed_off",
            pane,
            {"request": request.id, "entry": entry.id, "message_id": message_id, "agent": ready}
            | extra,
            [self.threads.add(entry), self.threads.set_state(request.seq, state)],
        )
        self._added()

    def _hand_off_note(self, handing: dict[str, Any], text: str, card: str | None) -> None:
        """A hand-off into a new window that did not happen: a note in the request's thread
        (the request stays where it was), and control is told on the feed."""
        request = self._request_for(handing["thread"])
        note = self._entry(
            request, EntryKind.NOTE, "system", text, details={"card": card} if card else {}
        )
        self._recorded(
            "control.hand_off_note",
            request.id,
            {"request": request.id, "entry": note.id, "card": card},
            [self.threads.add(note)],
        )
        self._added()
        self.feed.thread_entry(note.to_dict())

    def _recorded(
        self, action: str, target: str | None, details: dict[str, Any], writes: list[Write]
    ) -> None:
        """Something control's feature did on its own: a system record with its writes."""
        self.gate.record(
            AuditDraft(actor="system", action=action, outcome="ok", target=target, details=details),
            writes,
        )

    # ------------------------------------------------------------------ act: keys, windows

    def _owner_of(self, pane: str) -> str:
        found = self.grants.by_pane(pane)
        if found:
            return found[-1].owner
        try:
            return getpass.getuser()
        except (KeyError, OSError):
            raise Refused("cannot tell whose card this is") from None

    async def press_key(self, call: Call) -> Any:
        params = call.params
        pane = check_pane_id(params.get("pane"))
        incarnation = params.get("incarnation")
        revision = params.get("revision")
        key = params.get("key")
        if not isinstance(incarnation, str) or not incarnation:
            raise BadRequest("incarnation is required (from list_panes)", field="incarnation")
        if isinstance(revision, bool) or not isinstance(revision, int):
            raise BadRequest("revision is required: the screen revision you read", field="revision")
        if not isinstance(key, str) or not key:
            raise BadRequest("key is a tmux key name, like 1, y, Enter, Escape", field="key")
        entry = self.directory.entry(pane)
        call.target = pane
        call.details.update({"pane": pane, "key": key, "incarnation": incarnation})
        if entry.incarnation != incarnation:
            raise Conflict(
                f"{pane} is now another process: read the directory again", field="incarnation"
            )
        if entry.revision != revision:
            raise Conflict(
                f"{pane}'s screen changed since revision {revision} (now {entry.revision}): "
                "read it again",
                field="revision",
            )
        shell = entry.harness == "shell" or entry.state == "shell"
        if shell or entry.state == "menu":
            menu = entry.reading.menu
            if menu is not None and menu.question:
                picks = " / ".join(f"{o.key}: {o.label}" for o in menu.options)
                question = f"{menu.question} ({picks})" if picks else menu.question
            else:
                question = _last_lines(entry.text, 10)
            what = "a shell pane" if shell else "another agent's menu"
            card, write = self.cards.new(
                kind=KEY_CARD,
                requester=call.actor.name,
                owner=self._owner_of(pane),
                summary=f"control wants to press {key} in {pane} ({what}): {question}",
                target=pane,
                payload={
                    "pane": pane,
                    "incarnation": incarnation,
                    "key": key,
                    "question": question,
                    "thread": params.get("thread"),
                },
            )
            call.write(write)
            call.outcome = "card"
            call.details["card"] = card.id
            call.after_commit.append(lambda: self.cards.notify(card))
            return {
                "pressed": False,
                "card": card.id,
                "question": question,
                "waiting_for": "the human's consent (a card in Needs you); nothing is typed "
                "until it is approved",
            }
        async with self.directory.send_lock(pane):
            await self.tmux.send_key(pane, key)
        return {"pressed": True, "pane": pane, "key": key}

    async def open_window(self, call: Call) -> Any:
        launcher, cwd, title = self._window(call.params)
        owner = self._control_owner()
        call.target = launcher
        call.details["launcher"] = launcher
        if self.cards.has(_open_panes(owner)):
            call.details["allowed_by"] = "approval: control may open panes"
            opened = await self.gate.run(human(owner), "launch", _launch_params(launcher, cwd))
            return {"opened": True, **opened}
        where = f" in {cwd}" if cwd else ""
        return self._card(
            call,
            kind=WINDOW_CARD,
            owner=owner,
            summary=f"control wants to open a {launcher} window{where}"
            + (f" for {title!r}" if title else ""),
            payload={"launcher": launcher, "cwd": cwd, "title": title},
        )

    def _window(
        self, params: Mapping[str, Any], prefix: str = ""
    ) -> tuple[str, str | None, str | None]:
        """A window to open: a configured launcher, and an optional folder and title."""
        launcher = params.get("launcher")
        if not isinstance(launcher, str) or launcher not in self.config.launchers:
            known = ", ".join(sorted(self.config.launchers))
            raise BadRequest(
                f"{prefix}launcher must be a configured one ({known})", field=f"{prefix}launcher"
            )
        cwd = params.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise BadRequest(f"{prefix}cwd must be a path", field=f"{prefix}cwd")
        title = params.get("title")
        if title is not None and not isinstance(title, str):
            raise BadRequest(f"{prefix}title must be text", field=f"{prefix}title")
        return launcher, cwd, title

    async def resume_session(self, call: Call) -> Any:
        harness, session_id = session_ref(call.params)
        owner = self._control_owner()
        call.target = f"{harness}:{session_id}"
        if self.cards.has(_open_panes(owner)):
            call.details["allowed_by"] = "approval: control may open panes"
            resumed = await self.resumer.resume(
                call, harness=harness, session_id=session_id, owner=owner
            )
            return {"opened": True, **resumed}
        return self._card(
            call,
            kind=RESUME_CARD,
            owner=owner,
            summary=f"control wants to resume the {harness} session {session_id}",
            payload={"harness": harness, "session_id": session_id},
        )

    async def allow_panes(self, call: Call) -> Any:
        """The human lets control open panes (windows, resumed sessions) without a card each
        time, or (``allow: false``) takes that back."""
        user = call.actor.user
        if user is None:
            raise BadRequest("only a person can allow this", field="actor")
        allow = call.params.get("allow", True)
        if not isinstance(allow, bool):
            raise BadRequest("allow is true or false", field="allow")
        approval = _open_panes(user)
        call.target = approval.subject
        call.write(self.cards.approve(approval) if allow else self.cards.withdraw(approval))
        call.details["allow"] = allow
        return {"control_may_open_panes": allow}

    def _control_owner(self) -> str:
        current = self.grants.control()
        if current is not None:
            return current.owner  # the human who started control
        try:
            return getpass.getuser()
        except (KeyError, OSError):
            raise Refused("cannot tell whose card this is") from None

    def _card(
        self, call: Call, *, kind: str, owner: str, summary: str, payload: dict[str, Any]
    ) -> dict[str, Any]:
        card, write = self.cards.new(
            kind=kind, requester=call.actor.name, owner=owner, summary=summary, payload=payload
        )
        call.write(write)
        call.outcome = "card"
        call.details["card"] = card.id
        call.after_commit.append(lambda: self.cards.notify(card))
        return {"opened": False, "card": card.id, "waiting_for": "the human's consent"}

    def _on_card(self, card: Card) -> None:
        if card.kind == WINDOW_CARD and "hand_off" in card.payload:
            if card.state is CardState.APPROVED:
                self._spawn(self._open_and_hand_off(card))
            elif card.state.final:
                window = f"the {card.payload['launcher']} window (card {card.id})"
                ended = _ENDED.get(card.state, "{} was not opened").format(window)
                self._hand_off_note(
                    card.payload["hand_off"],
                    f"{ended}: nothing was sent, the request is still control's",
                    card.id,
                )
            return
        if card.state is not CardState.APPROVED:
            return
        if card.kind == KEY_CARD:
            self._spawn(self._press_approved(card))
        elif card.kind == WINDOW_CARD:
            self._spawn(self._as_owner(card, "launch", _launch_params(**card.payload)))
        elif card.kind == RESUME_CARD:
            params = {k: card.payload[k] for k in ("harness", "session_id")}
            self._spawn(self._as_owner(card, "session.resume", params))

    async def _press_approved(self, card: Card) -> None:
        pane = str(card.payload["pane"])
        key = str(card.payload["key"])
        details: dict[str, Any] = {"card": card.id, "pane": pane, "key": key}
        outcome = "ok"
        try:
            entry = self.directory.entry(pane)
            if entry.incarnation != card.payload["incarnation"]:
                raise Conflict(f"{pane} is now another process")
            async with self.directory.send_lock(pane):
                await self.tmux.send_key(pane, key)
        except OpenbusError as exc:
            outcome = "refused"
            details.update({"reason": exc.code, "message": exc.message})
        self.gate.record(
            AuditDraft(
                actor="control",
                action="control.press_key",
                outcome=outcome,
                scope=Scope.ACT.value,
                target=pane,
                details=details,
            )
        )

    async def _as_owner(self, card: Card, action: str, params: dict[str, Any]) -> None:
        """An approved card's action, run as the human who approved it (its own audit)."""
        with contextlib.suppress(OpenbusError):
            await self.gate.run(human(card.owner), action, params)


_ENDED = {  # how a hand-off's window card ended unapproved, for the request's thread
    CardState.DECLINED: "the human declined opening {}",
    CardState.EXPIRED: "nobody answered in time to open {}",
    CardState.CANCELLED: "opening {} was cancelled",
}


def _open_panes(user: str) -> Approval:
    return Approval(ApprovalKind.OPEN_PANES, f"control:{user}", "*")


def _launch_params(launcher: object, cwd: object = None, **_: object) -> dict[str, Any]:
    return {"launcher": launcher, **({"cwd": cwd} if cwd else {})}


def _with_state(entry: Entry, state: RequestState) -> Entry:
    return replace(entry, state=state)


def _last_lines(text: str | None, n: int = 4) -> str:
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return " / ".join(line.strip() for line in lines[-n:])[:400]


def _seconds(value: object, field: str, cap: float) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= cap:
        raise BadRequest(f"{field} is a number of seconds from 0 to {int(cap)}", field=field)
    return float(value)
