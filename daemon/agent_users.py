"""The agent-user pool's adapter: who is in the pool (the system's user database) and which uids
run anything (``/proc``), around the pure rule in ``daemon.core.agent_pool``.

* The pool is every user whose primary or supplementary group is ``[hosted] agent_pool_group``
  (``openbus-agents``); a pool holding root, the tmux server's user or the daemon's own user
  is refused at start, since an agent under it would not be isolated.
* A uid runs when any process that has not ended (a zombie has) has it as its real,
  effective, saved or filesystem uid (the ``Uid:`` line of ``/proc/<pid>/status``; the owner
  of ``/proc/<pid>`` is not enough, a non-dumpable process shows as root there). The scan
  fails closed: a ``/proc`` mounted with ``hidepid`` (systemd's ``ProtectProc=``) would hide
  other users' processes and make a busy uid look free, so it is refused at start, and a
  ``/proc`` that cannot be listed refuses the launch.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
from collections.abc import Sequence, Set
from pathlib import Path

from openbus.daemon.config import Config
from openbus.daemon.core.agent_pool import AgentPool, PoolUser
from openbus.kernel.clock import Clock
from openbus.kernel.errors import ConfigError, Unavailable

PROC = Path("/proc")


def running_uids(proc: Path = PROC) -> tuple[frozenset[int], frozenset[int]]:
    """Every uid any process runs with (real, effective, saved, filesystem), and every pid."""
    try:
        names = os.listdir(proc)
    except OSError as exc:
        raise Unavailable(
            f"cannot list {proc} to see which agent users run: {exc.strerror}"
        ) from exc
    uids: set[int] = set()
    pids: set[int] = set()
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(proc / name / "status", "rb") as handle:
                for line in handle:
                    if line.startswith(b"State:") and line.split()[1:2] == [b"Z"]:
                        break  # a zombie has ended: nothing of it runs
                    if line.startswith(b"Uid:"):
                        uids.update(int(v) for v in line.split()[1:5])
                        pids.add(int(name))
                        break
        except OSError:
            continue  # it ended while we looked
    return frozenset(uids), frozenset(pids)


def proc_hides_processes(mountinfo: Path = PROC / "self" / "mountinfo") -> bool:
    """True when ``/proc`` is mounted with ``hidepid`` other than 0 (``off``)."""
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return True
    for line in lines:
        before, _, after = line.partition(" - ")
        fields = before.split()
        if len(fields) >= 5 and fields[4] == str(PROC):
            options = after.split()[2].split(",") if len(after.split()) >= 3 else []
            hidepid = [o.split("=", 1)[1] for o in options if o.startswith("hidepid=")]
            return any(value not in ("0", "off") for value in hidepid)
    return True


def pool_members(group: str) -> list[PoolUser]:
    try:
        entry = grp.getgrnam(group)
    except KeyError:
        return []
    names = set(entry.gr_mem) | {u.pw_name for u in pwd.getpwall() if u.pw_gid == entry.gr_gid}
    return [PoolUser(pwd.getpwnam(name).pw_uid, name) for name in sorted(names)]


class AgentUsers:
    """The launch's port: a pool user for each new agent, held until its uid is seen running."""

    def __init__(self, pool: AgentPool, clock: Clock) -> None:
        self.pool = pool
        self.clock = clock

    @classmethod
    def from_config(cls, config: Config, clock: Clock) -> AgentUsers | None:
        """The pool for a hosted box in ``pool`` mode; None in ``shared`` mode or off a hosted
        box. A pool that cannot isolate stops the start with the key to fix."""
        hosted = config.hosted
        if not hosted.enabled or hosted.agent_isolation != "pool":
            return None
        where = {"path": str(config.path), "key": "hosted.agent_pool_group"}
        members = pool_members(hosted.agent_pool_group)
        if not members:
            raise ConfigError(
                f"agent_isolation is pool but group {hosted.agent_pool_group!r} has no users "
                '(deploy/install creates them; or set agent_isolation = "shared")',
                **where,
            )
        forbidden = _forbidden_uids(hosted.agent_user)
        shared = [m.name for m in members if m.uid in forbidden]
        if shared:
            raise ConfigError(
                f"the agent pool must hold only agents' users; {', '.join(shared)} is root, the "
                "daemon's or the tmux server's user",
                **where,
            )
        if proc_hides_processes():
            raise ConfigError(
                "agent_isolation is pool but /proc hides other users' processes (hidepid, "
                "systemd ProtectProc=): the daemon could not see that a pool user still runs",
                path=str(config.path),
                key="hosted.agent_isolation",
            )
        return cls(AgentPool(members, group=hosted.agent_pool_group), clock)

    def acquire(self, want: str | None = None, live: Set[str] = frozenset()) -> PoolUser:
        return self.pool.acquire(*running_uids(), self.clock.now(), want=want, live=live)

    def started(self, user: PoolUser, pid: int) -> None:
        self.pool.started(user, pid)

    def release(self, user: PoolUser) -> None:
        self.pool.release(user)

    def user_with_uid(self, uid: int) -> PoolUser | None:
        return next((user for user in self.pool.users if user.uid == uid), None)

    def health(self) -> dict[str, object]:
        busy: Sequence[PoolUser] = self.pool.in_use(*running_uids(), self.clock.now())
        return {"pool_users": len(self.pool.users), "pool_in_use": len(busy)}


def _forbidden_uids(agent_user: str) -> set[int]:
    uids = {0, os.getuid(), os.geteuid()}
    with contextlib.suppress(KeyError):
        uids.add(pwd.getpwnam(agent_user).pw_uid)
    return uids


__all__ = ["AgentUsers", "pool_members", "proc_hides_processes", "running_uids"]
