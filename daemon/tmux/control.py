"""tmux control mode: a line parser (pure) and one control client (a ``tmux -C`` subprocess).

Theory of operation
-------------------
A control client (``tmux -C attach-session -t $N``) writes one line per event on stdout:

* notifications start with ``%`` outside a block: ``%output %3 <escaped bytes>``,
  ``%layout-change``, ``%window-add``, ``%sessions-changed``, ``%exit`` ...;
* every command written to its stdin (one command per line) answers with a block
  ``%begin <time> <number> <flags>`` ... ``%end|%error <time> <number> <flags>``; blocks for
  commands this client sent carry flag bit 1, others (the attach itself, hooks) do not. A
  line of several commands (``a ; b``) answers with a block for each, and tmux runs them
  together, nothing else between them (no child reaped, no other client's command); after a
  command that fails it runs none of the rest, so its ``%error`` block is the line's last.

``ControlParser`` turns lines into ``Notification`` and ``Block`` values and knows nothing of
processes. ``ControlClient`` owns the subprocess: commands are pipelined, and their blocks are
matched to waiting futures in order (tmux answers a client's commands in the order sent; a
line of several commands resolves its future once their blocks are all in, or at the first
``%error``). A
``%output`` line is reduced to its pane id without decoding its payload: the watcher only
needs to know which pane changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

log = logging.getLogger("openbus.tmux")

_LINE_LIMIT = 64 * 1024 * 1024
_READ_SIZE = 256 * 1024


@dataclass(frozen=True)
class Notification:
    name: str  # without the leading "%": "output", "layout-change", "exit", ...
    args: tuple[str, ...] = ()


@dataclass
class Block:
    number: str
    flags: int
    ok: bool = True
    lines: list[str] = field(default_factory=list)


class _Waiting:
    """A command line sent and not yet answered: its future, the loop time it was sent, how
    many of its commands' blocks are still to come after the next, their lines so far."""

    __slots__ = ("future", "line", "lines", "more", "sent")

    def __init__(
        self, line: str, future: asyncio.Future[list[str]], sent: float, commands: int
    ) -> None:
        self.line = line
        self.future = future
        self.sent = sent
        self.more = commands - 1
        self.lines: list[str] = []


class TmuxCommandError(Exception):
    def __init__(self, command: str, lines: Sequence[str]) -> None:
        self.command = command
        self.lines = list(lines)
        super().__init__("; ".join(self.lines) or "tmux command failed")


class ControlParser:
    """Feed it stdout (``feed_data``: any chunk of bytes; ``feed``: one line without its
    newline); get events back.

    ``feed_data`` finds a command block's end guard with one substring search over the
    buffered bytes and decodes the block's body at once, so a 40-line ``capture-pane`` answer
    costs a few calls rather than a few per line."""

    def __init__(self) -> None:
        self._block: Block | None = None
        self._guard: bytes = b""
        self._buf = b""
        self._scanned = 0  # inside a block: body bytes already searched for the end guard

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, raw: bytes) -> Notification | Block | None:
        block = self._block
        if block is not None:
            if raw.startswith((b"%end ", b"%error ")) and raw.split(b" ", 1)[1] == self._guard:
                block.ok = raw.startswith(b"%end ")
                self._block = None
                return block
            block.lines.append(raw.decode("utf-8", "replace"))
            return None
        return self._line(raw)

    def _line(self, raw: bytes) -> Notification | Block | None:
        if raw.startswith(b"%output "):
            parts = raw.split(b" ", 2)
            return Notification("output", (parts[1].decode("ascii", "replace"),))
        if raw.startswith(b"%begin "):
            guard = raw.split(b" ", 1)[1]
            fields = guard.split(b" ")
            if len(fields) == 3:
                self._guard = guard
                self._scanned = 0
                self._block = Block(
                    fields[1].decode(), int(fields[2]) if fields[2].isdigit() else 0
                )
            return None
        if raw.startswith(b"%"):
            words = raw[1:].decode("utf-8", "replace").split(" ")
            return Notification(words[0], tuple(words[1:]))
        return None

    def _block_end(self, buf: bytes, start: int) -> tuple[int, int, bool] | None:
        """(body end, line end, ok) of the open block's guard line at a line start, if any."""
        best: tuple[int, int, bool] | None = None
        for word, ok in ((b"%end ", True), (b"%error ", False)):
            needle = word + self._guard + b"\n"
            at = buf.find(needle, max(start + self._scanned - len(needle), start))
            while at not in (-1, start) and buf[at - 1] != 0x0A:
                at = buf.find(needle, at + 1)
            if at != -1 and (best is None or at < best[0]):
                best = (at, at + len(needle), ok)
        return best

    def feed_data(self, data: bytes) -> list[Notification | Block]:
        buf = self._buf + data if self._buf else data
        out: list[Notification | Block] = []
        pos = 0
        size = len(buf)
        while pos < size:
            block = self._block
            if block is not None:
                found = self._block_end(buf, pos)
                if found is None:
                    self._scanned = size - pos
                    break
                body_end, line_end, ok = found
                if body_end > pos:
                    block.lines = buf[pos : body_end - 1].decode("utf-8", "replace").split("\n")
                block.ok = ok
                self._block = None
                out.append(block)
                pos = line_end
                continue
            nl = buf.find(b"\n", pos)
            if nl == -1:
                break
            event = self._line(buf[pos:nl])
            pos = nl + 1
            if event is not None:
                out.append(event)
        self._buf = buf[pos:]
        return out


