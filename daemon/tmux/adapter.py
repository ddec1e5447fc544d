"""The thin tmux adapter: the primitives every feature uses, over one tmux server.

Theory of operation
-------------------
``Tmux(socket)`` names one server (``None``: the user's default server, resolved the way tmux
does: ``$TMUX``'s socket, else ``$TMUX_TMPDIR``/``/tmp`` + ``tmux-<uid>/default``). Reads go
through the watcher's control client when one is connected (no process per call), else
through a one-shot ``tmux`` subprocess. Anything that carries text or environment a user
might not want published (message text, launch environment with tokens) never goes into a
process's argv, which any local user can read through /proc:

* ``send_literal`` loads the text into a uniquely named buffer from stdin and pastes it with
  ``paste-buffer -p -d`` (a bracketed paste when the application asked for one);
* ``new_window`` and ``respawn_pane`` are written as command lines on a control client's
  stdin, so ``-e NAME=VALUE`` reaches the tmux server and the child's environment only.

Errors: a server that is not running raises ``Unavailable``; a pane that does not exist
raises ``NotFound`` naming it; bad arguments raise ``BadRequest`` naming the field.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import shlex
import shutil
import socket as socketlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from openbus.daemon.tmux.control import ControlClient, Notification, TmuxCommandError
from openbus.kernel.errors import BadRequest, NotFound, Unanswered, Unavailable
from openbus.kernel.ids import check_pane_id, is_pane_id

_SEP = "\x1f"
PANE_FIELDS = (
    "pane_id",
    "pane_pid",
    "pane_current_command",
    "pane_current_path",
    "pane_title",
    "pane_dead",
    "pane_dead_status",
    "pane_in_mode",
    "pane_width",
    "pane_height",
    "window_id",
    "window_index",
    "window_name",
    "session_id",
    "session_name",
)
PANE_FORMAT = _SEP.join("#{" + name + "}" for name in PANE_FIELDS)
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_OPTION = re.compile(r"^@?[a-z][a-z0-9-]{0,63}$")
_KEY = re.compile(
    r"^(?:[CMS]-){0,3}(?:[A-Za-z0-9]|Enter|Escape|Tab|BTab|BSpace|Space|Up|Down|Left|Right|"
    r"Home|End|PageUp|PageDown|PPage|NPage|DC|IC|F(?:[1-9]|1[0-2]))$"
)
_buffer_names = itertools.count(1)


@dataclass(frozen=True)
class PaneInfo:
    pane_id: str
    pid: int
    current_command: str
    cwd: str
    title: str
    dead: bool
    dead_status: int | None
    in_mode: bool
    width: int
    height: int
    window_id: str
    window_index: int
    window_name: str
    session_id: str
    session_name: str

    @classmethod
    def parse(cls, line: str) -> PaneInfo | None:
        parts = line.split(_SEP)
        if len(parts) != len(PANE_FIELDS) or not is_pane_id(parts[0]):
            return None

        def num(text: str, default: int = 0) -> int:
            return int(text) if text.lstrip("-").isdigit() else default

        return cls(
            pane_id=parts[0],
            pid=num(parts[1]),
            current_command=parts[2],
            cwd=parts[3],
            title=parts[4],
            dead=parts[5] == "1",
            dead_status=num(parts[6]) if parts[6] else None,
            in_mode=parts[7] == "1",
            width=num(parts[8]),
            height=num(parts[9]),
            window_id=parts[10],
            window_index=num(parts[11]),
            window_name=parts[12],
            session_id=parts[13],
            session_name=parts[14],
        )


def default_socket(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    inside = env.get("TMUX", "")
    if inside:
        return Path(inside.split(",", 1)[0])
    tmpdir = env.get("TMUX_TMPDIR") or "/tmp"  # noqa: S108 - where tmux itself looks
    return Path(tmpdir) / f"tmux-{os.getuid()}" / "default"


def quote(word: str) -> str:
    """One word for tmux's command parser, taken literally (single quotes)."""
    if "\n" in word or "\r" in word or "\0" in word:
        raise ValueError("newline or NUL in a tmux word")
    return "'" + word.replace("'", "'\\''") + "'"


def quote_format(word: str) -> str:
    """A word tmux expands as a format (``-c``, ``-n``): ``#`` doubled, then quoted."""
    return quote(word.replace("#", "##"))


