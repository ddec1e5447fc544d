"""A live process holding a file open, for the liveness tests."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def holding(path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A live process holding ``path`` open."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal,sys; f=open(sys.argv[1]); print('ready', flush=True); signal.pause()",
            str(path),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == b"ready"
        yield holder
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
