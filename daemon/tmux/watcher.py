"""The watcher: follows one tmux server at a cost per change and feeds the directory.

Theory of operation
-------------------
States: ``down`` (no server answers on the socket) -> ``following`` (one control client per
session) -> ``down`` again when the last client goes (server killed, last session closed).
While down, the supervisor retries with exponential backoff (a plain ``connect()`` on the
socket, no process per try) and tells the directory the server is not running.

While following, tmux pushes every event: ``%output %N`` marks pane N dirty (its payload is
not decoded); ``%layout-change``, ``%window-add``/``-close``, ``%sessions-changed``,
``%pane-mode-changed`` and their relatives mark the structure dirty. Two loops drain the
marks: the capture loop pipelines ``capture-pane -p`` (plus ``display-message`` for a pane
whose metadata is older than ``meta_max_age``) for just the dirty panes over the first
client's stdin (no process per capture), after a short debounce and at most once per
``interval`` (each batch wakes the tmux server a few times, whatever its size); after a batch
of ``busy_panes`` or more (much of a fleet streaming at once), at most once per
``busy_interval``: measured at 200 panes printing, 0.3 s rather than 0.2 took ours from
1.22-1.52 of the ``%output`` floor to 1.14-1.16, its change-to-directory p95 from about 110 ms
to 205 (the target is 300). While it
waits for the next batch, the clients are held (``ControlClient.hold``): what they print
meanwhile stays in their pipes and is read in one go just before the batch, so the daemon
wakes about once a batch rather than once per ``%output`` line (a client's answers to its
commands are read as they come, held or not). The structure loop re-lists panes
(``list-panes -a``) and sessions, attaching a client to each new session; a structure event
printed during a hold is seen at its end, within ``interval``.
A screen or listing that is what the directory last heard is not told again.

Flow control: a pane that sends ``pause_after`` ``%output`` bursts before its capture is
paused for its client (``refresh-client -A %N:pause``), so tmux stops formatting its output
for us; its capture first resumes it (``%N:continue``, sent with ``-t <client>`` on the
capturing client, so the resume is ordered before the capture: output after it is announced
again, output before it is on the captured screen). A pause whose answer has not come back
by the capture marks the pane dirty again when it does (its bursts are counted as they are
read: a pane that streams through a hold is paused at its end, just before the batch, so it
stays paused until the next batch resumes and captures it again). ``on``/``off`` are never
used: on tmux 3.3a, toggling them under load crashes the server.

What tmux announces to no control client: a pane whose process died (remain-on-exit), was
replaced (``respawn-pane -k``) or set a new title. A live pane's process is watched by the
kernel (a pidfd per pane, ``tmux.processes``): its exit has that pane's metadata read again and
the pane captured at once. Titles are listed (``list-panes -a`` of every pane's id and title,
on the first client, with a round's probes: the server wakes once for them all). A program
sets its title by printing it (an OSC sequence, so its pane's ``%output`` is announced), and
after any ``%output`` each probe round that probes a client, and at least every other round,
lists them; ``select-pane -T`` is announced by nothing, and with no ``%output`` at all (an idle
fleet) they are listed every ``title_rounds`` rounds. The listing also carries each pane's
process and dead flag, every other round, while any pane's process cannot be watched (no
pidfd to be had) or any pane is dead (its respawn is announced to no client and has no
process to watch). An answer that is the last one again is not parsed, and a pane whose
fields differ from what the directory last heard has its metadata read again and is captured.
So a program's title is seen within two rounds (3.2 s by default), one set by
``select-pane -T`` within ``title_rounds`` (6.4 s), at a cost per round, not per pane: at 200
panes and 10 clients a round of probes costs the server about 1.1 ms, 1.6 with the listing.
No
``refresh-client -B`` subscription: tmux checks each one every second, waking the server for
it, and one for all panes (``%*``) or for the session crashes tmux 3.3a's server when the
client's session is destroyed before the client has left.

A command on a new client's stdin can run before its own attach, and tmux then answers it as
another client. So nothing addressed to a client (its name, a pause) is
sent before it has answered a name query with its own process id (``_recover``); a pause
resumed under another client's name would silence its pane for good.

A safety check every ``resync`` seconds lists only the panes' shape (the fields tmux keeps in
memory that nothing else follows: sizes, modes, windows, sessions) and reads the
full list when the shape changed (a new size, a pane in a mode) or ``retell`` seconds (5
minutes) have passed; a full list is told to the sink only when it differs from the last one
told (what tmux does not show, a git branch, the directory re-reads on its own). A pane that
vanished between the event and its capture
answers with an error and is dropped: no crash, no stale entry. Idle panes cost nothing.

Liveness: a control client that stops delivering (killed, or a server that wedges control
mode; a stopped client process is not one, as tmux's server reads and writes a control
client's stdio itself) would leave its session's panes showing their last screen as if
current. Every ``probe_every`` seconds the probe loop makes a round: each client silent since
the last round, probed in it, or with a command unanswered since before it (a client whose
command queue is wedged may go on printing ``%output``: its captures would wait forever),
gets a probe (``display-message -p .`` on its own stdin), all at once so the server and the
daemon wake once for them; a client whose probe of the
round before has not answered is lost. A lost client (or one that exits while its session
still exists) gets its session's panes marked stale in the directory (``panes_stale``: they
are never shown as fresh), is killed, and the structure loop attaches a new one; once the new
client answers its first command (so its ``%output`` follows the panes) its panes are captured
again, which clears the stale mark. So a client that stops is found within three rounds
(4.8 s by default), and one that keeps delivering and answering is never probed. Captures cut
off by a lost client are asked again of the next one. A server that accepts
connections but does not answer (``list-sessions`` within three rounds) keeps
every pane, marked stale, and is retried with backoff until it answers.

What this costs is bounded below by tmux itself: a control client receives ``%output`` only
for its own session's panes, so there is one client per session, and every output burst
wakes the server once more per client (``bench/bench_directory.py`` prints this floor).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from dataclasses import asdict, dataclass
from typing import Protocol

from openbus.daemon.tmux.adapter import PANE_FIELDS, PANE_FORMAT, PaneInfo, Tmux, quote
from openbus.daemon.tmux.control import ControlClient, Notification, TmuxCommandError
from openbus.daemon.tmux.processes import OpenPidfd, ProcessWatch
from openbus.kernel.errors import Unanswered

log = logging.getLogger("openbus.tmux")

# The panes' shape: what the frequent safety check lists. Not the fields tmux reads from /proc
# per pane (current command and path), nor those the probe rounds and the pidfds follow (the
# process, its dead flag and status, the title): each field costs the server about a quarter
# of a millisecond a listing at 200 panes. Only when it differs is the full list read.
SHAPE_FORMAT = "\x1f".join(
    "#{" + name + "}"
    for name in PANE_FIELDS
    if name
    not in (
        "pane_current_command",
        "pane_current_path",
        "pane_pid",
        "pane_dead",
        "pane_dead_status",
        "pane_title",
    )
)

# What each probe round lists of every pane: what tmux announces to no control client (a new
# title; a process that died or was replaced, when its pidfd cannot tell it), compared with
# the panes' metadata. Each field costs the server about a quarter of a millisecond a listing
# at 200 panes.
TITLE_FIELDS = ("pane_id", "pane_title")
PROCESS_FIELDS = ("pane_id", "pane_pid", "pane_dead", "pane_title")


def listing_format(fields: tuple[str, ...]) -> str:
    return "\x1f".join("#{" + name + "}" for name in fields)


def process_line(info: PaneInfo, fields: tuple[str, ...] = PROCESS_FIELDS) -> str:
    """What a round's listing of ``fields`` says of a pane whose metadata is ``info``."""
    if fields == TITLE_FIELDS:
        return "\x1f".join((info.pane_id, info.title))
    return "\x1f".join((info.pane_id, str(info.pid), "1" if info.dead else "0", info.title))


