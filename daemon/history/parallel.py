"""Reading and parsing transcripts on a second core while a reconcile writes what is read.

Theory of operation
-------------------
A reconcile of many changed transcripts is bound by one core: Python runs one thread at a
time, and reading and parsing the files is about half of a full reindex, the store's writes
most of the rest. So a reconcile of at least ``HELPER_MIN`` files starts one helper process
(``parse_helper``, run with ``-m``): the files are cut into units of ``UNIT``, and the
reconcile and the helper each take the lowest unit nobody has taken, the helper kept ``AHEAD``
units ahead once it has started; the reconcile takes one whenever the unit it must write next
is not back yet. It writes every unit in order, as it would alone (so the newest sessions
still get the highest rowids): which side read a file changes nothing of what is written.

The helper must never wait for the reconcile, which hands it units and takes its answers only
between its own reads and writes (a batch's write takes several units' reading time): so it is
kept ``AHEAD`` (16) units ahead, and the pipes both ways are widened to ``PIPE_SIZE`` (1 MiB,
Linux's most for a user by default) so that many answers wait there (a unit of 64
transcripts answers in about 33 KB on ``bench_history``'s corpus; the default pipe, 64 KiB,
held two, and the helper then blocked while the reconcile wrote: measured, it read 1,656 of
3,000 files rather than about 2,050, and the pass took 0.14 s rather than 0.13).

``parse_units`` is that schedule, a unit's state being ``FREE`` (nobody's), ``HELPER`` (sent,
not back) or ``DONE``. A helper that cannot start, dies, or answers what it should not is
dropped (``HelperGone``): its units go back to ``FREE`` and the reconcile reads them itself.
The reconcile's own thread does all of it: no lock, no thread of its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import select
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Generator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from openbus.daemon.history import parse_helper
from openbus.daemon.history.parse_helper import STARTED, Result, result_in

if TYPE_CHECKING:
    from openbus.daemon.history.sources import Listed

log = logging.getLogger("openbus.history")

HELPER_MIN = 1000  # changed files from which a reconcile starts a helper (its start: ~0.1 s)
UNIT = 64  # files a unit holds
AHEAD = 16  # units sent to the helper and not yet back
PIPE_SIZE = 1 << 20  # bytes each pipe to and from the helper is asked to hold

FREE, HELPER, DONE = "free", "helper", "done"


class HelperGone(Exception):
    """The helper could not start, ended, or said what it should not: read here instead."""


# --------------------------------------------------------------------------- the schedule


def parse_units(
    units: Sequence[Sequence[Listed]],
    here: Callable[[Listed], Result],
    helper: ParseHelper | None,
) -> Generator[list[Result], None, None]:
    """Each unit's results, in order. ``here`` parses a file in this process; ``helper``
    (None: none) parses other units meanwhile, and is closed when this ends."""
    state = [FREE] * len(units)
    done: dict[int, list[Result]] = {}
    free = 0  # no unit below it is FREE

    def lowest_free() -> int:
        nonlocal free
        while free < len(units) and state[free] != FREE:
            free += 1
        return free

    def drop(why: HelperGone) -> None:
        nonlocal helper, free
        log.warning("history: the parse helper is dropped, the reconcile reads alone: %s", why)
        if helper is not None:
            helper.close()
        helper = None
        for unit, now in enumerate(state):
            if now == HELPER:
                state[unit] = FREE
                free = min(free, unit)

    def feed() -> None:
        try:
            while helper is not None and helper.started() and len(helper.pending) < AHEAD:
                unit = lowest_free()
                if unit >= len(units):
                    return
                helper.give(unit, units[unit])
                state[unit] = HELPER
        except HelperGone as exc:
            drop(exc)

    def collect(block: bool) -> None:
        while helper is not None and helper.pending and (block or helper.ready()):
            try:
                unit, results = helper.take()
            except HelperGone as exc:
                drop(exc)
                return
            state[unit] = DONE
            done[unit] = [
                here(t) if r is None else r for t, r in zip(units[unit], results, strict=True)
            ]
            block = False

    try:
        for want in range(len(units)):
            while want not in done:
                feed()
                collect(block=False)
                if want in done:
                    break
                unit = lowest_free() if state[want] == HELPER else want
                if unit < len(units):
                    state[unit] = DONE
                    done[unit] = [here(t) for t in units[unit]]
                else:  # all taken: wait for the helper
                    collect(block=True)
            yield done.pop(want)
    finally:
        if helper is not None:
            helper.close()


# --------------------------------------------------------------------------- the helper


class ParseHelper:
    """The helper process, from the reconcile's side."""

    def __init__(self, names: Mapping[str, Mapping[str, str]]) -> None:
        # where this process found its modules, and no ``site`` (its start is most of the
        # helper's: a ``.pth`` file's finder alone takes longer than these modules)
        root = str(Path(__file__).parents[__name__.count(".")])  # holds openbus/
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, sys.path)])}
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-S", "-m", parse_helper.__name__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                bufsize=0,
                env=env,
            )
        except OSError as exc:
            raise HelperGone(str(exc)) from None
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._in = self._proc.stdin
        self._out = self._proc.stdout.fileno()
        for fd in (self._in.fileno(), self._out):  # (refused past the user's quota: as is)
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        self._buffer = bytearray()
        self._started = False
        self.pending: deque[tuple[int, int]] = deque()  # units sent and their sizes, in order
        self.files_read = 0  # files it answered for (not those it left to the reconcile)
        try:
            self._send(names)
        except HelperGone:
            self.close()
            raise

    @property
    def pid(self) -> int:
        return self._proc.pid

    def started(self) -> bool:
        """The helper has started and read the names (it says so): a unit given now is
        parsed at once, not after its start."""
        if not self._started:
            line = self._line(wait=False)
            if line is None:
                return False
            if line != STARTED:
                raise HelperGone("the helper did not start as it should")
            self._started = True
        return True

    def give(self, unit: int, transcripts: Sequence[Listed]) -> None:
        wire = [[harness, path, str(root)] for harness, path, root, _ in transcripts]
        self._send([unit, wire])
        self.pending.append((unit, len(transcripts)))

    def ready(self) -> bool:
        """An answer can be taken without waiting."""
        return b"\n" in self._buffer or self._readable()

    def take(self) -> tuple[int, list[Result | None]]:
        """The next unit's results (waits for them), None for a file to parse here."""
        line = self._line(wait=True)
        try:
            unit, results = orjson.loads(line)  # type: ignore[arg-type]  # not None: waited
            if (unit, len(results)) != self.pending[0]:
                raise HelperGone(f"the helper answered unit {unit} out of turn")
            self.pending.popleft()
            read = [result_in(r) for r in results]
            self.files_read += sum(r is not None for r in read)
            return unit, read
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            raise HelperGone(f"the helper's answer is unreadable: {exc}") from None

    def _line(self, wait: bool) -> bytes | None:
        """The helper's next line; None when ``wait`` is False and none has come whole."""
        while (end := self._buffer.find(b"\n")) < 0:
            if not wait and not self._readable():
                return None
            chunk = os.read(self._out, 1 << 20)
            if not chunk:
                raise HelperGone("the helper ended")
            self._buffer += chunk
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return line

    def _readable(self) -> bool:
        return bool(select.select([self._out], [], [], 0)[0])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._in.close()
        if self.pending:  # it would parse what nobody wants any more
            self._proc.kill()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc.stdout.close()  # type: ignore[union-attr]

    def _send(self, value: object) -> None:
        try:
            data = memoryview(orjson.dumps(value) + b"\n")
            while data:
                data = data[os.write(self._in.fileno(), data) :]
        except orjson.JSONEncodeError as exc:  # a name that is no text (not UTF-8)
            raise HelperGone(str(exc)) from None
        except OSError as exc:  # BrokenPipeError: it has ended
            raise HelperGone(str(exc)) from None


def start_helper(names: Mapping[str, Mapping[str, str]]) -> ParseHelper | None:
    """A helper, or None when none could start (the reconcile then parses alone)."""
    try:
        return ParseHelper(names)
    except HelperGone:
        return None
