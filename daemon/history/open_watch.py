"""Which opens and closes happened in the transcript folders: a count kept by inotify.

Theory of operation
-------------------
Whether a Codex rollout (or an OpenCode database) is running is answered by a scan of every
process's open files (``liveness``): milliseconds on a busy box, and on a thread beside the
event loop, so each costs the loop its share of the interpreter too. Which files are held
open changes only when one is opened or closed (a process's exit closes its files, a fork
adds a holder of a file already held, which changes nothing that is answered), or when a file
is created, removed or renamed. So a scan taken while nothing of that kind happened in a
file's folder still answers for that file, however old it is.

``OpenWatch`` watches the transcript folders (every folder under the given ``trees``, found
by walking them, and each new folder as it appears there; each of the ``folders`` alone, as
an OpenCode data folder whose database sits at its top beside folders of other files) with
one inotify instance, and counts what
it is told: ``stamp()`` reads what is queued and returns the count. Opens and closes are
queued by the kernel inside the ``open`` and ``close`` calls themselves, so a stamp read
before a scan starts and read again unchanged later means no file in a covered folder was
opened or closed since: the scan is still the answer for those files. A folder's own opening
(a listing: the reconcile's walk) is not counted; a lost event (the queue overflowed), a new
folder (files may have been opened in it before it was watched) or a watched folder removed
or moved all count, so the next answer takes a new scan. Nothing reads the events between
answers (no thread, no wake-up of the event loop): they wait in the kernel's queue, at most
``fs.inotify.max_queued_events`` of them (16,384 by default), past which one overflow event
stands for the rest; after it every folder is walked and watched again (one made meanwhile
would be missed, and one removed, or moved, and made again under its old path taken for the
folder it replaced).

``covers(path)`` says whether a file's opens reach the count: its folder is watched under
that very path and the path itself is not a symlink (a file opened through a link in a
watched folder is another folder's file). A file reached through a second hard link in an
unwatched folder is not seen; transcripts are not hard-linked. Anything that fails (no
inotify, no permission on a folder, the user's watch limit) leaves that folder uncovered,
and its files are answered by the time-bound scan as before.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import struct
import threading
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

IN_CLOSE_WRITE = 0x8
IN_CLOSE_NOWRITE = 0x10
IN_OPEN = 0x20
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_ISDIR = 0x40000000

MASK = (
    IN_OPEN
    | IN_CLOSE_WRITE
    | IN_CLOSE_NOWRITE
    | IN_CREATE
    | IN_DELETE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
)
_OPEN_CLOSE = IN_OPEN | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (then the name, padded)
_READ_SIZE = 64 * 1024


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):
        return None
    return libc


class OpenWatch:
    """The opens and closes in every folder under ``trees`` and in each of ``folders`` (those
    that exist; ``arm`` takes up the others once they do)."""

    def __init__(self, trees: Iterable[Path], folders: Iterable[Path] = ()) -> None:
        self.flat = frozenset(str(f) for f in folders)  # watched without their subfolders
        self.roots = (*(str(r) for r in trees), *sorted(self.flat))
        self._lock = threading.Lock()
        self._count = 0
        self._paths: dict[int, str] = {}  # watch descriptor -> folder
        self._wds: dict[str, int] = {}  # folder -> watch descriptor
        self._lost = False  # the queue overflowed: walk the roots again after reading it
        self._libc = _libc()
        self._fd = -1
        if self._libc is not None:
            fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                log.info("no inotify (%s): transcript liveness rescans by time", _err())
            self._fd = fd
        self.arm()

    @property
    def working(self) -> bool:
        return self._fd >= 0

    def folders(self) -> int:
        """How many folders are watched now."""
        with self._lock:
            if self._fd >= 0:
                self._drain()
            return len(self._wds)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            self._paths.clear()
            self._wds.clear()

    def arm(self) -> None:
        """Watch the roots not watched yet that exist now (and every folder under them)."""
        with self._lock:
            for root in self.roots:
                if root not in self._wds and self._add_tree(root):
                    self._count += 1  # files may have been opened there before

    def stamp(self) -> int | None:
        """The count of what happened in the watched folders, after reading what is queued;
        None without a watch."""
        with self._lock:
            if self._fd < 0:
                return None
            self._drain()
            return self._count

    def covers(self, path: str) -> bool:
        """Whether opening or closing the file at ``path`` is counted."""
        folder = os.path.dirname(path)
        with self._lock:
            if folder not in self._wds:
                return False
        try:
            return not os.path.islink(path)
        except (OSError, ValueError):
            return False

    # ---------------------------------------------------------------- inside the lock

    def _drain(self) -> None:
        self._read_queue()
        if self._lost and self._fd >= 0:
            self._lost = False
            self._rewalk()

    def _read_queue(self) -> None:
        while True:
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                log.warning("inotify read failed (%s): transcript liveness rescans by time", exc)
                os.close(self._fd)
                self._fd = -1
                return
            offset = 0
            while offset + _HEADER.size <= len(data):
                wd, mask, _cookie, size = _HEADER.unpack_from(data, offset)
                offset += _HEADER.size
                name = data[offset : offset + size].split(b"\0", 1)[0]
                offset += size
                self._event(wd, mask, os.fsdecode(name))

    def _event(self, wd: int, mask: int, name: str) -> None:
        if mask & IN_ISDIR and mask & _OPEN_CLOSE:
            return  # a folder listed: no file's holders changed
        self._count += 1
        if mask & IN_Q_OVERFLOW:
            self._lost = True
            return
        folder = self._paths.get(wd)
        if mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF):
            if folder is not None:
                self._drop_tree(folder)
            return
        if folder is None or not mask & IN_ISDIR:
            return
        child = os.path.join(folder, name)
        if mask & (IN_CREATE | IN_MOVED_TO):
            if folder not in self.flat:
                self._add_tree(child)
        elif mask & (IN_DELETE | IN_MOVED_FROM):
            self._drop_tree(child)

    def _rewalk(self) -> None:
        """Events were lost: a folder made meanwhile is not watched, one removed still looks
        watched, and one removed and made again under its path looks like the one it
        replaced. Every root is walked again: each folder found is watched (the kernel
        answers a folder already watched with its watch), under the watch the kernel gives
        for it now; a folder not found is dropped. (The walk's own listings queue events,
        read by the next stamp, not now: a queue too small for them overflows once more
        there, not in a loop here.)"""
        found: set[str] = set()
        for root in self.roots:
            self._add_tree(root, found)
        for folder in [f for f in self._wds if f not in found]:
            self._forget(folder)

    def _add_tree(self, top: str, again: set[str] | None = None) -> bool:
        """Watch ``top`` and every folder under it (not through symlinks below ``top``);
        ``again``: those already watched too, each added to that set."""
        if self._fd < 0 or self._libc is None:
            return False
        added = False
        pending = [top]
        while pending:
            folder = pending.pop()
            if again is None and folder in self._wds:
                continue
            wd = self._libc.inotify_add_watch(self._fd, os.fsencode(folder), MASK)
            if wd < 0:
                code = ctypes.get_errno()
                if code not in (errno.ENOENT, errno.ENOTDIR):
                    log.info(
                        "cannot watch %s (%s): liveness there rescans by time", folder, _err(code)
                    )
                continue
            if again is not None:
                again.add(folder)
                if self._wds.get(folder) not in (None, wd):  # another folder at this path now
                    self._forget(folder)
            self._paths[wd] = folder
            self._wds[folder] = wd
            added = True
            if folder not in self.flat:
                pending += _subfolders(folder)
        return added

    def _drop_tree(self, top: str) -> None:
        """Forget ``top`` and the folders under it: their paths are no longer what they were."""
        inside = top + os.sep
        for folder in [f for f in self._wds if f == top or f.startswith(inside)]:
            self._forget(folder)

    def _forget(self, folder: str) -> None:
        """No longer watch ``folder`` under its path; its watch is removed unless it follows
        the folder under another path now (moved)."""
        wd = self._wds.pop(folder, None)
        if wd is not None and self._paths.get(wd) == folder:
            del self._paths[wd]
            if self._libc is not None and self._fd >= 0:
                self._libc.inotify_rm_watch(self._fd, wd)  # gone already: EINVAL, harmless


def _subfolders(folder: str) -> list[str]:
    try:
        with os.scandir(folder) as entries:
            return [e.path for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _err(code: int | None = None) -> str:
    code = ctypes.get_errno() if code is None else code
    return os.strerror(code)