# How a client learns its own name (``_recover``): the answering client's pid and name.
NAME_QUERY = "display-message -p '#{client_pid} #{client_name}'"

STRUCTURE_EVENTS = frozenset(
    {
        "layout-change",
        "window-add",
        "window-close",
        "unlinked-window-add",
        "unlinked-window-close",
        "window-renamed",
        "unlinked-window-renamed",
        "sessions-changed",
        "session-changed",
        "session-renamed",
        "session-window-changed",
        "window-pane-changed",
        "pane-mode-changed",
        "client-session-changed",
    }
)


class Sink(Protocol):
    def server_status(self, running: bool, detail: str | None = None) -> None: ...

    def panes_listed(self, infos: list[PaneInfo]) -> None: ...

    def pane_captured(self, info: PaneInfo, text: str) -> None: ...

    def pane_gone(self, pane_id: str) -> None: ...

    def panes_stale(self, pane_ids: list[str], why: str) -> None: ...


@dataclass
class WatcherStats:
    """What following the server has cost since the watcher started (for ``/healthz``)."""

    captures: int = 0  # panes captured
    listings: int = 0  # full pane listings read
    checks: int = 0  # safety checks that listed only the panes' shape
    pauses: int = 0  # panes whose output was paused until their capture
    probes: int = 0  # liveness probes sent to silent control clients
    title_listings: int = 0  # rounds' listings of the panes' titles (and processes) sent
    process_checks: int = 0  # rounds' listings of the panes' processes that differed
    lost: int = 0  # control clients that stopped delivering and were restarted

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class Watcher:
    def __init__(
        self,
        tmux: Tmux,
        sink: Sink,
        *,
        debounce: float = 0.05,
        interval: float = 0.2,
        busy_interval: float = 0.3,
        busy_panes: int = 16,
        resync: float = 30.0,
        backoff: tuple[float, float] = (0.2, 5.0),
        meta_max_age: float = 15.0,
        pause_after: int = 3,
        probe_every: float = 1.6,
        title_rounds: int = 4,
        open_pidfd: OpenPidfd = os.pidfd_open,
    ) -> None:
        self.tmux = tmux
        self.sink = sink
        self.debounce = debounce
        self.interval = interval
        self.busy_interval = busy_interval
        self.busy_panes = busy_panes
        self.resync = resync
        self.backoff = backoff
        self._clients: dict[str, ControlClient] = {}
        self._dirty: set[str] = set()
        self._dirty_event = asyncio.Event()
        self._structure_event = asyncio.Event()
        self._gone = asyncio.Event()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.stats = WatcherStats()
        self._listed: set[str] = set()
        self._meta: dict[str, tuple[PaneInfo, float]] = {}  # pane metadata and when it was read
        self._told: dict[str, tuple[PaneInfo, str]] = {}  # what the sink last heard per pane
        self._heard: dict[str, PaneInfo] = {}  # the metadata the sink last heard per pane
        self._last_listing: list[str] | None = None
        self._last_infos: list[PaneInfo] = []
        self._last_full = 0.0  # when the full list was last read
        # panes whose %output we paused: on which client, and the pause command's answer
        self._paused: dict[str, tuple[ControlClient, asyncio.Future[list[str]]]] = {}
        self.pause_after = pause_after
        self._bursts: dict[str, int] = {}  # %output bursts per dirty pane since its last batch
        self._last_processes: list[str] | None = None  # a round's listing that matched
        self._listing: asyncio.Future[list[str]] | None = None  # the round's, until answered
        self.retell = 300.0  # seconds between full listings even when the shape is unchanged
        self._last_shape: list[str] | None = None
        self._full = True  # the next structure refresh reads the full list
        self.meta_max_age = meta_max_age
        self.probe_every = probe_every
        self.title_rounds = title_rounds
        self._printed = False  # any %output since the titles were last listed
        self._probes: dict[ControlClient, asyncio.Future[list[str]]] = {}
        self._stale_sessions: set[str] = set()  # sessions whose panes wait for a new client
        self._recovering: set[asyncio.Task[None]] = set()
        self._processes = ProcessWatch(self._process_exited, open_pidfd=open_pidfd)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._supervise(), name="tmux-supervise"),
            loop.create_task(self._capture_loop(), name="tmux-capture"),
            loop.create_task(self._structure_loop(), name="tmux-structure"),
            loop.create_task(self._probe_loop(), name="tmux-probe"),
        ]

    async def stop(self) -> None:
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        for recovering in list(self._recovering):
            recovering.cancel()
        await self._close_clients()

    async def _close_clients(self) -> None:
        clients = list(self._clients.values())
        self._clients.clear()
        self._told.clear()
        self._heard.clear()
        self._paused.clear()
        self._bursts.clear()
        self._probes.clear()
        self._last_processes = None
        self._listing = None
        self._processes.clear()
        self._stale_sessions.clear()  # the next follow captures every pane
        self._last_listing = None
        self._last_shape = None
        self._full = True
        self.tmux.control = None
        for client in clients:
            with contextlib.suppress(Exception):
                await client.close()

    def health(self) -> dict[str, int]:
        """What following has cost, and the panes' processes watched by pidfd."""
        return {**self.stats.as_dict(), "processes_watched": self._processes.watched}

    @property
    def following(self) -> bool:
        return bool(self._clients)

    def _command_client(self) -> ControlClient | None:
        for client in self._clients.values():
            if client.alive:
                return client
        return None

    # ------------------------------------------------------------------ supervisor

    async def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopped; True when stopping."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)
        return self._stop.is_set()

    async def _supervise(self) -> None:
        delay = self.backoff[0]
        while not self._stop.is_set():
            try:
                followed = await self._follow_once()
            except Exception:
                log.exception("the tmux watcher failed; retrying")
                followed = False
            await self._close_clients()
            if followed:
                delay = self.backoff[0]
                continue
            if await self._sleep(delay):
                return
            delay = min(delay * 2, self.backoff[1])

    async def _follow_once(self) -> bool:
        """Follow the server until it goes away. False when there was nothing to follow."""
        if not self.tmux.reachable():
            self.sink.server_status(False, f"no tmux server on {self.tmux.socket}")
            return False
        try:
            sessions = await self.tmux.list_sessions(timeout=max(3 * self.probe_every, 3.0))
        except Unanswered:
            why = f"the tmux server on {self.tmux.socket} does not answer"
            self.sink.server_status(True, why)
            self._mark_stale(None, why)
            return False
        if not sessions:
            running = self.tmux.reachable()
            self.sink.server_status(
                running, None if running else f"no tmux server on {self.tmux.socket}"
            )
            if running:
                self.sink.panes_listed([])
            return False
        self._gone.clear()
        await self._attach(sessions)
        if not self._clients:
            return False
        self.sink.server_status(True, None)
        await self._refresh_structure(capture_all=True)
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._gone.wait(), self.resync)
            except TimeoutError:
                self._structure_event.set()  # a safety check: the full list only on a change
                continue
            break
        if not self._stop.is_set() and not self.tmux.reachable():
            self.sink.server_status(False, f"the tmux server on {self.tmux.socket} went away")
        return True

    async def _attach(self, sessions: list[str]) -> None:
        for session in sessions:
            if session in self._clients:
                continue
            client = ControlClient(
                self.tmux.attach_argv(session),
                self.tmux.env,
                self._on_event,
                label=session,
            )
            self._clients[session] = client  # before the await: no second client for it
            try:
                await client.start()
            except (OSError, ConnectionError):
                log.exception("could not start a tmux control client")
                self._clients.pop(session, None)
                continue
            # every new client, not only a restarted one: what its session's panes drew
            # before it attached (a new session's first screen) was announced to no one
            task = asyncio.get_running_loop().create_task(self._recover(client))
            self._recovering.add(task)
            task.add_done_callback(self._recovering.discard)
        self.tmux.control = self._command_client()

    # ------------------------------------------------------------------ events

    def _on_event(self, client: ControlClient, event: Notification) -> None:
        name = event.name
        if name == "output":
            self._printed = True
            pane = event.args[0]
            if pane not in self._dirty:
                self._dirty.add(pane)
                self._dirty_event.set()
                self._bursts[pane] = 1
                return
            bursts = self._bursts[pane] = self._bursts.get(pane, 1) + 1
            if bursts < self.pause_after or pane in self._paused or client.name is None:
                return  # (a client not yet known by name could not be asked to resume it)
            # a pane still printing before its capture: stop tmux formatting its output for us
            # until the capture resumes it (pause/continue; never on/off, which crashes tmux
            # 3.3a's server)
            try:
                (done,) = client.send_quietly([f"refresh-client -A {quote(pane + ':pause')}"])
            except ConnectionError:
                return
            self._paused[pane] = (client, done)
            self.stats.pauses += 1
        elif name in STRUCTURE_EVENTS:
            self._full = True
            self._structure_event.set()
        elif name == "client-closed":
            for pane in [p for p, (c, _) in self._paused.items() if c is client]:
                del self._paused[pane]
            self._probes.pop(client, None)
            if self._clients.get(client.label) is client:
                # not closed by us: its session's panes are unwatched until a new client
                if client.label not in self._stale_sessions:
                    why = client.exit_reason or "its tmux control client exited"
                    self._mark_stale(client.label, f"watching session {client.label}: {why}")
                del self._clients[client.label]
            self.tmux.control = self._command_client()
            if self._clients:
                self._full = True
                self._structure_event.set()
            else:
                self._gone.set()

    # ------------------------------------------------------------------ loops

    async def _capture_loop(self) -> None:
        loop = asyncio.get_running_loop()
        last = -self.busy_interval
        size = 0  # panes in the last batch
        while True:
            await self._dirty_event.wait()
            # a short debounce after a quiet spell; under load, at most one batch per interval
            # (each batch wakes the tmux server a few times, whatever its size)
            now = loop.time()
            # meanwhile the clients are held: what they print is read in one go before the
            # batch rather than line by line as it comes (their answers are still read)
            held = list(self._clients.values())
            for client in held:
                client.hold()
            try:
                # a batch as large as a fleet streaming at once waits longer for the next:
                # fewer wakes of the server for as many captures, the screens a little later
                every = self.busy_interval if size >= self.busy_panes else self.interval
                await asyncio.sleep(max(self.debounce, last + every - now))
            finally:
                for client in held:
                    client.release()
            last = loop.time()
            self._dirty_event.clear()
            panes, self._dirty = self._dirty, set()
            size = len(panes)
            self._bursts.clear()
            try:
                await self._capture(sorted(panes))
            except Exception:
                log.exception("capturing panes failed")

    async def _capture(self, panes: list[str]) -> None:
        client = self._command_client()
        if client is None or not panes:
            return
        now = asyncio.get_running_loop().time()
        # the metadata read recently enough, as of now (a listing replaces it while we wait)
        fresh = {
            p: known[0]
            for p, known in ((p, self._meta.get(p)) for p in panes)
            if known is not None and now - known[1] < self.meta_max_age
        }
        lines: list[str] = []
        resumed: list[str] = []
        for pane in panes:
            paused = self._paused.get(pane)
            if paused is not None:
                owner, done = paused
                if done.done():
                    # resumed before the capture, on the client that captures: output after
                    # it is announced again, output before it is on the captured screen
                    del self._paused[pane]
                    if owner.alive and owner.name is not None:
                        target = quote(owner.name)
                        resumed.append(f"refresh-client -t {target} -A {quote(pane + ':continue')}")
                else:
                    # the pause may land after this capture: resume and capture once more then
                    done.add_done_callback(functools.partial(self._redirty, pane))
            if pane not in fresh:
                lines.append(f"display-message -p -t {pane} -F {quote(PANE_FORMAT)}")
            lines.append(f"capture-pane -p -t {pane}")
        try:
            if resumed:
                client.send_quietly(resumed)
            futures = iter(client.send(lines))
        except ConnectionError:
            return
        for at, pane in enumerate(panes):
            try:
                info: PaneInfo | None = fresh.get(pane)
                if info is None:
                    meta = await next(futures)
                    info = PaneInfo.parse(meta[0]) if meta else None
                    if info is not None:
                        self._meta[pane] = (info, now)
                screen = await next(futures)
            except TmuxCommandError:
                self._meta.pop(pane, None)
                self._told.pop(pane, None)
                self._heard.pop(pane, None)
                self._processes.forget(pane)
                self.sink.pane_gone(pane)
                continue
            except (ConnectionError, TimeoutError):
                # the client went (lost, restarted): what was not captured is captured later
                self._dirty.update(panes[at:])
                self._dirty_event.set()
                return
            if info is None:
                continue
            self._processes.follow(info)
            self.stats.captures += 1
            text = "\n".join(screen)
            if self._told.get(pane) == (info, text):
                continue  # output that left the screen as it was (a cursor move, a redraw)
            self._told[pane] = (info, text)
            self._heard[pane] = info
            self.sink.pane_captured(info, text)

    def _unpause_forgotten(self) -> None:
        """A paused pane waits for its capture to resume it, and a pane is paused only while
        it is due for one; one whose pause has landed but that is due for none (its capture
        went before, a batch was cut off) would stay silent for good: it is made due."""
        forgotten = [
            pane
            for pane, (_, done) in self._paused.items()
            if done.done() and pane not in self._dirty
        ]
        if forgotten:
            self._dirty.update(forgotten)
            self._dirty_event.set()

    def _redirty(self, pane: str, _: object) -> None:
        if pane in self._paused:
            self._dirty.add(pane)
            self._dirty_event.set()

    # ------------------------------------------------------------------ liveness

    async def _probe_loop(self) -> None:
        loop = asyncio.get_running_loop()
        last_round = loop.time()
        unlisted = 0  # rounds since the panes' processes were last listed
        while not await self._sleep(self.probe_every):
            now = loop.time()
            self._unpause_forgotten()
            probed = False
            for client in list(self._clients.values()):
                answer = self._probes.pop(client, None)
                if answer is not None and not answer.done():
                    self._lost(client)  # its probe of the round before has not come back
                    continue
                # probed: the silent (a probe's answer is heard: an idle client is probed
                # every other round), and those with a command unanswered since before the
                # last round (still printing %output, perhaps, but answering nothing: a
                # wedged command queue)
                since = client.waiting_since
                stuck = since is not None and since < last_round
                if client.alive and (client.heard < last_round or stuck):
                    try:
                        (self._probes[client],) = client.send_quietly(["display-message -p ."])
                    except ConnectionError:
                        continue
                    self.stats.probes += 1
                    probed = True
            unlisted += 1
            # with the probes (the server wakes once for both); an idle fleet's titles, which
            # only select-pane -T can change, every title_rounds rounds
            followed = self._printed or not self._processes.complete
            if (followed and (probed or unlisted >= 2)) or unlisted >= self.title_rounds:
                self._list_processes()
                unlisted = 0
            last_round = now

    def _list_processes(self) -> None:
        """List every pane's process, dead flag and title (what tmux announces to no control
        client); the answer is checked when it comes."""
        client = self._command_client()
        if client is None or (self._listing is not None and not self._listing.done()):
            return
        fields = TITLE_FIELDS if self._processes.complete else PROCESS_FIELDS
        listing = f"list-panes -a -F {quote(listing_format(fields))}"
        try:
            (self._listing,) = client.send_quietly([listing])
        except ConnectionError:
            return
        self._printed = False
        self.stats.title_listings += 1
        self._listing.add_done_callback(functools.partial(self._processes_listed, fields))

    def _processes_listed(
        self, fields: tuple[str, ...], listing: asyncio.Future[list[str]]
    ) -> None:
        """A pane whose process, dead flag or title is not what the sink last heard (a capture
        whose metadata was read before the change may be told after a listing that saw it) has
        its metadata read again and is captured; a pane listed or gone that the last listing
        did not say so re-lists the structure. An answer that is the last one matched again is
        not parsed."""
        if listing.cancelled() or listing.exception() is not None:
            return
        lines = listing.result()
        if lines == self._last_processes:
            return
        self.stats.process_checks += 1
        ids: set[str] = set()
        differ = False
        for line in lines:
            pane = line.split("\x1f", 1)[0]
            ids.add(pane)
            heard = self._heard.get(pane)
            if heard is None:
                differ = differ or pane not in self._dirty  # not told yet, nor about to be
                continue
            if process_line(heard, fields) != line:
                differ = True
                # (already dropped when a listing before this one differed too and the pane's
                # capture, which reads it again, has not run yet)
                self._meta.pop(pane, None)
                self._dirty.add(pane)
                self._dirty_event.set()
        if ids != self._listed:
            differ = True
            self._full = True
            self._structure_event.set()
        self._last_processes = None if differ else lines

    def _process_exited(self, pane: str) -> None:
        """A pane's process exited (its pidfd): its metadata is read again and it is captured
        (a dead pane under ``remain-on-exit``, a respawned one's new process)."""
        self._meta.pop(pane, None)
        self._dirty.add(pane)
        self._dirty_event.set()

    def _lost(self, client: ControlClient) -> None:
        """A client that did not answer its probe: its panes are stale; end it (the
        structure loop attaches a new one when it has gone)."""
        why = (
            f"the tmux control client for session {client.label} did not answer "
            f"within {self.probe_every:g}s"
        )
        log.warning("%s; restarting it", why)
        self.stats.lost += 1
        self._mark_stale(client.label, why)
        client.kill()

    def _mark_stale(self, session: str | None, why: str) -> None:
        """Tell the sink a session's panes (every pane for None) are no longer watched."""
        panes = sorted(self._session_panes(session))
        if session is not None:
            self._stale_sessions.add(session)
        for pane in panes:
            self._told.pop(pane, None)  # the capture after recovery is told, whatever it shows
        if panes:
            self.sink.panes_stale(panes, why)

    def _session_panes(self, session: str | None) -> set[str]:
        """A session's panes (every pane for None) as last listed or read: the metadata cache
        alone misses a pane whose metadata was dropped to be read again."""
        infos = [*self._last_infos, *(info for info, _ in self._meta.values())]
        return {info.pane_id for info in infos if session is None or info.session_id == session}

    async def _recover(self, client: ControlClient) -> None:
        """Once a session's new client answers as itself (attached: its ``%output`` now follows
        the panes), learn its name and capture the session's
        panes again: output before the attach (a new session's first screen, drawn between its
        listing and its client) is on that capture, which also clears a restarted session's
        stale mark.

        A command sent on a client's stdin may run before its own ``attach-session``: tmux
        then answers as the most recent other client ("no current client" when there is
        none). So the answer is taken only when its ``client_pid`` is this client's process
        (tmux runs here, no wrapper); otherwise it is asked again. A pane paused on a client
        is resumed by that client's name: a wrong name (another client's) would leave it
        paused, silent for good."""
        delay = self.debounce
        while True:
            try:
                answer = await client.command(NAME_QUERY, self.probe_every)
            except ConnectionError:
                return  # it went: the next client tries again
            except (TimeoutError, TmuxCommandError):
                answer = []  # not attached yet, or slow: asked again while it is current
            if self._clients.get(client.label) is not client or not client.alive:
                return
            pid, _, name = (answer[0] if answer else "").strip().partition(" ")
            if name and pid == str(client.pid):
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.probe_every)
        client.name = name
        session = client.label
        self._stale_sessions.discard(session)
        panes = self._session_panes(session)
        for pane in panes:
            self._told.pop(pane, None)
        if panes:
            self._dirty.update(panes)
            self._dirty_event.set()

    async def _structure_loop(self) -> None:
        while True:
            await self._structure_event.wait()
            await asyncio.sleep(self.debounce)
            self._structure_event.clear()
            try:
                await self._refresh_structure(capture_all=False)
            except Exception:
                log.exception("re-listing tmux panes failed")

    async def _refresh_structure(self, *, capture_all: bool) -> None:
        client = self._command_client()
        if client is None:
            return
        now = asyncio.get_running_loop().time()
        full = self._full or capture_all or now - self._last_full >= self.retell
        self._full = False
        try:
            if not full:
                sessions_f, shape_f = client.send(
                    ["list-sessions -F '#{session_id}'", f"list-panes -a -F {quote(SHAPE_FORMAT)}"]
                )
                sessions = [s for s in await sessions_f if s.startswith("$")]
                shape = await shape_f
                self.stats.checks += 1
                if shape == self._last_shape:
                    await self._follow_sessions(sessions)
                    return
            sessions_f, shape_f, panes_f = client.send(
                [
                    "list-sessions -F '#{session_id}'",
                    f"list-panes -a -F {quote(SHAPE_FORMAT)}",
                    f"list-panes -a -F {quote(PANE_FORMAT)}",
                ]
            )
            sessions = [s for s in await sessions_f if s.startswith("$")]
            self._last_shape = await shape_f
            listed = await panes_f
        except (ConnectionError, TmuxCommandError):
            self._full = True
            return
        self.stats.listings += 1
        now = asyncio.get_running_loop().time()
        self._last_full = now
        if (
            listed == self._last_listing
            and not capture_all
            and all(self._heard.get(info.pane_id) == info for info in self._last_infos)
        ):
            infos = self._last_infos  # nothing changed: the sink has heard it all already
            self._meta = {info.pane_id: (info, now) for info in infos}
        else:
            infos = [info for info in map(PaneInfo.parse, listed) if info is not None]
            self._meta = {info.pane_id: (info, now) for info in infos}
            self._last_listing, self._last_infos = listed, infos
            self._heard = {info.pane_id: info for info in infos}
            self._processes.sync(infos)
            self.sink.panes_listed(infos)
        known = {info.pane_id for info in infos}
        for gone in [p for p in self._told if p not in known]:
            del self._told[gone]
            self._processes.forget(gone)
        new = known if capture_all else known - self._listed
        self._listed = known
        if new:
            self._dirty.update(new)
            self._dirty_event.set()
        await self._follow_sessions(sessions)

    async def _follow_sessions(self, sessions: list[str]) -> None:
        """One control client per session: attach new sessions', close vanished ones'."""
        for stale in [s for s in self._clients if s not in sessions]:
            client_gone = self._clients.pop(stale)
            await client_gone.close()
        missing = [s for s in sessions if s not in self._clients]
        if missing:
            await self._attach(missing)
