"""The fleet directory as a feature: the tmux adapter, the directory, the watcher, and the two
read actions over them.

``DirectoryFeature`` builds the tmux adapter on the configured server, the directory (with its
incarnation secret, kept 0600 in the state dir so incarnations survive a daemon restart) and
the watcher that follows the server; it registers ``directory.list`` (scope ``read``). The
pane detail (``directory.pane``) is registered by ``register_pane_detail`` once the features
that add sections to a human's view of a pane (messaging) exist; the root calls it.

Both answer with the caller's panes only (``core.pane_view``: in local mode every pane; on a
hosted box a human's are the agents they launched, an agent's are its owner's, operators see
all): a pane the caller does not see is not found, the same answer as for no pane at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket as socketlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from openbus.daemon.config import Config
from openbus.daemon.core.actions import Action
from openbus.daemon.core.actors import Actor
from openbus.daemon.core.consent import Tier
from openbus.daemon.core.pane_view import PaneView
from openbus.daemon.directory import Directory
from openbus.daemon.directory_probe import ProcessProbe
from openbus.daemon.feature import Feature
from openbus.daemon.gate import Call, Gate
from openbus.daemon.history.liveness import walk_to_pane
from openbus.daemon.mcp.masking import masker
from openbus.daemon.pane_owners import PaneOwners
from openbus.daemon.tmux.adapter import Tmux
from openbus.daemon.tmux.watcher import Watcher
from openbus.kernel.clock import Clock, Random
from openbus.kernel.errors import BadRequest, Conflict, NotFound
from openbus.kernel.ids import check_pane_id
from openbus.kernel.scopes import Scope

LIST = Action("directory.list", Scope.READ, Tier.READ)
PANE = Action("directory.pane", Scope.READ, Tier.READ)
EVIDENCE_EVERY = 1.0  # seconds between re-reads of evidence that changes off screen
# ... while a pane reads busy on Claude's status file alone (the file lags its idle screen)
EVIDENCE_SOON = 0.1
SCREEN_CHARS = 16_384  # the most of a pane's screen text one read returns
MAX_VIEWS = 64  # views of one snapshot kept (a view per human, and per agent owner)
SECRET_FILE = "directory.secret"  # noqa: S105 - a file name, not a secret

log = logging.getLogger(__name__)

PaneSection = Callable[[str], Mapping[str, Any]]  # pane id -> more of a human's pane detail


def incarnation_secret(state_dir: Path, random: Random) -> bytes:
    """The per-daemon secret keying incarnation tokens (0600 in the state dir)."""
    path = state_dir / SECRET_FILE
    with contextlib.suppress(FileNotFoundError):
        data = path.read_bytes()
        if len(data) >= 32:
            return data
    data = random.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return data


def _shown(
    snapshot: dict[str, Any], view: PaneView, mark: tuple[str, str | None] | None
) -> dict[str, Any]:
    """The snapshot cut to ``view``, with the control session's pane marked (its indicator)."""
    panes = snapshot["panes"] if view.every else view.cut(snapshot["panes"])
    if mark is not None:
        panes = [
            {**p, "control": True} if (p["pane"], p["incarnation"]) == mark else p for p in panes
        ]
    return {**snapshot, "panes": panes}


