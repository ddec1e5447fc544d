"""Who may open the daemon's unix socket in hosted mode: POSIX ACLs on the socket's directory.

Theory of operation
-------------------
A unix socket file has one owner and one group, but in hosted mode two kinds of peer must
reach ``daemon.sock``: the tunnel (user ``openbus-tunnel``, which runs with no supplementary
groups once it has dropped root) and the operators at the desk (group ``openbus-operators``,
identity by peer uid). Everyone else, agents above all, must not be able to open it.

Before gunicorn binds the socket, ``openbus serve`` gives the socket's directory (which the
daemon's user owns: ``/run/openbus``, systemd's RuntimeDirectory) two ACLs:

* the access ACL keeps the directory's mode bits and adds ``user:<tunnel>:--x`` and
  ``group:<operators>:--x``, so those two may traverse it and nobody else may (mode 0700 or
  0750 for the rest);
* the default ACL, which the socket inherits when gunicorn creates it, is
  ``user::rw- user:<tunnel>:rw- group::--- group:<operators>:rw- mask::rw- other::---``.

The kernel ANDs an inherited ACL with the mode the creator asks for (``bind`` applies the
umask itself), so gunicorn binds with umask 0117 in hosted mode: the socket comes out as
``rw-rw----+`` with exactly the two named grants. Connecting needs write permission on the
socket and search permission on every directory above it, so an agent gets ``EACCES``.

The encoding is the kernel's ``system.posix_acl_*`` extended attribute (``posix_acl_xattr.h``):
a little-endian version 2 header, then ``(tag u16, perm u16, id u32)`` entries sorted by tag
and id. Writing the attribute directly needs neither ``setfacl`` nor libacl. A file system
without ACL support makes ``grant`` fail, and the daemon refuses to start (fail closed).
``encode``/``decode``/``directory_acls`` are pure; ``grant`` and ``read_acl`` do the I/O.
"""

from __future__ import annotations

import errno
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from openbus.kernel.errors import Unavailable

ACCESS = "system.posix_acl_access"
DEFAULT = "system.posix_acl_default"

VERSION = 2
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
UNDEFINED_ID = 0xFFFFFFFF
READ, WRITE, EXECUTE = 4, 2, 1
_HEADER = struct.Struct("<I")
_ENTRY = struct.Struct("<HHI")
_NAMED = (USER, GROUP)


@dataclass(frozen=True, order=True)
class Entry:
    tag: int
    qualifier: int  # a uid for USER, a gid for GROUP, UNDEFINED_ID otherwise
    perm: int


def encode(entries: list[Entry]) -> bytes:
    ordered = sorted(entries)
    seen: set[tuple[int, int]] = set()
    for entry in ordered:
        if (entry.tag, entry.qualifier) in seen:
            raise ValueError(f"duplicate ACL entry {entry}")
        seen.add((entry.tag, entry.qualifier))
    return _HEADER.pack(VERSION) + b"".join(
        _ENTRY.pack(e.tag, e.perm, e.qualifier) for e in ordered
    )


def decode(blob: bytes) -> list[Entry]:
    if len(blob) < _HEADER.size or (len(blob) - _HEADER.size) % _ENTRY.size:
        raise ValueError("not a POSIX ACL attribute")
    (version,) = _HEADER.unpack_from(blob)
    if version != VERSION:
        raise ValueError(f"POSIX ACL version {version}")
    return [
        Entry(tag, qualifier, perm)
        for tag, perm, qualifier in _ENTRY.iter_unpack(blob[_HEADER.size :])
    ]


def _base(user: int, group: int, other: int) -> list[Entry]:
    return [
        Entry(USER_OBJ, UNDEFINED_ID, user),
        Entry(GROUP_OBJ, UNDEFINED_ID, group),
        Entry(OTHER, UNDEFINED_ID, other),
    ]


def directory_acls(
    dir_mode: int, *, tunnel_uid: int, operators_gid: int | None
) -> tuple[bytes, bytes]:
    """The (access, default) ACLs for the socket's directory."""
    owner, group, other = (dir_mode >> 6) & 7, (dir_mode >> 3) & 7, dir_mode & 7
    access = [*_base(owner, group, other), Entry(USER, tunnel_uid, EXECUTE)]
    default = [*_base(READ | WRITE, 0, 0), Entry(USER, tunnel_uid, READ | WRITE)]
    if operators_gid is not None:
        access.append(Entry(GROUP, operators_gid, EXECUTE))
        default.append(Entry(GROUP, operators_gid, READ | WRITE))
    access.append(Entry(MASK, UNDEFINED_ID, group | EXECUTE))
    default.append(Entry(MASK, UNDEFINED_ID, READ | WRITE))
    return encode(access), encode(default)


def grant(directory: Path, *, tunnel_uid: int, operators_gid: int | None) -> None:
    """Set both ACLs on ``directory``; ``Unavailable`` (one clear line) when that fails."""
    try:
        mode = directory.stat().st_mode
        access, default = directory_acls(mode, tunnel_uid=tunnel_uid, operators_gid=operators_gid)
        os.setxattr(directory, ACCESS, access)
        os.setxattr(directory, DEFAULT, default)
    except OSError as exc:
        if exc.errno == errno.EOPNOTSUPP:
            why = "its file system does not support POSIX ACLs"
        elif exc.errno == errno.EPERM:
            why = "the daemon's user does not own it"
        else:
            why = exc.strerror or str(exc)
        raise Unavailable(
            f"cannot open {directory} to the tunnel and the operators ({why}); "
            "hosted mode needs daemon.socket in a directory of its own, owned by the daemon"
        ) from None


def read_acl(path: Path, *, default: bool = False) -> list[Entry]:
    """The ACL of ``path`` (empty when it has none beyond its mode bits)."""
    try:
        return decode(os.getxattr(path, DEFAULT if default else ACCESS))
    except OSError as exc:
        if exc.errno == errno.ENODATA:
            return []
        raise
