"""Scopes and presets.

Theory of operation
-------------------
A scope is one capability an agent may hold: ``read`` (directory, pane detail), ``history``
(find and get sessions), ``message`` (send to reachable peers), ``reachable`` (may receive),
``spawn`` (start and drive its own child sessions), ``act`` (keys, windows, resume, hand-off:
control only, never grantable to an ordinary agent).

The human grants a *preset*: ``off`` (pure, the default), ``observe`` (read + history) or
``collaborate`` (observe + message + reachable + spawn). Presets are totally ordered, which is
what lets the org policy cap them: the effective scopes are always the granted preset's
scopes intersected with the cap's.
"""

from __future__ import annotations

import enum

from openbus.kernel.errors import BadRequest


class Scope(enum.StrEnum):
    READ = "read"
    HISTORY = "history"
    MESSAGE = "message"
    REACHABLE = "reachable"
    SPAWN = "spawn"
    ACT = "act"


class Preset(enum.StrEnum):
    OFF = "off"
    OBSERVE = "observe"
    COLLABORATE = "collaborate"

    @property
    def rank(self) -> int:
        return _RANK[self]

    @property
    def scopes(self) -> frozenset[Scope]:
        return PRESET_SCOPES[self]

    def at_most(self, cap: Preset) -> Preset:
        return self if self.rank <= cap.rank else cap


_RANK = {Preset.OFF: 0, Preset.OBSERVE: 1, Preset.COLLABORATE: 2}

PRESET_SCOPES: dict[Preset, frozenset[Scope]] = {
    Preset.OFF: frozenset(),
    Preset.OBSERVE: frozenset({Scope.READ, Scope.HISTORY}),
    Preset.COLLABORATE: frozenset(
        {Scope.READ, Scope.HISTORY, Scope.MESSAGE, Scope.REACHABLE, Scope.SPAWN}
    ),
}

GRANTABLE: frozenset[Scope] = PRESET_SCOPES[Preset.COLLABORATE]


def parse_preset(value: object, field: str = "preset") -> Preset:
    if not isinstance(value, str):
        raise BadRequest("must be one of off, observe, collaborate", field=field)
    try:
        return Preset(value.strip().lower())
    except ValueError:
        raise BadRequest(
            f"must be one of off, observe, collaborate; got {value!r}", field=field
        ) from None


def effective_scopes(granted: Preset, cap: Preset) -> frozenset[Scope]:
    """What an agent may do right now: its grant, never above the policy's cap."""
    return granted.at_most(cap).scopes
