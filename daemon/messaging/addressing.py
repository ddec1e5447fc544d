"""Addressing: turn a message's target into exactly one live recipient, or say why not.

Shared by the service (at admission) and the delivery engine (a handle re-resolved at
delivery): a pane id must come with the incarnation the directory issued for it (and, from
control, optionally the screen revision it decided on: a screen that changed since is refused
at admission, never at delivery, since a busy pane's screen moves until its idle); a workstream
handle must name exactly one live pane; a shell or exited pane is never a recipient, and a
peer may reach only an agent set to Collaborate (``reachable``; control reaches every agent).
Both ends' scopes are looked up again under the send lock just before typing
(``reachable_now``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openbus.daemon.cards import Cards
from openbus.daemon.core.consent import Approval, ApprovalKind
from openbus.daemon.core.messaging import Message, Recipient, Target
from openbus.daemon.grants import Grants, Principal
from openbus.daemon.messaging.fleet import Fleet, PaneView
from openbus.daemon.pane_owners import PaneOwners
from openbus.kernel.errors import BadRequest, Conflict, NotFound, Refused
from openbus.kernel.ids import is_pane_id
from openbus.kernel.scopes import Scope


class Addressing:
    def __init__(self, fleet: Fleet, grants: Grants, cards: Cards, owners: PaneOwners) -> None:
        self.fleet = fleet
        self.grants = grants
        self.cards = cards
        self.owners = owners

    def resolve_target(self, params: Mapping[str, Any], sender: str) -> tuple[Target, PaneView]:
        """The one live pane ``params`` address, among those ``sender`` (a principal id, or
        ``control``) sees: on a hosted box, its owner's panes; a pane it does not see is not
        found, as in the directory."""
        target = params.get("target")
        if not isinstance(target, str) or not target.strip():
            raise BadRequest(
                "target must be a pane id (with its incarnation) or a workstream handle "
                "(a PR, a title, control)",
                field="target",
            )
        target = target.strip()
        fleet = self.fleet
        if target.startswith("%"):
            if not is_pane_id(target):
                raise BadRequest(f"not a pane id: {target!r}", field="target")
            incarnation = params.get("incarnation")
            if not isinstance(incarnation, str) or not incarnation:
                raise BadRequest(
                    "a pane id needs the incarnation the directory issued for it",
                    field="incarnation",
                )
            view = fleet.view(target)
            if view is None or not self.owners.of_principal(sender).sees(
                view.pane, view.incarnation
            ):
                raise NotFound(f"no pane {target} in the directory", field="target")
            if view.incarnation != incarnation:
                raise Refused(
                    f"{target} is now another process (its incarnation changed); "
                    "read the directory again",
                    field="incarnation",
                )
            revision = params.get("revision")
            if revision is not None and revision != view.revision:
                raise Conflict(
                    f"{target}'s screen changed since revision {revision} (now "
                    f"{view.revision}); read it again",
                    field="revision",
                )
            return Target(pane=target, incarnation=incarnation), view
        if target.isdigit() or (":" in target and target.split(":")[-1].split(".")[0].isdigit()):
            raise BadRequest(
                "window indices are never addresses: use a pane id with its incarnation, "
                "or a workstream handle",
                field="target",
            )
        found = self.resolve_handle(target, sender)
        if not found:
            raise NotFound(f"no live pane answers to {target!r}", field="target")
        if len(found) > 1:
            names = ", ".join(f"{v.pane} ({v.title or v.harness})" for v in found)
            raise Refused(
                f"{target!r} is ambiguous: it matches {names}; address one by pane id and "
                "incarnation",
                field="target",
            )
        return Target(handle=target), found[0]

    def resolve_handle(self, handle: str, sender: str) -> list[PaneView]:
        seen = self.owners.of_principal(sender)
        return [
            v
            for v in self.fleet.resolve(handle)
            if v.state != "exited" and seen.sees(v.pane, v.incarnation)
        ]

    def recipient_for(self, view: PaneView, *, control_sender: bool) -> Recipient:
        """The recipient at ``view``, refused if peers may not reach it."""
        if view.harness == "shell" or view.state == "shell":
            raise Refused(
                f"{view.pane} is a shell pane: sends to shells are never offered to peers",
                field="target",
            )
        if view.state == "exited":
            raise Refused(f"{view.pane} has exited", field="target")
        principal = self._principal_at(view)
        if not control_sender:
            scopes = self.grants.scopes_for(principal.actor()) if principal else frozenset()
            if Scope.REACHABLE not in scopes:
                raise Refused(
                    f"{view.pane} is not reachable: its agent was not set to Collaborate",
                    field="target",
                )
        return Recipient(
            pane=view.pane,
            incarnation=view.incarnation,
            principal=principal.id if principal else None,
            harness=view.harness,
            actor=principal.actor().name if principal else None,
        )

    def _principal_at(self, view: PaneView) -> Principal | None:
        """The active principal of the agent now in ``view``'s pane: issued for this
        incarnation, or attached to one of its processes (never one of a recycled pane)."""
        found = self.grants.by_pane(view.pane)
        exact = [p for p in found if p.incarnation == view.incarnation]
        if exact:
            return exact[-1]
        alive = [p for p in found if p.pid is not None and p.pid in view.pids]
        return alive[-1] if alive else None

    def reachable_now(self, message: Message) -> bool:
        """Both ends' scopes, looked up again (delivery calls this under the send lock)."""
        if message.sender != "control":
            try:
                sender = self.grants.get(message.sender)
            except NotFound:
                return False
            if Scope.MESSAGE not in self.grants.scopes_for(sender.actor()):
                return False
            if message.recipient.principal is None:
                return False
            try:
                recipient = self.grants.get(message.recipient.principal)
            except NotFound:
                return False
            return Scope.REACHABLE in self.grants.scopes_for(recipient.actor())
        return True

    def pair_approved(self, sender: str, recipient: Recipient) -> bool:
        return self.cards.has(Approval(ApprovalKind.PAIR, sender, recipient.key))
