"""This process's open descriptors, read from ``/proc/self/fd``."""

from __future__ import annotations

import contextlib
import os


def open_to(target: str) -> set[str]:
    """The descriptors whose link reads ``target`` (a path, or e.g. ``anon_inode:[pidfd]``).

    Tests count only the kind they are about: the suite's other descriptors may close at any
    moment, as the garbage collector finalises earlier tests' objects."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                found.add(fd)
    return found
