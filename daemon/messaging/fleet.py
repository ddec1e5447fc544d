"""What delivery needs from the fleet directory and tmux, as one small interface.

``DirectoryFleet`` adapts the daemon's ``Directory`` (entries, handles, send locks, change
subscription) and ``Tmux`` (paste, key, capture) to ``Fleet``; tests and benches can hand the
service any object with the same methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from openbus.daemon.screens import Evidence, Reading, parse
from openbus.daemon.screens.base import screen_lines
from openbus.daemon.tmux.control import TmuxCommandError
from openbus.kernel.errors import NotFound, OpenbusError, Unavailable
from openbus.kernel.ids import is_pane_id


@dataclass(frozen=True)
class PaneView:
    """One pane as the directory sees it now."""

    pane: str
    incarnation: str
    harness: str
    state: str
    composer_empty: bool | None
    revision: int
    text: str | None
    title: str | None = None
    pids: tuple[int, ...] = ()  # the pane's process and the harness process
    branch: str | None = None

    @property
    def deliverable(self) -> bool:
        """Idle with an empty composer: waiting for input and holding no draft."""
        return self.state == "idle" and self.composer_empty is True


@dataclass(frozen=True)
class FleetChange:
    kind: str  # added | updated | removed | server | resync
    pane: str | None


class Fleet(Protocol):
    def view(self, pane: str) -> PaneView | None: ...

    def resolve(self, handle: str) -> list[PaneView]: ...

    def send_lock(self, pane: str) -> asyncio.Lock: ...

    def changes(self) -> AsyncIterator[FleetChange]: ...

    async def paste(self, pane: str, text: str) -> None: ...

    async def enter(self, pane: str) -> None: ...

    async def key(self, pane: str, key: str) -> None: ...

    async def capture(self, pane: str) -> str: ...

    async def pane_pid(self, pane: str) -> int | None: ...

    def reparse(self, pane: str, text: str) -> Reading | None: ...


_buffers = itertools.count(1)
POLL_FIRST = 0.001  # re-parse quickly at first, backing off to POLL_MAX
POLL_MAX = 0.02


async def until(
    fleet: Fleet, pane: str, predicate: Callable[[Reading, str], bool], timeout: float
) -> tuple[Reading, str] | None:
    """The first fresh capture of ``pane`` (re-parsed) that satisfies ``predicate``, with its
    screen, or None once ``timeout`` seconds passed without one."""
    deadline = time.monotonic() + timeout
    pause = POLL_FIRST
    while True:
        with contextlib.suppress(OpenbusError):
            text = normalize(await fleet.capture(pane))
            reading = fleet.reparse(pane, text)
            if reading is not None and predicate(reading, text):
                return reading, text
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(pause)
        pause = min(pause * 2, POLL_MAX)


def tmux_double_quoted(text: str) -> str:
    """``text`` as one double-quoted tmux word: taken literally, newlines as ``\\n``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return '"' + escaped.replace("\n", "\\n") + '"'


def normalize(text: str) -> str:
    return "\n".join(screen_lines(text))


class DirectoryFleet:
    """The real fleet: the daemon's directory and tmux adapter."""

    def __init__(self, directory: Any, tmux: Any) -> None:
        self.directory = directory
        self.tmux = tmux

    @staticmethod
    def _view(entry: Any) -> PaneView:
        reading = entry.reading
        return PaneView(
            pane=entry.pane_id,
            incarnation=entry.incarnation,
            harness=entry.harness,
            state=reading.state,
            composer_empty=reading.composer_empty,
            revision=entry.revision,
            text=entry.text,
            title=reading.title,
            pids=(entry.info.pid, entry.process.pid),
            branch=entry.branch,
        )

    def view(self, pane: str) -> PaneView | None:
        try:
            entry = self.directory.entry(pane)
        except OpenbusError:
            return None
        return self._view(entry)

    def resolve(self, handle: str) -> list[PaneView]:
        """The panes answering to ``handle``; for ``control`` with no live control-role pane,
        the panes of the tmux session named ``control``."""
        found = [self._view(e) for e in self.directory.resolve_handle(handle)]
        if handle.casefold() == "control" and all(v.state == "exited" for v in found):
            found = [
                self._view(e)
                for e in self.directory.entries()
                if getattr(e.info, "session_name", None) == "control"
            ]
        return found

    def send_lock(self, pane: str) -> asyncio.Lock:
        lock: asyncio.Lock = self.directory.send_lock(pane)
        return lock

    async def changes(self) -> AsyncIterator[FleetChange]:
        async for change in self.directory.changes():
            yield FleetChange(change.kind, change.pane_id)

    async def paste(self, pane: str, text: str) -> None:
        """One bracketed paste of ``text``. Over the watcher's control client when one is
        connected (one round trip, the text on the client's stdin), else through the adapter's
        ``send_literal`` (stdin of ``load-buffer``). Never in any process's argv."""
        client = getattr(self.tmux, "control", None)
        if client is not None and client.alive and is_pane_id(pane):
            name = f"openbus-msg-{os.getpid()}-{next(_buffers)}"
            line = (
                f"set-buffer -b {name} {tmux_double_quoted(text)} ; "
                f"paste-buffer -p -d -b {name} -t {pane}"
            )
            try:
                await client.command(line)
                return
            except TmuxCommandError as exc:
                detail = "; ".join(exc.lines) or "tmux refused the paste"
                if "can't find pane" in detail:
                    raise NotFound(f"no such pane {pane}", field="pane") from None
                raise Unavailable(f"tmux failed: {detail}") from None
            except ConnectionError:
                pass  # the control client went away: the one-shot path below
        await self.tmux.send_literal(pane, text)

    async def enter(self, pane: str) -> None:
        await self.tmux.send_key(pane, "Enter")

    async def key(self, pane: str, key: str) -> None:
        await self.tmux.send_key(pane, key)

    async def capture(self, pane: str) -> str:
        text: str = await self.tmux.capture(pane)
        return text

    async def pane_pid(self, pane: str) -> int | None:
        """The pane's process as tmux reports it now (None: the pane is gone)."""
        try:
            info = await self.tmux.pane_info(pane)
        except OpenbusError:
            return None
        pid: int = info.pid
        return pid

    def reparse(self, pane: str, text: str) -> Reading | None:
        try:
            entry = self.directory.entry(pane)
        except OpenbusError:
            return None
        info = entry.info
        status = None
        if entry.harness == "claude":
            try:
                status = self.directory.probe.claude_status(entry.process)
            except (OSError, ValueError):
                status = None
        evidence = Evidence(
            harness=entry.harness,
            pane_title=info.title,
            hostname=getattr(self.directory, "hostname", ""),
            dead=info.dead,
            in_mode=info.in_mode,
            claude_status=status,
        )
        return parse(normalize(text), evidence)
