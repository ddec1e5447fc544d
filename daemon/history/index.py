"""The history index: one object over its parts, the API the service and the CLI hold.

The SQLite store (``store``) keeps the entries and the transcript files seen; ``reconcile``
keeps them in step with the transcripts the sources (``sources``) find, and ``push`` indexes
one at once; ``search`` turns the query into quoted terms and ``MATCH`` expressions
(``query``), has the store rank them and names the terms each hit holds; ``expunge`` removes a
session and what the harness keeps of it (``expunge``); ``liveness`` asks the probe whether a
session still runs; ``screen_pass`` has the agents' masker screen what was written since
(``store``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from openbus.daemon.history.expunge import expunge_entry
from openbus.daemon.history.liveness import LivenessProbe, PaneForPid
from openbus.daemon.history.model import Hit, Liveness, SessionEntry
from openbus.daemon.history.open_watch import OpenWatch
from openbus.daemon.history.project import TextScreen, shown_texts
from openbus.daemon.history.query import (
    in_repo,
    match_expressions,
    matched_terms,
    query_terms,
    scope_key,
    scoped_expressions,
)
from openbus.daemon.history.reconcile import Progress, Reconciler, ReconcileStats
from openbus.daemon.history.sources import Sources, Transcript
from openbus.daemon.history.store import DB_NAME, HistoryStore
from openbus.kernel.clock import Clock
from openbus.kernel.errors import BadRequest

__all__ = ["DB_NAME", "MAX_LIMIT", "HistoryIndex", "ReconcileStats", "in_repo", "watched_liveness"]

MAX_LIMIT = 100
MIN_PREFIX = 4  # the shortest session id prefix ``get_by_prefix`` resolves
# entries screened at a time: the store's lock is held for the read and the marks, not the
# masking (about 20 us an entry)
SCREEN_BATCH = 256


def watched_liveness(
    sources: Sources, clock: Clock, pane_for_pid: PaneForPid | None = None
) -> LivenessProbe:
    """The daemon's liveness probe: its open-files scans are kept while nothing opens or closes
    a file in the transcript folders (an inotify watch on them, ``open_watch``, closed with the
    probe), and ``pane_for_pid`` names a live session's pane."""
    # OpenCode's database sits at the top of its data folder, beside folders of snapshots and
    # logs that are no transcript's: that folder alone is watched
    watch = OpenWatch(sources.open_file_trees(), sources.opencode_dirs)
    return LivenessProbe(
        sources.claude_dirs, clock=clock, pane_for_pid=pane_for_pid, open_watch=watch
    )


