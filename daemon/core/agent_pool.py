"""The agent-user pool: which uid a new agent runs as on a hosted box, so no two agents share one.

Theory of operation
-------------------
Pure rule, no I/O. On a hosted box in ``pool`` mode every launched agent runs under its own
system user, drawn from a pool created at install (``openbus-agent-1..N`` in group
``openbus-agents``). A user is *free* when nothing of its uid runs (the caller passes the uids
of every running process, read from ``/proc``) and it is not *held*: a launch holds the user
it was given from the moment it is chosen until a process of that uid is seen running (from
then on ``/proc`` keeps it busy), or its pane's first process (the one that switches to the
user) is seen gone without it, or, if neither is ever seen, for ``HOLD_SECONDS``. A launch
that fails before its window opened gives its user back at once. So a uid goes back to the pool
only when nothing of it runs, and two launches in flight never get the same one.

Users are handed out lowest uid first; with every user busy the launch is refused (``Conflict``
naming the field ``agent_user``), never given a shared uid; the refusal names the users busy
with no live agent (the caller says which run one) and no launch under way: only what an ended
agent left running holds them. A session that ran under a pool user
is resumed (restart-to-connect, resume, restore) under that same user, whose home holds the
harness's transcript and config: ``acquire(..., want=NAME)`` gives that user only, and refuses
while it is busy rather than hand the session another uid.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass

from openbus.kernel.errors import Conflict

HOLD_SECONDS = 60.0


@dataclass(frozen=True, order=True)
class PoolUser:
    uid: int
    name: str


class AgentPool:
    def __init__(self, users: Iterable[PoolUser], *, group: str) -> None:
        self.users: tuple[PoolUser, ...] = tuple(sorted(set(users)))
        if not self.users:
            raise ValueError(f"the agent pool (group {group}) has no users")
        self.group = group
        self._held: dict[int, _Hold] = {}  # uid -> the launch it was given to

    def acquire(
        self,
        running: Set[int],
        pids: Set[int],
        now: float,
        *,
        want: str | None = None,
        live: Set[str] = frozenset(),
    ) -> PoolUser:
        """The free user with the lowest uid (or the user named ``want``), now held;
        ``Conflict`` when none is free. ``running``: the uids of every process; ``pids``: every
        process id; ``live``: the names of the users a live agent runs as (only to say, when
        none is free, which users run nothing but what an ended agent left running)."""
        launching = set(self._held)
        self._settle(running, pids, now)
        if want is not None:
            return self._acquire_named(want, running, now)
        for user in self.users:
            if user.uid not in running and user.uid not in self._held:
                self._held[user.uid] = _Hold(now)
                return user
        left = [
            u.name
            for u in self.users
            if u.uid in running and u.uid not in launching and u.name not in live
        ]
        raise Conflict(
            f"every agent user of the pool (group {self.group}, {len(self.users)} users) is "
            f"busy{_left_running(left)}; stop an agent or add users to the pool",
            field="agent_user",
        )

    def _acquire_named(self, name: str, running: Set[int], now: float) -> PoolUser:
        user = next((u for u in self.users if u.name == name), None)
        if user is None:
            raise Conflict(
                f"the session ran as agent user {name}, which is no longer in the pool (group "
                f"{self.group}): its transcript is in that user's home",
                field="agent_user",
            )
        if user.uid in running or user.uid in self._held:
            raise Conflict(
                f"the session ran as agent user {name}, which still runs something (its last "
                "agent's processes, or another agent): it resumes only under that user",
                field="agent_user",
            )
        self._held[user.uid] = _Hold(now)
        return user

    def started(self, user: PoolUser, pid: int) -> None:
        """The launch given ``user`` opened its pane, whose first process is ``pid``."""
        hold = self._held.get(user.uid)
        if hold is not None:
            hold.pid = pid

    def release(self, user: PoolUser) -> None:
        """The launch given ``user`` failed before anything of it ran."""
        self._held.pop(user.uid, None)

    def in_use(self, running: Set[int], pids: Set[int], now: float) -> Sequence[PoolUser]:
        self._settle(running, pids, now)
        return [u for u in self.users if u.uid in running or u.uid in self._held]

    def _settle(self, running: Set[int], pids: Set[int], now: float) -> None:
        for uid, hold in list(self._held.items()):
            gone = hold.pid is not None and hold.pid not in pids
            if uid in running or gone or now - hold.since > HOLD_SECONDS:
                del self._held[uid]


def _left_running(names: Sequence[str]) -> str:
    """What a refusal says of the users busy with no live agent: their ended agent left
    something running, which only ending it frees."""
    if not names:
        return ""
    runs, them = ("runs", "it") if len(names) == 1 else ("run", "them")
    return (
        f" ({', '.join(names)} {runs} no agent, only processes an ended agent left running: "
        f"end those to free {them})"
    )


@dataclass
class _Hold:
    since: float
    pid: int | None = None


__all__ = ["HOLD_SECONDS", "AgentPool", "PoolUser"]