def _drop_outcome(future: asyncio.Future[list[str]]) -> None:
    if not future.cancelled():
        future.exception()


class ControlClient:
    """One ``tmux -C`` client attached to one session.

    Its stdout is read by a callback on the event loop (no task, no stream buffer): each time
    the pipe is readable, everything in it is read and dispatched at once. ``hold`` stops
    watching the pipe while no command of this client waits for its answer: what tmux writes
    meanwhile (``%output`` lines) waits in the pipe and is read in one go by ``release``, so a
    follower that acts on output only now and then (the watcher's capture batches) is not
    woken by every line."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        on_event: Callable[[ControlClient, Notification], None],
        *,
        label: str = "",
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.label = label
        self._on_event = on_event
        self._proc: asyncio.subprocess.Process | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd: int | None = None  # the read end of the client's stdout
        self._parser = ControlParser()
        self._held = False
        self._watched = False
        self._finish: asyncio.Task[None] | None = None
        # command lines sent and not yet answered, in order
        self._waiting: deque[_Waiting] = deque()
        self.closed = asyncio.Event()
        self.exit_reason: str | None = None
        self.name: str | None = None  # tmux's name for this client (``client-<pid>``), once known
        self.heard = 0.0  # the loop time anything last came from this client

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def waiting_since(self) -> float | None:
        """The loop time the oldest command still unanswered was sent (None: all answered).
        tmux answers in order, so a client that keeps printing ``%output`` while this grows
        old has stopped answering commands (a wedged command queue)."""
        return self._waiting[0].sent if self._waiting else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and not self.closed.is_set()

    async def start(self) -> None:
        # stdout on a pipe of our own: tmux hands a control client's stdio to its server, so
        # only this end (closed when the client ends or is killed) is sure to go away
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        try:
            os.set_blocking(read_fd, False)
            self._proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=write_fd,
                stderr=asyncio.subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        self._loop = loop
        self._fd = read_fd
        self.heard = loop.time()
        self._watch()

    def hold(self) -> None:
        """Read nothing until ``release``, except while a command of this client waits for its
        answer (a command is never kept waiting by a hold)."""
        self._held = True
        self._watch()

    def release(self) -> None:
        """Read and dispatch now what was written during a hold, and watch the pipe again."""
        self._held = False
        if self._fd is not None:
            self._readable()
        self._watch()

    def _watch(self) -> None:
        """Watch the pipe unless held with no command waiting."""
        loop, fd = self._loop, self._fd
        want = fd is not None and (not self._held or bool(self._waiting))
        if loop is None or fd is None or want == self._watched:
            return
        if want:
            loop.add_reader(fd, self._readable)
        else:
            loop.remove_reader(fd)
        self._watched = want

    def send(self, lines: Sequence[str], *, commands: int = 1) -> list[asyncio.Future[list[str]]]:
        """Write command lines at once; one future per line, in order. Each line holds
        ``commands`` commands (``a ; b``): its future has their output lines, or the error of
        the first that failed."""
        proc = self._proc
        if proc is None or proc.stdin is None or self.closed.is_set():
            raise ConnectionError("the tmux control client is not connected")
        loop = asyncio.get_running_loop()
        now = loop.time()
        futures: list[asyncio.Future[list[str]]] = []
        for line in lines:
            if "\n" in line or "\r" in line:
                raise ValueError("a control-mode command must be one line")
            future: asyncio.Future[list[str]] = loop.create_future()
            self._waiting.append(_Waiting(line, future, now, commands))
            futures.append(future)
        try:
            proc.stdin.write(("\n".join(lines) + "\n").encode("utf-8"))
        except (ConnectionError, RuntimeError) as exc:
            self._fail_waiting(f"write failed: {exc}")
            raise ConnectionError("the tmux control client went away") from None
        self._watch()  # its answers are read as they come, held or not
        return futures

    def send_quietly(self, lines: Sequence[str]) -> list[asyncio.Future[list[str]]]:
        """``send`` for commands whose answer nobody awaits: their failures are dropped."""
        futures = self.send(lines)
        for future in futures:
            future.add_done_callback(_drop_outcome)
        return futures

    async def command(self, line: str, timeout: float = 10.0, *, commands: int = 1) -> list[str]:
        (future,) = self.send([line], commands=commands)
        return await asyncio.wait_for(future, timeout)

    def _readable(self) -> None:
        """Read everything in the pipe and dispatch it; end the client at its end of file."""
        loop = self._loop
        assert loop is not None
        while self._fd is not None:
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                break
            except OSError as exc:
                self._end(f"reading failed: {exc}")
                return
            if not data:
                self._end(self.exit_reason or "tmux control client exited")
                return
            self.heard = loop.time()
            self._dispatch(self._parser.feed_data(data))
            if self._parser.buffered > _LINE_LIMIT:
                self.exit_reason = "line too long"
                self._end(self.exit_reason)
                return
            if len(data) < _READ_SIZE:
                break  # the pipe is empty: no read just to hear so
        self._watch()

    def _dispatch(self, events: list[Notification | Block]) -> None:
        for event in events:
            if isinstance(event, Block):
                if event.flags & 1 and self._waiting:
                    waiting = self._waiting[0]
                    if event.ok and waiting.more:  # more of its line's commands to come
                        waiting.more -= 1
                        waiting.lines += event.lines
                        continue
                    self._waiting.popleft()
                    future = waiting.future
                    if not future.done():
                        if event.ok:
                            done = waiting.lines
                            future.set_result(done + event.lines if done else event.lines)
                        else:
                            future.set_exception(TmuxCommandError(waiting.line, event.lines))
                continue
            if event.name == "exit":
                self.exit_reason = " ".join(event.args) or "exit"
            try:
                self._on_event(self, event)
            except Exception:
                log.exception("tmux event handler failed on %s", event.name)

    def _end(self, why: str) -> None:
        """Stop reading for good: fail what waits, close the pipe; then reap the process and
        tell ``client-closed``."""
        fd = self._fd
        if fd is None:
            return
        if self._watched and self._loop is not None:
            self._loop.remove_reader(fd)
            self._watched = False
        self._fd = None
        os.close(fd)
        self._fail_waiting(why)
        self.closed.set()
        if self._loop is not None:
            self._finish = self._loop.create_task(
                self._finished(), name=f"tmux-control-end {self.label}"
            )

    async def _finished(self) -> None:
        await self._reap()
        with contextlib.suppress(Exception):
            self._on_event(self, Notification("client-closed"))

    def _fail_waiting(self, why: str) -> None:
        while self._waiting:
            future = self._waiting.popleft().future
            if not future.done():
                future.set_exception(ConnectionError(why))

    async def _reap(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 2.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    def kill(self) -> None:
        """End a client that stopped delivering: SIGKILL its process and stop reading now.
        The server holds the client's stdout (tmux passes a control client's stdio to the
        server at attach), so a wedged server never ends it: reading stops here rather than
        waiting for an end of file, and the client closes as on one."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        self._end(self.exit_reason or "tmux control client exited")

    async def close(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()  # EOF on stdin: tmux detaches this client
        self.release()  # read on to the end of file
        try:
            await asyncio.wait_for(self.closed.wait(), 3.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            self._end(self.exit_reason or "tmux control client exited")
        if self._finish is not None:
            await asyncio.shield(self._finish)
