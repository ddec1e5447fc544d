"""The system groups of a user, as the daemon and ``openbus-policy explain`` both see them.

One function, so the admin's ``explain`` and the daemon's enforcement can never disagree on
which groups count: the user's primary group first, then every supplementary group (from
the NSS group database, as ``id USER`` shows them), without duplicates.
"""

from __future__ import annotations

import grp
import os
import pwd


class UnknownUser(LookupError):
    """No such user in the system's password database."""


def groups_of(user: str) -> tuple[str, ...]:
    """Primary group first, then supplementary groups sorted by name. Raises ``UnknownUser``."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise UnknownUser(user) from None
    primary = _group_name(entry.pw_gid)
    try:
        gids = os.getgrouplist(user, entry.pw_gid)
    except OSError:
        gids = [entry.pw_gid]
    names = {name for gid in gids if (name := _group_name(gid)) is not None}
    ordered = ([primary] if primary else []) + sorted(names - {primary})
    return tuple(ordered)


def _group_name(gid: int) -> str | None:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return None
