"""Each pane's process, followed by the kernel: told the moment it exits, at no cost meanwhile.

Theory of operation
-------------------
tmux announces to no control client that a pane's process died (``remain-on-exit``) or was
replaced (``respawn-pane -k``). The watcher could only see it by listing every pane's process
again, and each listing of a 200-pane server is a good part of what an idle box costs. So each
live pane's process gets a pidfd (``pidfd_open``), read by the event loop: it becomes readable
when the process exits, and ``exited(pane)`` is called once; the watcher then reads that
pane's metadata again (the new process, or the dead flag) and captures it.

A pane is in one of three states here:

* watched: a pidfd is open on the process its metadata names;
* owed: its process was seen to exit (its pidfd fired, or it had already gone when the pidfd
  was asked for) and ``exited`` was told; it is watched again once its metadata is read again
  and names a live process;
* unwatched, left to the listing: no pidfd can follow it (``pidfd_open`` failed: no file
  descriptors left, a kernel without pidfds), tmux went on naming, twice after it was told, a
  process seen to exit (its server not yet caught up), or the pane is dead (``remain-on-exit``:
  nothing to watch, and ``respawn-pane`` bringing it back is announced to no control client).
  ``complete`` is then False, and the watcher's rounds list every pane's process and dead flag
  again, as before pidfds, until the pane is forgotten or followed anew with a live process.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from collections.abc import Callable

from openbus.daemon.tmux.adapter import PaneInfo

OpenPidfd = Callable[[int], int]

GONE = -1  # the pidfd of a process that had exited before it was asked for

# How many times a pane naming the same process is told as exited before it is left unwatched
REPORTS = 2


class ProcessWatch:
    def __init__(
        self, exited: Callable[[str], None], *, open_pidfd: OpenPidfd = os.pidfd_open
    ) -> None:
        self.exited = exited
        self.open_pidfd = open_pidfd
        self._fds: dict[str, tuple[int, int]] = {}  # pane -> (pid, pidfd)
        self._told: dict[str, tuple[int, int]] = {}  # pane -> (pid, times told it exited)
        self._unwatched: set[str] = set()

    @property
    def complete(self) -> bool:
        """Every pane followed has its process watched (or is owed a new reading): none is
        left to the listing."""
        return not self._unwatched

    @property
    def watched(self) -> int:
        """Open pidfds."""
        return sum(1 for _, fd in self._fds.values() if fd != GONE)

    def follow(self, info: PaneInfo) -> None:
        """Watch the process ``info`` names (idempotent; a new process replaces the old)."""
        pane = info.pane_id
        held = self._fds.get(pane)
        if held is not None and held[0] == info.pid and not info.dead:
            return
        self._close(pane)
        self._unwatched.discard(pane)
        if info.dead or info.pid <= 0:
            self._told.pop(pane, None)
            self._unwatched.add(pane)  # only the listing sees a respawn, or names a process
            return
        told = self._told.get(pane)
        if told is not None and told[0] == info.pid and told[1] >= REPORTS:
            self._unwatched.add(pane)  # tmux still names a process that has gone
            return
        loop = asyncio.get_running_loop()
        try:
            fd = self.open_pidfd(info.pid)
        except OSError as exc:
            if exc.errno != errno.ESRCH:
                self._unwatched.add(pane)
                return
            self._fds[pane] = (info.pid, GONE)  # gone already: told as it would be by its fd
            loop.call_soon(self._exit, pane, info.pid)
            return
        self._fds[pane] = (info.pid, fd)
        loop.add_reader(fd, self._exit, pane, info.pid)

    def sync(self, infos: list[PaneInfo]) -> None:
        """Follow exactly these panes."""
        listed = {info.pane_id for info in infos}
        for pane in [*self._fds, *self._told, *self._unwatched]:
            if pane not in listed:
                self.forget(pane)
        for info in infos:
            self.follow(info)

    def forget(self, pane: str) -> None:
        self._close(pane)
        self._told.pop(pane, None)
        self._unwatched.discard(pane)

    def clear(self) -> None:
        for pane in list(self._fds):
            self._close(pane)
        self._told.clear()
        self._unwatched.clear()

    def _exit(self, pane: str, pid: int) -> None:
        held = self._fds.get(pane)
        if held is None or held[0] != pid:
            return  # a pane forgotten, or followed anew, since
        self._close(pane)
        told = self._told.get(pane)
        self._told[pane] = (pid, told[1] + 1 if told is not None and told[0] == pid else 1)
        self.exited(pane)

    def _close(self, pane: str) -> None:
        held = self._fds.pop(pane, None)
        if held is None or held[1] == GONE:
            return
        with contextlib.suppress(ValueError, RuntimeError):  # (a loop already closed)
            asyncio.get_running_loop().remove_reader(held[1])
        os.close(held[1])
