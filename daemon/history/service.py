"""The history index inside the daemon: its gate actions and its background reconcile.

Actions (every call goes through the gate and leaves one audit record):

* ``history.search`` (scope ``history``, read tier): ``{"q", "repo"?, "limit"?}``. A human
  gets full entries; an agent gets ``project_for_agent`` dicts only.
* ``history.get`` (scope ``history``, read tier): ``{"harness", "session_id", "repo"?}``,
  same split. With ``repo`` (what the MCP side passes for "own repo unless widened") a
  session outside that repo is not found.
* ``history.expunge`` (human only, mutating): ``{"harness", "session_id"}``; removes the
  entry and its transcript file(s); for OpenCode, whose database the index never writes, the
  entries only, and the answer's ``kept`` says how to delete OpenCode's copy.
* ``history.push`` (human only, mutating): index one transcript now, given
  ``{"transcript_path"}`` (absolute), ``{"harness", "session_id"}`` or ``{"hook": {...}}``
  (the JSON a Claude Code hook passes on stdin); only a transcript under one of the
  configured sources is read. The record names what was indexed.
* ``history.reindex`` (human only, mutating): ``{"full"?}``; reconcile now (``full`` forgets
  what was seen and re-parses every transcript), in a worker thread; the record carries the
  counts. ``openbus history push`` and ``reindex`` are these actions, so every write of the
  index on someone's behalf leaves its audit record here.

Reconcile runs in a worker thread: once at start, then whenever a search finds the last pass
older than ``STALE_SECONDS``. After each pass (and each push or reindex), a screening pass in
another worker thread has the agents' masker screen the entries written since
(``HistoryIndex.screen_pass``): no search or reconcile waits for it, and ``/healthz`` says how
many are left (``unscreened``). An agent's search does not wait for it (seed 000: "a reconcile
that a search starts but does not wait for"); a person's waits up to
``SEARCH_WAITS_SECONDS``, and any answer given while one still runs says the index is
refreshing (``refreshing``). Claude Code entries arrive sooner through the hooks. A person's
``history.get`` also takes a unique prefix of the session id.
A search answers on the event loop (no thread hop) unless a reconcile is running, which may
hold the index lock for a while: then it runs in one worker thread, query to projection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from openbus.daemon.config import Config
from openbus.daemon.core.actions import Action
from openbus.daemon.core.consent import Tier
from openbus.daemon.feature import Feature
from openbus.daemon.gate import Call, Gate
from openbus.daemon.history.expunge import harness_keeps
from openbus.daemon.history.index import (
    DB_NAME,
    MAX_LIMIT,
    HistoryIndex,
    ReconcileStats,
    in_repo,
    watched_liveness,
)
from openbus.daemon.history.liveness import PaneForPid
from openbus.daemon.history.model import HARNESSES, PENDING_HARNESSES, Liveness, SessionEntry
from openbus.daemon.history.project import TextScreen, full_for_human, project_for_agent
from openbus.daemon.history.sources import Sources
from openbus.kernel.clock import Clock
from openbus.kernel.errors import BadRequest, NotFound
from openbus.kernel.scopes import Scope

log = logging.getLogger("openbus.history")

SEARCH = Action("history.search", scope=Scope.HISTORY, tier=Tier.READ)
GET = Action("history.get", scope=Scope.HISTORY, tier=Tier.READ)
EXPUNGE = Action("history.expunge", scope=None, tier=Tier.HUMAN, outside_effects=True)
PUSH = Action("history.push", scope=None, tier=Tier.HUMAN, outside_effects=True)
REINDEX = Action("history.reindex", scope=None, tier=Tier.HUMAN, outside_effects=True)

Shape = Callable[[SessionEntry, Sequence[str], Liveness], dict[str, Any]]

STALE_SECONDS = 30.0
SEARCH_WAITS_SECONDS = 5.0  # a person's search waits this long for a running reconcile
SOURCE = "openbus history index (lexical, from harness transcripts)"
MAX_QUERY_CHARS = 1000


class HistoryService(Feature):
    """The history feature: registers its actions on ``gate`` and reconciles ``index`` in the
    background."""

    name = "history"

    def __init__(self, gate: Gate, index: HistoryIndex) -> None:
        self.index = index
        self._cancel = threading.Event()
        self._running: asyncio.Future[ReconcileStats] | None = None
        self._screening: asyncio.Future[int] | None = None
        self.last_stats: ReconcileStats | None = None
        gate.register(SEARCH, self.search)
        gate.register(GET, self.get)
        gate.register(EXPUNGE, self.expunge)
        gate.register(PUSH, self.push)
        gate.register(REINDEX, self.reindex)

    # ---------------------------------------------------------------- reconcile

    def kick(self) -> asyncio.Future[ReconcileStats] | None:
        """Start a reconcile in a worker thread unless one runs or the last is fresh."""
        if self._running is not None and not self._running.done():
            return self._running
        last = self.index.last_reconcile
        if last is not None and self.index.clock.monotonic() - last < STALE_SECONDS:
            return None
        loop = asyncio.get_running_loop()
        self._running = loop.run_in_executor(None, self._reconcile)
        self._running.add_done_callback(lambda _: self._screen_soon())
        return self._running

    def _screen_soon(self) -> None:
        """Start a screening pass in a worker thread unless one runs (or the daemon stops)."""
        if self._cancel.is_set() or self.index.screen is None:
            return
        if self._screening is not None and not self._screening.done():
            return
        loop = asyncio.get_running_loop()
        self._screening = loop.run_in_executor(None, self._screen)

    def _screen(self) -> int:
        """A screening pass; a failure is logged, and what it left is screened by the next
        (its hits are masked as they are read meanwhile)."""
        try:
            return self.index.screen_pass(self._cancel)
        except Exception:
            log.exception("history screening failed")
            return 0

    def _reconcile(self) -> ReconcileStats:
        try:
            stats = self.index.reconcile(cancel=self._cancel)
        except Exception:
            log.exception("history reconcile failed")
            raise
        self.last_stats = stats
        if stats.errors:
            log.warning(
                "history reconcile: %d file(s) failed, first: %s",
                len(stats.errors),
                stats.errors[0],
            )
        return stats

    async def start(self) -> None:
        self.kick()

    async def stop(self) -> None:
        self._cancel.set()
        for running in (self._running, self._screening):
            if running is not None:
                try:
                    await running
                except Exception:
                    log.debug("reconcile or screening ended with an error at stop", exc_info=True)
        self.index.close()

    def health(self) -> dict[str, Any]:
        return {
            "sessions": self.index.count(),
            "reconciling": self.index.reconcile_running(),
            # entries the agents' masker has yet to screen (null: none is screened)
            "unscreened": self.index.unscreened(),
            "pending_harnesses": list(PENDING_HARNESSES),
            # liveness: open-files scans taken, and the transcript folders whose opens and
            # closes are watched (their files' scans are kept while nothing happens there)
            "open_files_scans": self.index.liveness_probe.scans,
            "watched_folders": self.index.liveness_probe.watched_folders(),
        }

    # ---------------------------------------------------------------- executors

    async def search(self, call: Call) -> Any:
        q = call.params.get("q")
        if not isinstance(q, str) or not q.strip():
            raise BadRequest("a query is required", field="q")
        if len(q) > MAX_QUERY_CHARS:
            raise BadRequest(f"the query is longer than {MAX_QUERY_CHARS} characters", field="q")
        repo = call.params.get("repo")
        if repo is not None and not isinstance(repo, str):
            raise BadRequest("repo must be text", field="repo")
        limit = _limit(call.params.get("limit", 10))
        call.details.update({"query": q[:200], "repo": repo, "limit": limit})
        shape = full_for_human if call.actor.is_human else project_for_agent
        running = self.kick()  # a stale index starts a reconcile now (or one already runs)
        if running is not None and call.actor.is_human:
            # a person's search waits for it, bounded (an agent's never does): a first search
            # after start would otherwise see only what the reconcile had reached so far
            with contextlib.suppress(Exception):  # timed out, or failed (it logs why)
                await asyncio.wait_for(asyncio.shield(running), SEARCH_WAITS_SECONDS)
        if self.index.writing_long():
            # A reconcile takes the index lock in turns (its first read of the file table is
            # long), an expunge for its shard's merge: wait for it off the event loop, in one
            # hop for the whole answer.
            results, keys = await asyncio.to_thread(self._search, q, repo, limit, shape)
        else:
            # Reconciles and expunges start only from this loop, so none can begin meanwhile
            # and nothing holds the index for long: answer at once (an FTS query, milliseconds).
            results, keys = self._search(q, repo, limit, shape)
        call.details["results"] = keys
        body: dict[str, Any] = {
            "source": SOURCE,
            "data_only": True,
            "pending_harnesses": list(PENDING_HARNESSES),
            "results": results,
        }
        if self.index.reconcile_running():
            call.details["refreshing"] = True
            body["refreshing"] = (
                "the index is being refreshed from the transcripts on disk: sessions it has not "
                "reached yet are missing from these results; search again shortly"
            )
        return body

    def _search(
        self, q: str, repo: str | None, limit: int, shape: Shape
    ) -> tuple[list[dict[str, Any]], list[str]]:
        # an agent's answer shows no prompts (``project_for_agent``): its full matches' are
        # not read
        hits = self.index.search(q, repo, limit, prompts=shape is full_for_human)
        results = [shape(h.entry, h.matched_terms, self.index.liveness(h.entry)) for h in hits]
        return results, [f"{h.entry.harness}:{h.entry.session_id}" for h in hits]

    async def get(self, call: Call) -> Any:
        harness, session_id = _key(call.params)
        call.target = f"{harness}:{session_id}"
        repo = call.params.get("repo")
        if repo is not None and not isinstance(repo, str):
            raise BadRequest("repo must be text", field="repo")
        # a person may give a unique prefix of the id (an agent names it whole: no guessing)
        lookup = self.index.get_by_prefix if call.actor.is_human else self.index.get
        entry = await asyncio.to_thread(lookup, harness, session_id)
        call.target = f"{harness}:{entry.session_id}"
        if repo and not in_repo(entry, repo):
            # the same answer as for a session that does not exist: no existence leak
            raise NotFound(f"no {harness} session {session_id} in the history index")
        live = await asyncio.to_thread(self.index.liveness, entry)
        if call.actor.is_human:
            body = full_for_human(entry, (), live)
        else:
            body = project_for_agent(entry, (), live)
        return {"source": SOURCE, "data_only": True, "session": body}

    async def expunge(self, call: Call) -> Any:
        harness, session_id = _key(call.params)
        call.target = f"{harness}:{session_id}"
        with self.index.expunging():
            removed = await asyncio.to_thread(self.index.expunge, harness, session_id)
        call.details["removed_files"] = len(removed)
        body: dict[str, Any] = {"harness": harness, "session_id": session_id, "removed": removed}
        kept = harness_keeps(harness, session_id)
        if kept:
            body["kept"] = kept
        return body

    async def push(self, call: Call) -> Any:
        entries = await asyncio.to_thread(self._push, call.params)
        self._screen_soon()
        keys = [f"{e.harness}:{e.session_id}" for e in entries]
        call.target = keys[0] if len(keys) == 1 else None
        call.details["indexed"] = keys
        return {"indexed": [{"harness": e.harness, "session_id": e.session_id} for e in entries]}

    def _push(self, params: Any) -> list[SessionEntry]:
        hook = params.get("hook")
        path = params.get("transcript_path")
        if hook is not None:
            if not isinstance(hook, dict):
                raise BadRequest("expected the hook's JSON object", field="hook")
            return self.index.push_hook(hook)
        if path is not None:
            if not isinstance(path, str) or not path.startswith("/"):
                raise BadRequest("an absolute path is required", field="transcript_path")
            found = self.index.push(transcript_path=path)
        else:
            harness, session_id = _key(params)
            found = self.index.push(harness=harness, session_id=session_id)
        return [found] if found is not None else []

    async def reindex(self, call: Call) -> Any:
        full = call.params.get("full", False)
        if not isinstance(full, bool):
            raise BadRequest("full must be true or false", field="full")
        stats = await asyncio.to_thread(self._reindex, full)
        self._screen_soon()
        data = stats.to_dict()
        call.details.update(
            full=full,
            **{k: data[k] for k in ("scanned", "changed", "indexed", "gone")},
            failed=len(data["errors"]),
        )
        return data

    def _reindex(self, full: bool) -> ReconcileStats:
        stats = self.index.reconcile(cancel=self._cancel, full=full)
        self.last_stats = stats
        return stats


def _limit(value: object) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_LIMIT:
        raise BadRequest(f"limit must be an integer between 1 and {MAX_LIMIT}", field="limit")
    return value


def _key(params: Any) -> tuple[str, str]:
    harness = params.get("harness")
    session_id = params.get("session_id")
    if not isinstance(harness, str) or harness not in HARNESSES:
        pending = f" ({harness} is pending)" if harness in PENDING_HARNESSES else ""
        raise BadRequest(f"harness must be one of {', '.join(HARNESSES)}{pending}", field="harness")
    if not isinstance(session_id, str) or not session_id:
        raise BadRequest("a session id is required", field="session_id")
    return harness, session_id


def open_index(
    config: Config, clock: Clock, pane_for_pid: PaneForPid, screen: TextScreen
) -> HistoryIndex:
    """The daemon's index; ``pane_for_pid`` (the directory's) names a live session's pane,
    ``screen`` (the agents' masker) screens the entries written (``screen_pass``)."""
    sources = Sources.from_config(config)
    return HistoryIndex(
        config.daemon.state_dir / DB_NAME,
        sources,
        clock=clock,
        liveness=watched_liveness(sources, clock, pane_for_pid),
        screen=screen,
    )
