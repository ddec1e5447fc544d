"""WAL checkpoints of the history index, run beside its writer rather than by it.

Theory of operation
-------------------
In WAL mode a commit appends pages to the ``-wal`` file; a checkpoint copies them back into
the database file and syncs it. SQLite's own policy runs that checkpoint on the writer's
connection, at the end of the commit that takes the WAL past 1000 pages: on a reindex it is
about a tenth of the writer's time (measured: 3,000 transcripts, 0.08 s of 0.79), all of it
spent while the next batch waits.

Here a thread of its own, with a connection of its own, runs a ``PASSIVE`` checkpoint after
commits (``committed`` wakes it; commits that come while one runs are taken by the next).
``PASSIVE`` never waits for a writer or a reader and a writer never waits for it, so the
copying and syncing (SQLite lets go of the GIL for them) overlap the writer's own work. A
checkpoint that fails (the disk full, the file gone) is left to the next commit; the writer's
connection keeps SQLite's policy at ``WRITER_PAGES`` rather than its 1000, so a WAL this thread
does not keep short is still bounded. ``close`` stops the thread and closes its connection;
the writer's own close then checkpoints what is left and removes the WAL. ``paused`` holds
the thread off while the writer runs a checkpoint of its own (an expunge cuts the WAL to
nothing, which fails while another checkpoint runs).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

WRITER_PAGES = 16_000  # the writer's own checkpoint, past about 64 MB of WAL (a fallback)


class Checkpointer:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._wake = threading.Event()
        self._stopping = False
        self._running = threading.Lock()  # held by a checkpoint of this thread's
        self._thread = threading.Thread(target=self._run, name="history-checkpoint", daemon=True)
        self._thread.start()

    def committed(self) -> None:
        """A commit on the writer's connection: checkpoint it soon."""
        self._wake.set()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No checkpoint of this thread's runs meanwhile."""
        with self._running:
            yield

    def close(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            db = sqlite3.connect(str(self._path), isolation_level=None, check_same_thread=False)
        except sqlite3.Error:
            return  # the writer's own checkpoints (``WRITER_PAGES``) keep the WAL bounded
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                try:
                    with self._running:
                        db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error:
                    continue  # tried again after the next commit
        finally:
            db.close()
