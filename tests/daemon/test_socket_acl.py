"""The hosted socket's ACLs: the kernel's encoding, and what a socket bound in the dir inherits."""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

import pytest

from openbus.daemon import socket_acl
from openbus.daemon.socket_acl import (
    EXECUTE,
    GROUP,
    GROUP_OBJ,
    MASK,
    OTHER,
    READ,
    UNDEFINED_ID,
    USER,
    USER_OBJ,
    WRITE,
    Entry,
    decode,
    directory_acls,
    encode,
)
from openbus.kernel.errors import Unavailable


def test_entries_are_encoded_sorted_by_tag_and_id_after_a_version_2_header() -> None:
    blob = encode([Entry(OTHER, UNDEFINED_ID, 0), Entry(USER, 7, 6), Entry(USER, 3, 4)])
    assert blob[:4] == struct.pack("<I", 2)
    assert decode(blob) == [Entry(USER, 3, 4), Entry(USER, 7, 6), Entry(OTHER, UNDEFINED_ID, 0)]


def test_a_duplicate_entry_is_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        encode([Entry(USER, 3, 4), Entry(USER, 3, 6)])


def test_a_truncated_attribute_is_not_an_acl() -> None:
    with pytest.raises(ValueError, match="not a POSIX ACL"):
        decode(b"\x02\x00\x00\x00\x01")


def test_the_directory_keeps_its_mode_and_lets_only_the_two_named_peers_through() -> None:
    access, default = directory_acls(0o750, tunnel_uid=1001, operators_gid=2002)
    assert decode(access) == [
        Entry(USER_OBJ, UNDEFINED_ID, 7),
        Entry(USER, 1001, EXECUTE),
        Entry(GROUP_OBJ, UNDEFINED_ID, 5),
        Entry(GROUP, 2002, EXECUTE),
        Entry(MASK, UNDEFINED_ID, 5),
        Entry(OTHER, UNDEFINED_ID, 0),
    ]
    assert decode(default) == [
        Entry(USER_OBJ, UNDEFINED_ID, READ | WRITE),
        Entry(USER, 1001, READ | WRITE),
        Entry(GROUP_OBJ, UNDEFINED_ID, 0),
        Entry(GROUP, 2002, READ | WRITE),
        Entry(MASK, UNDEFINED_ID, READ | WRITE),
        Entry(OTHER, UNDEFINED_ID, 0),
    ]


def test_without_an_operators_group_only_the_tunnel_is_named() -> None:
    _, default = directory_acls(0o700, tunnel_uid=1001, operators_gid=None)
    named = [e for e in decode(default) if e.tag in (USER, GROUP)]
    assert named == [Entry(USER, 1001, READ | WRITE)]


def test_a_socket_bound_in_the_granted_directory_inherits_the_grants(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    try:
        socket_acl.grant(run, tunnel_uid=4242, operators_gid=4343)
    except Unavailable as exc:
        pytest.skip(f"no POSIX ACLs here: {exc}")
    path = run / "daemon.sock"
    old = os.umask(0o117)  # as gunicorn binds in hosted mode
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))
            entries = {(e.tag, e.qualifier): e.perm for e in socket_acl.read_acl(path)}
    finally:
        os.umask(old)
    assert entries[(USER, 4242)] == READ | WRITE
    assert entries[(GROUP, 4343)] == READ | WRITE
    assert entries[(MASK, UNDEFINED_ID)] == READ | WRITE
    assert entries[(GROUP_OBJ, UNDEFINED_ID)] == 0
    assert entries[(OTHER, UNDEFINED_ID)] == 0
    assert path.stat().st_mode & 0o777 == 0o660


def test_a_directory_the_daemon_cannot_change_is_one_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(Unavailable, match=r"cannot open .*nowhere to the tunnel"):
        socket_acl.grant(missing, tunnel_uid=1, operators_gid=None)
