"""The facts behind ``core.pane_view``: who owns which pane, and who runs the box.

An agent's owner is its principal's (the human who launched it). On a hosted box the
operators are root and the members of ``[hosted] operators_group`` (by the system's group
and user databases). An answer is kept only while ``/etc/group`` and ``/etc/passwd`` stay the
files they were (inode, size, modification time: two ``stat`` calls a request, against two
NSS look-ups that cost a tunnelled request about 30 µs in the daemon) and for at most
``OPERATOR_TTL`` seconds, so a change of membership holds at once through the files and
within a second through any other NSS source.
"""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Sequence
from pathlib import Path

from openbus.daemon.config import HostedConfig
from openbus.daemon.core.actors import Actor
from openbus.daemon.core.pane_view import EVERY, PaneView, view_of
from openbus.daemon.grants import Grants
from openbus.kernel.clock import Clock, SystemClock
from openbus.kernel.errors import NotFound

ACCOUNT_FILES = (Path("/etc/group"), Path("/etc/passwd"))
OPERATOR_TTL = 1.0

_Signature = tuple[tuple[int, int, int] | None, ...]


def _signature(files: Sequence[Path]) -> _Signature:
    found: list[tuple[int, int, int] | None] = []
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            found.append(None)
        else:
            found.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(found)


class PaneOwners:
    def __init__(
        self,
        grants: Grants,
        hosted: HostedConfig,
        clock: Clock | None = None,
        account_files: Sequence[Path] = ACCOUNT_FILES,
    ) -> None:
        self.grants = grants
        self.hosted = hosted
        self._clock = clock or SystemClock()
        self._account_files = tuple(account_files)
        self._operators: dict[str, bool] = {}
        self._operators_as_of: tuple[_Signature, float] | None = None  # (files, expiry)

    def view(self, actor: Actor) -> PaneView:
        if not self.hosted.enabled:
            return EVERY
        if actor.is_human:
            return self._of_user(actor.user)
        if actor.is_agent and actor.principal is not None:
            return self.of_principal(actor.principal)
        return EVERY  # the daemon's own sweeps and the control session

    def of_principal(self, principal: str) -> PaneView:
        """What the agent holding ``principal`` sees: its owner's panes (control: every pane)."""
        if not self.hosted.enabled or principal == "control":
            return EVERY
        try:
            user = self.grants.get(principal).owner
        except NotFound:
            user = None
        return self._of_user(user)

    def _of_user(self, user: str | None) -> PaneView:
        if user is None:
            return view_of(None, hosted=True, operator=False, owned=())
        return view_of(
            user,
            hosted=True,
            operator=self._operator(user),
            owned=self.grants.panes_owned_by(user),
        )

    def _operator(self, user: str) -> bool:
        if user == "root":
            return True
        group = self.hosted.operators_group
        if not group:
            return False
        files, now = _signature(self._account_files), self._clock.monotonic()
        as_of = self._operators_as_of
        if as_of is None or as_of[0] != files or now >= as_of[1]:
            self._operators.clear()
            self._operators_as_of = (files, now + OPERATOR_TTL)
        known = self._operators.get(user)
        if known is None:
            known = self._operators[user] = self._looked_up(user, group)
        return known

    @staticmethod
    def _looked_up(user: str, group: str) -> bool:
        try:
            entry = grp.getgrnam(group)
        except KeyError:
            return False
        if user in entry.gr_mem:
            return True
        try:
            return pwd.getpwnam(user).pw_gid == entry.gr_gid
        except KeyError:
            return False
