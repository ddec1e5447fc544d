"""Session tools: who may start a child session, the family it joins, and each start's life.

Theory of operation
-------------------
Plain rules over values, no I/O; the feature (``daemon.sessions``) resolves paths, reads
launchers and trust records and calls these.

**Family.** ``Family`` is the spawned-by relation (child principal -> parent principal). A
caller's family is the sessions it started, the session that started it and that session's
other children; ``reaches`` is what ``read_session`` and ``send_to_session`` ask. Nothing
outside the family is reachable, and a caller is never its own family.

**Admission** (``admit``), in this order, so a flood is refused before anything is looked up:

1. the per-agent limits (``SpawnLedger``): live children and starts in the last hour;
2. the preset: the child's is at most the caller's and the org cap (``child_preset``);
3. full access (``full_access``): a launcher whose argv or environment runs the harness with
   approvals and sandbox off is refused unless the caller's own launcher runs that way;
4. the folder (``folder_verdict``): the nearest trust mark on the way up from the child's
   folder decides: the caller's own folder and ``[sessions] trusted_dirs`` (and the harness's
   own trust records) are trusted marks, a folder a harness marks untrusted is an untrusted
   one; no mark at all is refused. Every folder refusal says to ask the user.

**A start** is a small state machine (``Start.move`` along ``MOVES``; any other move is an
``InvalidTransition``, a bug in the caller)::

    CONSENT --approved--> APPROVED --launching--> LAUNCHING --bound--> BOUND
    CONSENT --declined|expired|cancelled--> (final)
    APPROVED --cancelled--> CANCELLED            the parent's grant went first
    LAUNCHING --failed--> FAILED
    (admitted with the "may start sessions" approval: it begins at APPROVED)

BOUND, FAILED, DECLINED, EXPIRED and CANCELLED are final.

**The brief waits for a ready child** (``brief_ready``). A harness draws its idle composer
before it takes input (Claude Code under load drops an Enter pressed in its first moments),
and messaging types a message once only, so the brief is not queued at the first idle
screen: the child must read idle with an empty composer and, when it keeps a live status
(Claude Code's status file), that status must say idle; without one, it must have listed its
openbus tools or its screen must have been still for ``BRIEF_SETTLE_SECONDS``. A child that
never settles gets its brief after ``BRIEF_READY_SECONDS`` anyway, under messaging's own
idle-only rule.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from openbus.kernel.errors import Forbidden, InvalidTransition, RateLimited
from openbus.kernel.scopes import Preset

HOUR = 3600.0
ASK_THE_USER = "ask the user to start it, or to trust that folder"

# ---------------------------------------------------------------------------- family


@dataclass(frozen=True)
class Family:
    """The spawned-by relation: child principal -> the principal that started it."""

    spawned_by: Mapping[str, str] = field(default_factory=dict)

    def parent(self, principal: str) -> str | None:
        return self.spawned_by.get(principal)

    def children(self, principal: str) -> list[str]:
        return sorted(c for c, p in self.spawned_by.items() if p == principal)

    def siblings(self, principal: str) -> list[str]:
        parent = self.parent(principal)
        if parent is None:
            return []
        return [c for c in self.children(parent) if c != principal]

    def members(self, principal: str) -> list[str]:
        """Everyone ``principal`` may read and message: children, parent, siblings."""
        out = self.children(principal)
        parent = self.parent(principal)
        if parent is not None:
            out.append(parent)
            out += self.siblings(principal)
        return [m for m in dict.fromkeys(out) if m != principal]

    def reaches(self, principal: str, other: str) -> bool:
        return other != principal and other in self.members(principal)

    def relation(self, principal: str, other: str) -> str | None:
        if self.spawned_by.get(other) == principal:
            return "child"
        if self.parent(principal) == other:
            return "parent"
        if other != principal and other in self.siblings(principal):
            return "sibling"
        return None


# ---------------------------------------------------------------------------- limits


@dataclass(frozen=True)
class SpawnLimits:
    max_children: int = 4  # live children per agent
    starts_per_hour: int = 20


class SpawnLedger:
    """Per-agent counts the limits judge: live children and the times of recent starts."""

    def __init__(self, limits: SpawnLimits = SpawnLimits()) -> None:
        self.limits = limits
        self._live: dict[str, set[str]] = {}
        self._starts: dict[str, deque[float]] = {}
        self._pending: dict[str, int] = {}

    def check(self, parent: str, now: float) -> None:
        """Raise ``RateLimited`` saying which limit a new start of ``parent`` would pass."""
        live = len(self._live.get(parent, ())) + self._pending.get(parent, 0)
        if live >= self.limits.max_children:
            raise RateLimited(
                f"this agent already has {live} running or pending child sessions "
                f"(at most {self.limits.max_children}); wait for one to end",
                field="children",
            )
        recent = self._recent(parent, now)
        if len(recent) >= self.limits.starts_per_hour:
            wait = recent[0] + HOUR - now
            raise RateLimited(
                f"this agent started {len(recent)} sessions in the last hour (at most "
                f"{self.limits.starts_per_hour}); the next start is allowed in {wait:.0f} s",
                field="rate",
            )

    def _recent(self, parent: str, now: float) -> deque[float]:
        times = self._starts.setdefault(parent, deque())
        while times and times[0] <= now - HOUR:
            times.popleft()
        return times

    def admitted(self, parent: str, now: float) -> None:
        """A start of ``parent`` was admitted (it counts towards both limits from now)."""
        self._recent(parent, now).append(now)
        self._pending[parent] = self._pending.get(parent, 0) + 1

    def settled(self, parent: str, child: str | None) -> None:
        """An admitted start ended: as a live ``child``, or (None) with no child."""
        left = self._pending.get(parent, 0) - 1
        if left > 0:
            self._pending[parent] = left
        else:
            self._pending.pop(parent, None)
        if child is not None:
            self._live.setdefault(parent, set()).add(child)

    def child_ended(self, child: str) -> None:
        for parent, live in list(self._live.items()):
            live.discard(child)
            if not live:
                del self._live[parent]

    def live_children(self, parent: str) -> int:
        return len(self._live.get(parent, ()))


# ---------------------------------------------------------------------------- preset


def child_preset(caller: Preset, cap: Preset, requested: Preset | None = None) -> Preset:
    """The child's Connect preset: never above the caller's, never above the org cap."""
    want = caller if requested is None else requested
    if want.rank > caller.rank:
        raise Forbidden(
            f"a child session never gets more than its parent: {want.value} is above "
            f"this agent's {caller.value}",
            field="preset",
        )
    return want.at_most(cap)


# ---------------------------------------------------------------------------- full access

_ANY_HARNESS_FLAGS = ("--yolo", "--dangerously-skip-permissions")
_FLAGS: dict[str, tuple[str, ...]] = {
    "claude": ("--dangerously-skip-permissions", "--allow-dangerously-skip-permissions"),
    "codex": ("--dangerously-bypass-approvals-and-sandbox", "--yolo"),
    "gemini": ("--yolo", "-y"),
    "opencode": ("--dangerously-skip-permissions",),
    "omp": ("--yolo", "--dangerously-skip-permissions"),
}
_FULL_VALUES = ("bypasspermissions", "danger-full-access", "yolo")
# options whose value names the mode: --permission-mode, -s/--sandbox, --approval-mode, -c k=v
_MODE_OPTIONS = ("--permission-mode", "--sandbox", "-s", "--approval-mode", "-c", "--config")
_FULL_ENV = {
    "OPENCODE_PERMISSION": ('"allow"',),  # a permission config that allows everything
    "GEMINI_APPROVAL_MODE": ("yolo",),
    "CLAUDE_CODE_PERMISSION_MODE": ("bypasspermissions",),
}


def _full_value(value: str) -> bool:
    v = value.strip().strip("'\"").lower()
    if "=" in v:  # -c sandbox_mode="danger-full-access", approval_policy=...
        v = v.split("=", 1)[1].strip().strip("'\"")
    return v in _FULL_VALUES


def full_access(harness: str, argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The argument or variable that runs the harness with approvals and sandbox off, if any.

    Spellings: Claude Code ``--dangerously-skip-permissions`` and ``--permission-mode
    bypassPermissions``; Codex ``--dangerously-bypass-approvals-and-sandbox``, ``--yolo``,
    ``--sandbox danger-full-access`` and ``-c sandbox_mode="danger-full-access"``; Gemini CLI
    ``--yolo``/``-y`` and ``--approval-mode yolo``; OpenCode an ``OPENCODE_PERMISSION`` that
    allows everything; any harness's ``--dangerously-*`` flag.
    """
    flags = set(_ANY_HARNESS_FLAGS) | set(_FLAGS.get(harness, ()))
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "--":  # what follows is the positional prompt, not options
            break
        name, _, inline = arg.partition("=")
        if arg in flags or arg.startswith("--dangerously-"):
            return arg
        if name in _MODE_OPTIONS:
            value = inline if inline else (args[i + 1] if i + 1 < len(args) else "")
            if _full_value(value):
                return f"{name} {value}".strip()
    for name, markers in _FULL_ENV.items():
        value = env.get(name, "").lower()
        if value and any(m in value for m in markers):
            return f"{name}={env[name]}"
    return None


