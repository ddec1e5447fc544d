"""Why Connect cannot be honoured for a pane: the one place its refusals are worded.

Theory of operation
-------------------
Pure functions over what is known of a pane (``PaneFacts``: whether the directory shows it,
the harness it reads there, and how openbus launched it, if it did). ``why_not`` answers
None when Connect can be honoured (the caller holds an active grant on the pane), else the
one line that says why not, each case its own:

* a pane the directory does not show (no such pane, or not the caller's);
* a token that was revoked (turned Off, or its process exited);
* a shell: not an agent;
* an opaque ``command`` launcher: openbus cannot inject into a shell string;
* a harness Connect is not offered for (OpenCode, omp, ...), or one this host could not
  connect at launch (Gemini CLI where it would ignore its settings file);
* a launch with preset Off: it holds no token;
* an agent started outside openbus (typed into a shell): a restart could not reproduce it.

How openbus launched a pane is its note, kept when the launch held no grant; after the daemon
restarts, a live launch record naming the pane's process gives the note again for the
harnesses a restart can connect (``RESTARTABLE``). A revoked token and a structured launch
with preset Off need a new launch token (``needs_new_token``): ``Connect`` hands those to
restart-to-connect, which raises its card or says why it cannot restart that agent. The rest
``Connect`` raises as its refusals (``refusal``), and ``/api/connections`` lists every reason
per pane (``unavailable``), so the page shows it where it would otherwise offer a toggle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from openbus.daemon.core.actors import Actor
from openbus.daemon.directory import Directory, Entry
from openbus.daemon.grants import Grants
from openbus.daemon.launch_plan import CONNECTABLE, OPAQUE_REASON, UNAVAILABLE
from openbus.daemon.pane_owners import PaneOwners
from openbus.kernel.errors import Conflict, NotFound, OpenbusError

RELAUNCH = "launch it again with `openbus launch LAUNCHER --preset observe` (or collaborate)"
# The harnesses a restart can connect when they run without a token (quit, then resumed with
# the endpoint); Gemini CLI is connected only at launch.
RESTARTABLE = ("claude", "codex")


@dataclass(frozen=True)
class LaunchNote:
    """How openbus launched a pane it holds no grant for."""

    launcher: str
    harness: str
    structured: bool
    preset: str  # what was asked for: "off", or a preset Connect could not honour
    incarnation: str
    reason: str | None = None  # why Connect could not be honoured at launch, if it was asked


@dataclass(frozen=True)
class PaneFacts:
    pane: str
    shown: bool  # the directory shows it to the caller
    harness: str | None = None  # as the directory reads it
    incarnation: str | None = None
    launch: LaunchNote | None = None  # this incarnation's launch, when openbus made it
    connected: bool = False  # the caller holds an active grant on it
    revoked: bool = False  # the caller's grant on it was revoked


def why_not(facts: PaneFacts) -> str | None:
    """None when Connect can be honoured for the pane, else the reason in one line."""
    pane = facts.pane
    if facts.connected:
        return None
    if facts.revoked:
        return (
            f"the token {pane} was launched with has been revoked (Connect was turned off, or "
            "its process exited); a new grant needs a new launch token: restart it to connect "
            f"it where openbus can, or {RELAUNCH}"
        )
    if not facts.shown:
        return f"no pane {pane} in the fleet"
    note = facts.launch if facts.launch and facts.launch.incarnation == facts.incarnation else None
    if note is not None and not note.structured:
        return f"{pane} runs the launcher {note.launcher!r}: {OPAQUE_REASON}"
    if note is not None and note.harness in UNAVAILABLE:
        return UNAVAILABLE[note.harness]
    if note is not None and note.reason is not None:  # this host's refusal (Gemini CLI's)
        return note.reason
    if note is not None:  # how openbus launched it outranks what the screen looks like
        return (
            f"{pane} was launched with preset Off, so it holds no openbus token; connecting it "
            f"needs restart-to-connect, or {RELAUNCH}"
        )
    if facts.harness == "shell":
        return UNAVAILABLE["shell"]
    if facts.harness in UNAVAILABLE and facts.harness != "unknown":
        return UNAVAILABLE[facts.harness]
    if facts.harness not in CONNECTABLE:
        return f"{pane} runs no coding agent openbus recognises: Connect is offered to agents only"
    if facts.harness not in RESTARTABLE:
        return (
            f"{pane} was not launched with an openbus token, and a running {facts.harness} "
            f"is connected only at launch: {RELAUNCH}"
        )
    return (
        f"{pane} runs {facts.harness} started outside openbus (typed into a shell, or some "
        "other way): it holds no openbus token, and a restart could not reproduce its launch; "
        f"{RELAUNCH}"
    )


def needs_new_token(facts: PaneFacts) -> bool:
    """Whether the pane is an agent Connect could honour given a new launch token (so
    restart-to-connect may answer): revoked, launched Off, or started outside openbus."""
    if facts.connected:
        return False
    if facts.revoked:
        return True
    if not facts.shown:
        return False
    note = facts.launch if facts.launch and facts.launch.incarnation == facts.incarnation else None
    return (
        note is not None
        and note.structured
        and note.harness not in UNAVAILABLE
        and note.reason is None
    )


def refusal(facts: PaneFacts) -> OpenbusError | None:
    """The error ``connect.set`` raises for a pane Connect cannot be honoured for."""
    reason = why_not(facts)
    if reason is None:
        return None
    if not facts.shown and not facts.revoked:
        return NotFound(reason, field="pane")
    return Conflict(reason, field="pane")


@dataclass(frozen=True)
class RecordedLaunch:
    """A live launch as the launch records keep it (they outlive the daemon's process)."""

    pid: int
    launcher: str
    harness: str
    structured: bool


class ConnectFacts:
    """``PaneFacts`` from the directory, the grants and the launches openbus made without a
    grant (``note``); registered on ``Connect`` by the launch feature."""

    def __init__(
        self,
        grants: Grants,
        directory: Directory,
        owners: PaneOwners,
        recorded: Callable[[], Mapping[str, RecordedLaunch]],
    ) -> None:
        self.grants = grants
        self.directory = directory
        self.owners = owners
        self.recorded = recorded  # pane id -> its live launch, from the launch records
        self.notes: dict[str, LaunchNote] = {}  # pane id -> its launch that holds no grant

    def note(self, pane: str, note: LaunchNote) -> None:
        self.notes[pane] = note

    def _note(self, entry: Entry, recorded: Mapping[str, RecordedLaunch]) -> LaunchNote | None:
        """The pane's launch note; else, for a launch made before this daemon started, one
        from its live record when that names the pane's process and a restart could connect
        it (a launch that held a grant shows as revoked or connected instead)."""
        note = self.notes.get(entry.pane_id)
        if note is not None:
            return note
        found = recorded.get(entry.pane_id)
        if found is None or found.pid != entry.info.pid or found.harness not in RESTARTABLE:
            return None
        return LaunchNote(found.launcher, found.harness, found.structured, "off", entry.incarnation)

    def facts(self, pane: str, actor: Actor) -> PaneFacts:
        user = actor.user
        connected = any(p.owner == user for p in self.grants.by_pane(pane))
        revoked = not connected and user is not None and self.grants.revoked_on_pane(pane, user)
        try:
            entry = self.directory.entry(pane)
        except OpenbusError:
            return PaneFacts(pane, shown=False, connected=connected, revoked=revoked)
        return PaneFacts(
            pane,
            shown=self.owners.view(actor).sees(pane, entry.incarnation),
            harness=entry.harness,
            incarnation=entry.incarnation,
            launch=self._note(entry, self.recorded()),
            connected=connected,
            revoked=revoked,
        )

    def unavailable(self, actor: Actor) -> dict[str, str]:
        """Why Connect cannot be honoured, for every pane the caller sees that it cannot."""
        user = actor.user
        connected = {p.pane_id for p in self.grants.active() if p.owner == user}
        view = self.owners.view(actor)
        found: dict[str, str] = {}
        recorded = self.recorded()
        for entry in self.directory.entries():
            pane = entry.pane_id
            if pane in connected or not view.sees(pane, entry.incarnation):
                continue
            revoked = user is not None and self.grants.revoked_on_pane(pane, user)
            facts = PaneFacts(
                pane,
                shown=True,
                harness=entry.harness,
                incarnation=entry.incarnation,
                launch=self._note(entry, recorded),
                revoked=revoked,
            )
            reason = why_not(facts)
            if reason is not None:
                found[pane] = reason
        return found