class DirectoryFeature(Feature):
    name = "tmux"

    def __init__(
        self, gate: Gate, config: Config, clock: Clock, random: Random, owners: PaneOwners
    ) -> None:
        self.owners = owners
        self.tmux = Tmux(config.tmux.socket)
        self.directory = Directory(
            clock,
            incarnation_secret(config.daemon.state_dir, random),
            ProcessProbe(clock=clock),
            socket=str(self.tmux.socket),
            hostname=socketlib.gethostname(),
        )
        self.watcher = Watcher(self.tmux, self.directory)
        self._evidence: asyncio.Task[None] | None = None
        # what each view saw of the current snapshot (cut to the view, the control pane
        # marked), so a caller asking again before a change gets the very same object
        self._shown_of: dict[str, Any] | None = None
        self._shown: dict[tuple[PaneView, tuple[str, str | None] | None], dict[str, Any]] = {}
        gate.register(LIST, self._list)

    async def _list(self, call: Call) -> Any:
        snapshot = self.snapshot_for(call.actor)
        call.details["panes"] = len(snapshot["panes"])
        return snapshot

    def snapshot_for(self, actor: Actor) -> dict[str, Any]:
        """The directory as ``actor`` sees it (what ``directory.list`` answers): the view and
        the control pane are looked up on every call; what they make of the snapshot is the
        same object until the directory, the view or the control pane changes, as the
        snapshot itself is."""
        snapshot: dict[str, Any] = self.directory.snapshot()
        view = self.owners.view(actor)
        control = self.owners.grants.control()
        mark = None
        if control is not None and control.pane_id is not None:
            mark = (control.pane_id, control.incarnation)
        if view.every and mark is None:
            return snapshot
        if self._shown_of is not snapshot:
            self._shown_of, self._shown = snapshot, {}
        shown = self._shown.get((view, mark))
        if shown is None:
            if len(self._shown) >= MAX_VIEWS:
                self._shown.clear()
            shown = self._shown[view, mark] = _shown(snapshot, view, mark)
        return shown

    def pane_for_pid(self, pid: int) -> str | None:
        """The pane whose process is ``pid`` or one of its ancestors."""
        roots = {entry.info.pid: entry.pane_id for entry in self.directory.entries()}
        return walk_to_pane(pid, roots)

    async def start(self) -> None:
        await self.watcher.start()
        self._evidence = asyncio.get_running_loop().create_task(
            self._reread_evidence(), name="directory-evidence"
        )

    async def stop(self) -> None:
        if self._evidence is not None:
            self._evidence.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._evidence
            self._evidence = None
        await self.watcher.stop()

    async def _reread_evidence(self) -> None:
        """Evidence that changes without a screen change (a status file, a process a launcher
        started, a git branch) is read again."""
        disputed = False
        while True:
            await asyncio.sleep(EVIDENCE_SOON if disputed else EVIDENCE_EVERY)
            try:
                disputed = self.directory.reread_evidence()
                self.directory.reprobe_owed()
                self.directory.recheck_branches()
            except Exception:
                disputed = False
                log.exception("re-reading the panes' evidence failed")

    def health(self) -> Mapping[str, Any]:
        return {
            "running": self.directory.server_running,
            "panes": len(self.directory.entries()),
            "watcher": self.watcher.health(),
        }


def register_pane_detail(
    gate: Gate, directory: Directory, owners: PaneOwners, sections: Sequence[PaneSection]
) -> None:
    """``directory.pane``: one pane in detail with its screen text (bounded; with ``masked``,
    secrets on it masked, as agents always see it, and the kinds masked listed); a human also
    sees each section's part. Given an incarnation, a pane that no longer runs it is refused
    (``Conflict`` naming ``incarnation``)."""

    async def one_pane(call: Call) -> Any:
        pane = check_pane_id(call.params.get("pane"), "pane")
        entry = directory.entry(pane)
        if not owners.view(call.actor).sees(pane, entry.incarnation):
            raise NotFound(f"no pane {pane} in the directory", field="pane")
        wanted = call.params.get("incarnation")
        if wanted is not None:
            if not isinstance(wanted, str):
                raise BadRequest("incarnation must be text", field="incarnation")
            if wanted != entry.incarnation:
                # the pane id now belongs to another process: never read it in place of the
                # one the caller named
                raise Conflict(
                    f"{pane} is no longer incarnation {wanted}: it now runs another process",
                    field="incarnation",
                )
        detail = {**entry.detail(directory.clock.now()), **screen_of(entry.text)}
        if call.params.get("masked") is True and detail["screen"] is not None:
            masked = masker().mask(detail["screen"])
            detail["screen"], detail["masked"] = masked.text, sorted(masked.kinds)
        if call.actor.is_human:
            for section in sections:
                detail.update(section(pane))
        return detail

    gate.register(PANE, one_pane)


def screen_of(text: str | None) -> dict[str, Any]:
    """The pane's screen text as last captured, its last ``SCREEN_CHARS`` at most (whole
    lines), and whether it was cut."""
    if text is None:
        return {"screen": None, "screen_truncated": False}
    if len(text) <= SCREEN_CHARS:
        return {"screen": text, "screen_truncated": False}
    tail = text[-SCREEN_CHARS:]
    newline = tail.find("\n")
    return {"screen": tail[newline + 1 :] if newline >= 0 else tail, "screen_truncated": True}