# ---------------------------------------------------------------------------- folder


class Trust(enum.Enum):
    TRUSTED = "trusted"
    UNTRUSTED = "untrusted"


@dataclass(frozen=True)
class TrustMark:
    folder: PurePosixPath
    trust: Trust
    source: str  # "your folder", "[sessions] trusted_dirs", "Codex trust_level", ...


def folder_verdict(
    cwd: PurePosixPath, caller_cwd: PurePosixPath | None, marks: Iterable[TrustMark]
) -> TrustMark:
    """The mark that lets a child start in ``cwd`` (resolved, absolute), else ``Forbidden``.

    The nearest mark on ``cwd`` or an ancestor decides; the caller's own folder is a trusted
    mark; an untrusted mark at or below the deciding one refuses."""
    if not cwd.is_absolute():
        raise Forbidden(f"the folder must be an absolute path, got {cwd}", field="cwd")
    by_folder: dict[PurePosixPath, TrustMark] = {}
    for mark in marks:
        known = by_folder.get(mark.folder)
        if known is None or mark.trust is Trust.UNTRUSTED:  # untrusted wins on one folder
            by_folder[mark.folder] = mark
    if caller_cwd is not None and caller_cwd not in by_folder:
        by_folder[caller_cwd] = TrustMark(caller_cwd, Trust.TRUSTED, "inside your folder")
    for folder in (cwd, *cwd.parents):
        found = by_folder.get(folder)
        if found is None:
            continue
        if found.trust is Trust.UNTRUSTED:
            raise Forbidden(
                f"{folder} is marked untrusted ({found.source}); {ASK_THE_USER}", field="cwd"
            )
        return found
    raise Forbidden(
        f"{cwd} is neither inside your folder nor under a folder the user trusts; {ASK_THE_USER}",
        field="cwd",
    )