def _check_argv(argv: Sequence[str]) -> list[str]:
    words = list(argv)
    if not words or not all(isinstance(a, str) and a for a in words[:1]):
        raise BadRequest("argv must be a non-empty list of strings", field="argv")
    for i, arg in enumerate(words):
        if not isinstance(arg, str) or any(c in arg for c in "\n\r\0"):
            raise BadRequest(
                "argv items must be strings without newlines or NUL", field=f"argv[{i}]"
            )
    return words


def _check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (env or {}).items():
        if not _ENV_KEY.match(key):
            raise BadRequest("not a valid environment variable name", field=f"env.{key}")
        if not isinstance(value, str) or any(c in value for c in "\n\r\0"):
            raise BadRequest("environment values must be one line of text", field=f"env.{key}")
        out[key] = value
    return out


class Tmux:
    """Primitives over one tmux server."""

    def __init__(self, socket: Path | None = None, *, binary: str | None = None) -> None:
        self.socket = Path(socket) if socket is not None else default_socket()
        self.binary = binary or shutil.which("tmux") or "tmux"
        self.env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        self.control: ControlClient | None = None  # set by the watcher while connected
        self._starting = asyncio.Lock()

    # ------------------------------------------------------------------ plumbing

    def base_argv(self) -> list[str]:
        return [self.binary, "-S", str(self.socket)]

    def reachable(self) -> bool:
        """Whether a server listens on the socket (a connect, no process started). One whose
        queue of connections is full (a wedged server that many clients wait on: the connect
        would block) is there, busy, not gone: callers take "not reachable" for the server's
        end (its panes and their agents with it)."""
        with socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            try:
                sock.connect(str(self.socket))
            except (BlockingIOError, TimeoutError):
                return True
            except OSError:
                return False
        return True

    async def run(self, *args: str, stdin: bytes | None = None, timeout: float = 15.0) -> str:
        """One tmux command in a subprocess; stdout as text."""
        proc = await asyncio.create_subprocess_exec(
            *self.base_argv(),
            *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            # a stopped server still holds the client's stdio (handed over at connect): the
            # pipes end only once it runs again, so the wait for them is bounded too
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 1.0)
            raise Unanswered(f"tmux did not answer within {timeout:g}s") from None
        if proc.returncode != 0:
            raise self._error(err.decode("utf-8", "replace").strip(), args)
        return out.decode("utf-8", "replace")

    def _error(self, message: str, args: Sequence[str]) -> Exception:
        lowered = message.lower()
        if (
            "no server running" in lowered
            or "error connecting" in lowered
            or "no sessions" in lowered
        ):
            return Unavailable(f"no tmux server running on {self.socket}")
        if "can't find pane" in lowered or "can't find window" in lowered:
            target = next((a for a in args if is_pane_id(a)), "")
            return NotFound(f"no such pane {target}".strip(), field="pane")
        return Unavailable(f"tmux failed: {message or 'unknown error'}")

    async def _via_control(self, line: str, *, commands: int = 1) -> list[str]:
        """Run one command line (of ``commands`` commands) on the connected control client,
        else a one-shot one."""
        client = self.control
        if client is not None and client.alive:
            try:
                return await client.command(line, commands=commands)
            except TmuxCommandError as exc:
                raise self._error(str(exc), line.split(" ")) from None
            except ConnectionError:
                pass
        return await self._one_shot_control(line, commands)

    async def _one_shot_control(self, line: str, commands: int = 1) -> list[str]:
        sessions = await self.list_sessions()
        if not sessions:
            raise Unavailable(f"no tmux session on {self.socket} to run the command in")

        def ignore(client: ControlClient, event: Notification) -> None:
            return None

        client = ControlClient(
            self.attach_argv(sessions[0], output=False), self.env, ignore, label="one-shot"
        )
        await client.start()
        try:
            return await client.command(line, commands=commands)
        except TmuxCommandError as exc:
            raise self._error(str(exc), line.split(" ")) from None
        except ConnectionError:
            raise Unavailable(f"the tmux server on {self.socket} went away") from None
        finally:
            await client.close()

    def attach_argv(
        self, session_id: str, *, output: bool = True, then: Sequence[Sequence[str]] = ()
    ) -> list[str]:
        """A control client's argv; ``then`` are commands tmux runs right after the attach, as
        that client (one sent on its stdin may beat the attach and fail: "no current client")."""
        flags = "ignore-size" if output else "ignore-size,no-output"
        argv = [*self.base_argv(), "-C", "attach-session", "-E", "-f", flags, "-t", session_id]
        for command in then:
            argv += [";", *command]
        return argv

    async def _read_command(self, *args: str) -> list[str]:
        client = self.control
        if client is not None and client.alive:
            try:
                return await client.command(" ".join(quote(a) for a in args))
            except TmuxCommandError as exc:
                raise self._error(str(exc), args) from None
            except ConnectionError:
                pass
        return (await self.run(*args)).splitlines()

    # ------------------------------------------------------------------ reads

    async def list_sessions(self, timeout: float = 15.0) -> list[str]:
        """The sessions' ids; none when no server runs. A server that accepts the connection
        but does not answer (stopped, wedged) raises ``Unanswered``."""
        try:
            out = await self.run("list-sessions", "-F", "#{session_id}", timeout=timeout)
        except Unanswered:
            raise
        except Unavailable:
            return []
        return [line for line in out.splitlines() if line.startswith("$")]

    async def session_names(self) -> list[str]:
        try:
            out = await self.run("list-sessions", "-F", "#{session_name}")
        except Unavailable:
            return []
        return out.splitlines()

    async def list_panes(self) -> list[PaneInfo]:
        lines = await self._read_command("list-panes", "-a", "-F", PANE_FORMAT)
        return [info for info in map(PaneInfo.parse, lines) if info is not None]

    async def pane_info(self, pane_id: str) -> PaneInfo:
        check_pane_id(pane_id)
        lines = await self._read_command("display-message", "-p", "-t", pane_id, "-F", PANE_FORMAT)
        info = PaneInfo.parse(lines[0]) if lines else None
        if info is None:
            raise NotFound(f"no such pane {pane_id}", field="pane")
        return info

    async def pane_if_there(self, pane_id: str) -> PaneInfo | None:
        """The pane's info, or None when tmux says it is gone (the pane, or its server with
        it). A server that is there but did not answer, or failed otherwise, raises
        ``Unavailable``: that is not known to be the pane's end (a busy or restarting tmux
        must not read as an agent's death)."""
        try:
            return await self.pane_info(pane_id)
        except NotFound:
            return None
        except Unavailable:
            if not self.reachable():
                return None
            raise

    async def capture(self, pane_id: str, *, history: int = 0) -> str:
        """The pane's screen, and ``history`` lines scrolled off above it."""
        check_pane_id(pane_id)
        start = ("-S", str(-history)) if history > 0 else ()
        return "\n".join(await self._read_command("capture-pane", "-p", *start, "-t", pane_id))

    async def server_pid(self) -> int | None:
        """The tmux server's pid, or None when no server runs on the socket."""
        try:
            out = await self.run("display-message", "-p", "#{pid}")
        except Unavailable:
            return None
        text = out.strip()
        return int(text) if text.isdigit() else None

    async def pane_option(self, pane_id: str, name: str) -> str | None:
        """A pane option's value set on the pane itself (None: inherited, not set there)."""
        check_pane_id(pane_id)
        if not _OPTION.match(name):
            raise BadRequest(f"not a tmux option name: {name!r}", field="option")
        lines = await self._read_command("show-options", "-p", "-q", "-v", "-t", pane_id, name)
        return lines[0].strip() if lines and lines[0].strip() else None

    # ------------------------------------------------------------------ writes

    async def send_literal(self, pane_id: str, text: str) -> None:
        """Type ``text`` into the pane as one paste (bracketed when the application asked for
        bracketed paste). The text travels on stdin, never in argv."""
        check_pane_id(pane_id)
        if not isinstance(text, str) or "\0" in text:
            raise BadRequest("text must be a string without NUL", field="text")
        name = f"openbus-{os.getpid()}-{next(_buffer_names)}"
        await self.run("load-buffer", "-b", name, "-", stdin=text.encode("utf-8"))
        try:
            await self.run("paste-buffer", "-p", "-d", "-b", name, "-t", pane_id)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.run("delete-buffer", "-b", name)
            raise

    async def send_key(self, pane_id: str, key: str) -> None:
        check_pane_id(pane_id)
        if not isinstance(key, str) or not _KEY.match(key):
            raise BadRequest(f"not a key tmux knows by name: {key!r}", field="key")
        await self._read_command("send-keys", "-t", pane_id, key)

    async def new_window(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        name: str | None = None,
        *,
        session: str | None = None,
        remain_on_exit: bool = False,
    ) -> tuple[str, int]:
        """Start ``argv`` (exec'd directly, no shell) in a new detached window; return its pane
        id and pid. Starts the server (a session named ``openbus``) if none is running; a
        ``session`` that does not exist yet is created with ``argv`` as its first window.

        ``remain_on_exit`` sets the option on the new pane in the same command line, which
        tmux runs before it reaps any child: a process that exits at once leaves its pane, its
        status and its last screen (set a moment later, such a pane could already be gone,
        and with it a server it was the only pane of). The window is then the session's last
        (``-a`` after ``{end}``), so the same line can name it."""
        words = _check_argv(argv)
        environment = _check_env(env)
        if session is not None and session not in await self.session_names():
            # the session itself is new: its first window runs ``argv``
            line = ["new-session", "-d", "-P", "-F", quote("#{pane_id} #{pane_pid}")]
            line += ["-s", quote_format(session)]
            window = quote_format(session + ":")
        else:
            await self.ensure_session()
            line = ["new-window", "-d", "-P", "-F", quote("#{pane_id} #{pane_pid}")]
            window = quote_format((session or "") + ":{end}")  # (no session: the client's)
            if remain_on_exit:
                line += ["-a", "-t", window]
            elif session is not None:
                line += ["-t", quote_format(session + ":")]
        if name:
            line += ["-n", quote_format(name)]
        if cwd is not None:
            line += ["-c", quote_format(str(cwd))]
        for key, value in environment.items():
            line += ["-e", quote(f"{key}={value}")]
        line += ["--", *(quote(w) for w in words)]
        commands = 1
        if remain_on_exit:
            line += [";", "set-option", "-p", "-t", window, "remain-on-exit", "on"]
            commands = 2
        out = await self._via_control(" ".join(line), commands=commands)
        pane_id, _, pid = (out[0] if out else "").partition(" ")
        if not is_pane_id(pane_id) or not pid.isdigit():
            raise Unavailable(f"tmux did not report the new pane ({out!r})")
        return pane_id, int(pid)

    async def ensure_session(self) -> None:
        """Start the server (a session named ``openbus``) unless one runs; concurrent callers
        on a stopped server start it once."""
        async with self._starting:
            if not await self.list_sessions():
                await self.run("new-session", "-d", "-s", "openbus")

    async def respawn_pane(
        self,
        pane_id: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        *,
        kill: bool = True,
    ) -> int:
        """Restart the pane with ``argv`` (``-k``: even if its process still runs); return the
        new pid. Environment goes over the control channel, as for ``new_window``."""
        check_pane_id(pane_id)
        words = _check_argv(argv)
        environment = _check_env(env)
        line = ["respawn-pane"] + (["-k"] if kill else []) + ["-t", pane_id]
        if cwd is not None:
            line += ["-c", quote_format(str(cwd))]
        for key, value in environment.items():
            line += ["-e", quote(f"{key}={value}")]
        line += ["--", *(quote(w) for w in words)]
        await self._via_control(" ".join(line))
        return (await self.pane_info(pane_id)).pid

    async def set_option(self, pane_id: str, name: str, value: str) -> None:
        """A pane option, e.g. ``set_option("%3", "remain-on-exit", "on")``."""
        check_pane_id(pane_id)
        if not _OPTION.match(name):
            raise BadRequest(f"not a tmux option name: {name!r}", field="option")
        await self._read_command("set-option", "-p", "-t", pane_id, name, value)

    async def unset_option(self, pane_id: str, name: str) -> None:
        """Drop a pane option set on the pane, so it inherits its window's again."""
        check_pane_id(pane_id)
        if not _OPTION.match(name):
            raise BadRequest(f"not a tmux option name: {name!r}", field="option")
        await self._read_command("set-option", "-p", "-u", "-t", pane_id, name)

    async def kill_pane(self, pane_id: str) -> None:
        check_pane_id(pane_id)
        await self._read_command("kill-pane", "-t", pane_id)

    async def run_as_server(self, argv: Sequence[str]) -> None:
        """Start ``argv`` as the tmux server's user (``run-shell -b``: not waited for, its
        output dropped). On a hosted box that user is the agents' and may do what the daemon's
        may not: run a command as a pool user (sudo). The words are quoted for tmux's shell;
        a ``#`` (a tmux format) is refused, not expanded."""
        words = _check_argv(argv)
        for i, word in enumerate(words):
            if "#" in word:
                raise BadRequest("argv items may not hold '#'", field=f"argv[{i}]")
        line = " ".join(shlex.quote(w) for w in words)
        await self._read_command("run-shell", "-b", f"{line} >/dev/null 2>&1")
