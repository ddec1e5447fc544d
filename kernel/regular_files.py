"""Reading a file that someone else may have put in place: only a regular file is read.

The daemon reads files in folders other users write: an agent's harness folders (transcripts,
status files, its config), its checkout. A FIFO nobody writes, put where such a file is
expected, would hold a plain ``open`` forever, and a link to a device (``/dev/zero``) would
never end a plain read. ``open_regular`` opens without blocking and refuses anything but a
regular file (OSError, like any file that cannot be read); ``read_regular`` reads one whole,
or its first ``limit`` bytes.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def open_regular(path: str | Path) -> tuple[int, os.stat_result]:
    """``path`` opened for reading, with its stat; OSError unless it names a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
    except OSError:
        os.close(fd)
        raise
    return fd, st


def read_regular(path: str | Path, limit: int | None = None) -> bytes:
    """The bytes of the regular file at ``path`` (its first ``limit`` at most); OSError when
    it cannot be read or is not a regular file."""
    fd, _st = open_regular(path)
    with os.fdopen(fd, "rb") as handle:
        return handle.read() if limit is None else handle.read(limit)