# ---------------------------------------------------------------------------- admission


@dataclass(frozen=True)
class StartRequest:
    parent: str  # the caller's principal
    caller_preset: Preset
    cap: Preset
    caller_full_access: str | None  # what makes the caller's own launcher full access
    harness: str
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: PurePosixPath
    caller_cwd: PurePosixPath | None
    marks: Sequence[TrustMark] = ()


@dataclass(frozen=True)
class Admission:
    preset: Preset
    folder: TrustMark
    full_access: str | None


def admit(request: StartRequest, ledger: SpawnLedger, now: float) -> Admission:
    """Judge a start (stores nothing; ``ledger.admitted`` once the caller commits it)."""
    ledger.check(request.parent, now)
    preset = child_preset(request.caller_preset, request.cap)
    if preset is Preset.OFF:
        raise Forbidden("the org policy caps this user at off: a child could not connect")
    flag = full_access(request.harness, request.argv, request.env)
    if flag is not None and request.caller_full_access is None:
        raise Forbidden(
            f"this launcher runs {request.harness} with approvals and sandbox off ({flag}); "
            "a child session never gets more than its parent, which does not run that way",
            field="launcher",
        )
    folder = folder_verdict(request.cwd, request.caller_cwd, request.marks)
    return Admission(preset=preset, folder=folder, full_access=flag)


# ---------------------------------------------------------------------------- a start


class StartState(enum.StrEnum):
    CONSENT = "waiting_for_consent"
    APPROVED = "approved"
    LAUNCHING = "launching"
    BOUND = "started"
    FAILED = "failed"
    DECLINED = "declined"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self in FINAL


FINAL = frozenset(
    {
        StartState.BOUND,
        StartState.FAILED,
        StartState.DECLINED,
        StartState.EXPIRED,
        StartState.CANCELLED,
    }
)

MOVES: Mapping[StartState, frozenset[StartState]] = {
    StartState.CONSENT: frozenset(
        {StartState.APPROVED, StartState.DECLINED, StartState.EXPIRED, StartState.CANCELLED}
    ),
    StartState.APPROVED: frozenset({StartState.LAUNCHING, StartState.CANCELLED}),
    StartState.LAUNCHING: frozenset({StartState.BOUND, StartState.FAILED}),
}


@dataclass
class Start:
    id: str
    parent: str
    state: StartState
    reason: str | None = None
    card: str | None = None
    child: str | None = None  # the child's principal, once minted
    result: dict[str, object] = field(default_factory=dict)

    def move(self, to: StartState, reason: str | None = None) -> None:
        if to not in MOVES.get(self.state, frozenset()):
            raise InvalidTransition(f"start {self.id}: {self.state.value} -> {to.value}")
        self.state = to
        if reason is not None:
            self.reason = reason


BRIEF_SETTLE_SECONDS = 0.5
BRIEF_READY_SECONDS = 30.0


def brief_ready(
    state: str,
    composer_empty: bool | None,
    status: str | None,
    still_seconds: float,
    tools_listed: bool = False,
) -> bool:
    """Whether a new child is ready for its brief: idle with an empty composer, and either its
    live status (``None`` when the harness keeps none) idle or, without one, its openbus tools
    listed (its harness finished starting) or its screen still for the settle time."""
    if state != "idle" or composer_empty is not True:
        return False
    if status is not None:
        return status == "idle"  # the harness itself says it is waiting for input
    return tools_listed or still_seconds >= BRIEF_SETTLE_SECONDS


def brief_line(text: str) -> str:
    """The first line of a brief, for the consent card's summary."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first[:120] + ("…" if len(first) > 120 else "")


def cut(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` UTF-8 bytes (at a character), and whether it was."""
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text, False
    return raw[:limit].decode("utf-8", "ignore"), True


def worktree_name(title: str | None, fallback: str) -> str:
    """A branch-safe name from the title: lowercase words joined by '-', at most 48 chars."""
    words = []
    for word in (title or "").lower().replace("_", " ").split():
        clean = "".join(ch for ch in word if ch.isascii() and (ch.isalnum() or ch == "-"))
        if clean.strip("-"):
            words.append(clean.strip("-"))
    name = "-".join(words)[:48].strip("-")
    return name or fallback
