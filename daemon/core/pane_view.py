"""Which panes of the fleet a caller sees: the human's panes, and for an agent its human's.

"The human's panes" (the read scope covers the panes the human sees):

* local mode: the daemon runs as the one human, every pane of its tmux server is theirs;
* hosted mode: the agents of every human share one tmux server, so a pane is a human's when
  it runs an agent that human launched (a principal they own, still bound to the pane's
  current incarnation: a pane id reused by another process is no longer theirs). The box's
  operators (root and the ``[hosted] operators_group``, who reach the socket at the desk and
  run the box) see every pane;
* an agent sees what its owner (the human who launched it) sees, never more.

Plain rules over values; the daemon's ``pane_owners`` looks the facts up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PaneView:
    """``every`` pane, or only those whose (pane id, incarnation) is in ``owned``."""

    every: bool
    owned: frozenset[tuple[str, str]] = frozenset()

    def sees(self, pane: str, incarnation: str | None) -> bool:
        return self.every or (incarnation is not None and (pane, incarnation) in self.owned)

    def cut(self, panes: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        return [p for p in panes if self.sees(p.get("pane", ""), p.get("incarnation"))]


EVERY = PaneView(every=True)


def view_of(
    user: str | None,
    *,
    hosted: bool,
    operator: bool,
    owned: Iterable[tuple[str, str]],
) -> PaneView:
    """What ``user`` (a human, or an agent's owner) sees of the fleet."""
    if not hosted or operator:
        return EVERY
    if user is None:
        return PaneView(every=False)
    return PaneView(every=False, owned=frozenset(owned))
