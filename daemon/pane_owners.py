"""The facts behind ``core.pane_view``: who owns which pane, and who runs the box.

An agent's owner is its principal's (the human who launched it). On a hosted box the
operators are root and the members of ``[hosted] operators_group`` (by the system's group
database, looked up on every call, so a change of membership holds at once).
"""

from __future__ import annotations

import grp
import pwd

from openbus.daemon.config import HostedConfig
from openbus.daemon.core.actors import Actor
from openbus.daemon.core.pane_view import EVERY, PaneView, view_of
from openbus.daemon.grants import Grants
from openbus.kernel.errors import NotFound


class PaneOwners:
    def __init__(self, grants: Grants, hosted: HostedConfig) -> None:
        self.grants = grants
        self.hosted = hosted

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
