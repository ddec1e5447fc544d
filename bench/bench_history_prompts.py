"""History: a search over sessions with prompts of the size real ones reach, as an agent's
``find_sessions`` runs it against a person's.

The index keeps up to 20 prompts of up to 1,000 characters a session (``MAX_PROMPTS``,
``MAX_PROMPT_CHARS``); the history bench's corpus writes one to six short sentences. Here
20,000 sessions of the same corpus each carry 20 prompts of 1,000 characters, and the same
300 topic queries run within one repo (the own-repo filter agents search with). Ours: the
agent's search (``prompts=False``: a hit that matched every term is read without its
prompts, which the agent's answer never shows). The peer: the person's (every hit's prompts
read, as the human API shows them). The pages are checked equal. No target; printed.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from bench.bench_history import SEED, Corpus
from openbus.daemon.history.index import HistoryIndex
from openbus.daemon.history.model import MAX_PROMPT_CHARS, MAX_PROMPTS
from openbus.daemon.history.sources import Sources
from openbus.kernel.clock import SystemClock

SESSIONS = 20_000
QUERIES = 300
ROUNDS = 2
OWN_REPO = 5


def main() -> None:
    corpus = Corpus(SEED)
    with tempfile.TemporaryDirectory() as tmp:
        index = HistoryIndex(Path(tmp) / "history.db", Sources(), clock=SystemClock())
        try:
            entries = []
            for i in range(SESSIONS):
                words = MAX_PROMPT_CHARS // 6  # the corpus's words run about 5 letters
                prompts = tuple(
                    corpus.sentence(words, words)[:MAX_PROMPT_CHARS] for _ in range(MAX_PROMPTS)
                )
                entries.append(dataclasses.replace(corpus.entry(i), prompts=prompts))
            index.upsert_many(entries)
            repo = corpus.repos[OWN_REPO]
            queries = [corpus.query() for _ in range(QUERIES)]
            for q in queries:
                agent = index.search(q, repo, prompts=False)
                person = index.search(q, repo)
                assert [(h.entry.key, h.score, h.matched_terms) for h in agent] == [
                    (h.entry.key, h.score, h.matched_terms) for h in person
                ], q
            times: dict[bool, list[float]] = {True: [], False: []}
            for n in range(ROUNDS * 2):  # each first as often: the second reads warm pages
                for q in queries:
                    for prompts in (False, True) if n % 2 else (True, False):
                        started = time.perf_counter()
                        index.search(q, repo, prompts=prompts)
                        times[prompts].append(time.perf_counter() - started)
        finally:
            index.close()
    ours, peer = (statistics.median(times[p]) * 1e3 for p in (False, True))
    print(
        f"  search within one repo, {SESSIONS:,} sessions of {MAX_PROMPTS} prompts of "
        f"{MAX_PROMPT_CHARS:,} characters, p50: an agent's {ours:.2f} ms, a person's (every "
        f"hit's prompts read) {peer:.2f} ms: ratio {ours / peer:.2f} (no target; printed)"
    )


if __name__ == "__main__":
    main()