class HistoryIndex:
    def __init__(
        self,
        path: Path,
        sources: Sources,
        *,
        clock: Clock,
        liveness: LivenessProbe | None = None,
        screen: TextScreen | None = None,
    ) -> None:
        """``liveness``: the probe the index asks (``watched_liveness`` in the daemon), closed
        with the index; by default one that scans by time alone and names no pane (the CLI's
        offline commands never ask it, so no watch is started for them). ``screen``: what
        masks an agent's text, asked about the entries written (``screen_pass``); without
        one, nothing is screened and every hit is masked when an agent reads it."""
        self.path = path
        self.sources = sources
        self.clock = clock
        if liveness is None:
            liveness = LivenessProbe(sources.claude_dirs, clock=clock)
        self.liveness_probe = liveness
        self.store = HistoryStore(path)
        self.screen = screen
        self.reconciler = Reconciler(self.store, sources, clock=clock)
        self._expunging = 0  # expunges running (each merges a full-text shard: seconds)

    def close(self) -> None:
        self.store.close()
        self.liveness_probe.close()

    # ---------------------------------------------------------------- reading

    def count(self) -> int:
        return self.store.count()

    def get(self, harness: str, session_id: str) -> SessionEntry:
        return self.store.get(harness, session_id)

    def get_by_prefix(self, harness: str, prefix: str) -> SessionEntry:
        """The session whose id is ``prefix``, or the one session whose id starts with it (at
        least ``MIN_PREFIX`` characters); several is a ``BadRequest`` naming some."""
        entry = self.store.find(harness, prefix)
        if entry is not None or len(prefix) < MIN_PREFIX:
            return entry or self.store.get(harness, prefix)
        found = self.store.ids_starting(harness, prefix, limit=4)
        if len(found) == 1:
            return self.store.get(harness, found[0])
        if not found:
            return self.store.get(harness, prefix)  # not found, in the one wording
        more = ", ..." if len(found) > 3 else ""
        raise BadRequest(
            f"{prefix!r} starts more than one {harness} session id ({', '.join(found[:3])}{more}); "
            "give more of it",
            field="session_id",
        )

    def recent(self, limit: int = 20) -> list[SessionEntry]:
        return self.store.recent(limit)

    def search(
        self, query: str, repo: str | None = None, limit: int = 10, *, prompts: bool = True
    ) -> list[Hit]:
        """The best ``limit`` entries for ``query`` (within ``repo``'s sessions when given).
        Without ``prompts``, an entry that matched every term comes without its prompts, for
        an answer that shows none (``HistoryStore.ranked``)."""
        if not isinstance(query, str):
            raise BadRequest("the query must be text", field="q")
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
            raise BadRequest(f"limit must be between 1 and {MAX_LIMIT}", field="limit")
        terms = query_terms(query)
        if not terms:
            raise BadRequest("the query has no words to search for", field="q")
        key = scope_key(repo)
        if key is not None:  # within one repo identity: its own terms, far fewer to read
            anyterm, every = scoped_expressions(terms, key)
        else:
            anyterm, every = match_expressions(terms, repo)
        # an entry that matched every term holds them all: its text is looked through only
        # for a partial match's
        return [
            Hit(entry, score, tuple(terms) if full else matched_terms(entry, terms))
            for entry, score, full in self.store.ranked(
                anyterm, every, limit, scoped=key is not None, prompts=prompts
            )
        ]

    # ---------------------------------------------------------------- screening

    def screen_pass(self, cancel: threading.Event | None = None) -> int:
        """Screens every entry not yet screened under the masker's rules, a batch at a time
        (the masking outside the store's lock), until none is left, ``cancel`` is set, or a
        batch marks nothing (its rows all rewritten meanwhile: the next pass takes them).
        Returns how many were screened."""
        screen, fingerprint = self.screen, self._fingerprint()
        if screen is None or fingerprint is None:
            return 0
        done = 0
        while cancel is None or not cancel.is_set():
            batch = self.store.unscreened(fingerprint, SCREEN_BATCH)
            if not batch:
                break
            found = [(rowid, e, screen.clean(shown_texts(e))) for rowid, e in batch]
            marked = self.store.mark_screened(fingerprint, found)
            done += marked
            if not marked:
                break
        return done

    def unscreened(self) -> int | None:
        """How many entries the next screening pass has to screen (None: no screening)."""
        fingerprint = self._fingerprint()
        return None if fingerprint is None else self.store.count_unscreened(fingerprint)

    def _fingerprint(self) -> int | None:
        """The screen's fingerprint; None without a screen, or one whose answers are not kept."""
        return self.screen.fingerprint if self.screen is not None else None

    def liveness(self, entry: SessionEntry) -> Liveness:
        return self.liveness_probe.of(entry)

    def find_transcript(self, harness: str, session_id: str) -> Transcript | None:
        return self.sources.find_transcript(harness, session_id)

    # ---------------------------------------------------------------- writing

    def upsert(self, entry: SessionEntry) -> None:
        self.store.upsert(entry)

    def upsert_many(self, entries: Iterable[SessionEntry]) -> int:
        return self.store.upsert_many(entries)

    def reconcile(
        self,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
        *,
        full: bool = False,
    ) -> ReconcileStats:
        """Re-parse the transcripts that changed since the last pass (``full``: every one);
        one pass at a time. ``progress(done, total)`` is called as files are parsed;
        ``cancel`` stops early."""
        return self.reconciler.reconcile(progress, cancel, full=full)

    def reconcile_running(self) -> bool:
        return self.reconciler.running()

    def writing_long(self) -> bool:
        """A reconcile or an expunge runs: either may hold the index for seconds (a merge of
        a full-text shard), so a search should not wait for it on an event loop."""
        return self.reconciler.running() or self._expunging > 0

    @property
    def last_reconcile(self) -> float | None:
        """``clock.monotonic()`` when the last reconcile finished, if one did."""
        return self.reconciler.last

    def push(
        self,
        *,
        transcript_path: str | Path | None = None,
        harness: str | None = None,
        session_id: str | None = None,
    ) -> SessionEntry | None:
        """Index one transcript now: by its path, or by harness and session id."""
        if transcript_path is not None:
            return self.reconciler.push_path(transcript_path)
        return self.reconciler.push_session(harness, session_id)

    def push_hook(self, hook: Mapping[str, Any]) -> list[SessionEntry]:
        """The JSON a Claude Code hook passes on stdin (Stop, SessionEnd, SubagentStop)."""
        return self.reconciler.push_hook(hook)

    def expunge(self, harness: str, session_id: str) -> list[str]:
        """Remove the entry and its transcript file(s); returns the paths removed."""
        entry = self.get(harness, session_id)
        return expunge_entry(self.store, self.sources, entry, self.liveness(entry))

    @contextlib.contextmanager
    def expunging(self) -> Iterator[None]:
        """An expunge runs meanwhile (``writing_long``): entered where it is started, before it
        reaches the index, so no search begins on the event loop in between."""
        self._expunging += 1
        try:
            yield
        finally:
            self._expunging -= 1
