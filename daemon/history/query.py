"""The search language of the history index, pure (no database).

A query is cut into words the way the index's FTS5 tokenizer cuts text (unicode61, diacritics
removed), deduplicated, stopwords dropped unless that leaves nothing. Every term is quoted as
an FTS5 string, so user text is never FTS syntax, and the terms are joined twice: any term
(the candidates) and every term (the full matches). A repo filter is one more conjunct on
``repokeys``, which holds one opaque token per repo key of an entry (its identity, toplevel
path and owner/name); ``in_repo`` answers the same question for one entry. The terms are not
held to the text columns by a column filter: that costs bm25 a look at every match's columns
at every query, and the only other column holds ``r`` + 24 hex digits, which a search word
matches only when it is one. A filter that can only be a repo identity (``scope_key``) is
answered instead from the repo's own terms: the query's words prefixed with the repo's token
(``scoped_expressions``), as the store writes each entry's words (``scoped_words``), both cut
by ``tokens``.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from collections.abc import Sequence

from openbus.daemon.history.model import SessionEntry
from openbus.daemon.history.repo import normalize_repo_query

MAX_QUERY_TERMS = 16

STOPWORDS = frozenset(
    """a an and are as at be but by can do does for from has have how i if in into is it its
    me my no not of on or our please so that the their them then there these this to us was
    we were what when where which who why will with you your""".split()  # noqa: SIM905 (a word list reads better as text)
)

_TOKEN = re.compile(r"[^\W_]+")
_ASCII_TOKEN = re.compile(r"[a-z0-9]+")  # the same, on lowercased ASCII text (faster)


_FOLDS_KEPT = 65_536


class _Folds(dict[int, str]):
    """Each character as FTS5's unicode61 (``remove_diacritics 2``) folds it, for
    ``str.translate``, made on first sight: its case folded where that gives one character
    (``µ`` μ, ``ſ`` s, ``ς`` σ), else lowered (``ß`` and the ligatures stay), and a Latin
    letter's diacritics dropped (``İ`` i); nothing else is decomposed (``ﬁ``, ``²``,
    full-width letters stay as they are). Of the 49,638 letters and digits of the BMP past
    ASCII, 210 fold otherwise than the tokenizer's own (older) tables do (measured), where an
    NFKD fold missed 13,700."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        folded = char.casefold()
        if len(folded) != 1:
            folded = char.lower()
        parts = unicodedata.normalize("NFD", folded)
        if unicodedata.name(parts[0], "").startswith("LATIN"):
            folded = "".join(ch for ch in parts if not unicodedata.combining(ch))
        if len(self) < _FOLDS_KEPT:  # a text of every character cannot grow it past this
            self[code] = folded
        return folded


_FOLDS = _Folds()


def _fold(text: str) -> str:
    return text.translate(_FOLDS)


def tokens(text: str) -> list[str]:
    """Words as the index sees them (FTS5's unicode61 with diacritics removed: ``_Folds``)."""
    if text.isascii():
        return _ASCII_TOKEN.findall(text.lower())
    return _TOKEN.findall(_fold(text))


def query_terms(query: str) -> list[str]:
    """The search terms of a query: words, deduplicated, stopwords dropped unless that
    leaves nothing, at most ``MAX_QUERY_TERMS``."""
    seen: list[str] = []
    for term in tokens(query):
        if term not in seen:
            seen.append(term)
    content = [t for t in seen if t not in STOPWORDS]
    return (content or seen)[:MAX_QUERY_TERMS]


def fts_query(terms: Sequence[str], op: str = "OR") -> str:
    """Every term quoted as an FTS5 string, joined by AND or OR: user text never becomes
    FTS syntax."""
    assert op in ("AND", "OR")
    return f" {op} ".join('"' + t.replace('"', '""') + '"' for t in terms)


def match_expressions(terms: Sequence[str], repo: str | None) -> tuple[str, str | None]:
    """The ``MATCH`` expressions of a search: any term, and every term (``None`` for one
    term, where every match is a full one), each within ``repo`` when one is given."""
    repo_filter = ""
    if repo is not None and repo.strip():
        repo_filter = f' AND repokeys : "{repo_token(normalize_repo_query(repo))}"'
    anyterm = f"({fts_query(terms, 'OR')})" + repo_filter
    every = f"({fts_query(terms, 'AND')})" + repo_filter
    return anyterm, every if len(terms) > 1 else None


def _identity_form(key: str) -> bool:
    """A key that can only be a repo identity (``host/owner/name``): not a toplevel path,
    which starts with "/", nor an owner/name, which has one "/"."""
    return not key.startswith("/") and key.count("/") >= 2


def scope_key(repo: str | None) -> str | None:
    """The key of a repo filter that only identities answer, so the sessions it finds are
    exactly those holding it among their keys (``scope_keys``); None for any other filter."""
    if repo is None or not repo.strip():
        return None
    key = normalize_repo_query(repo)
    return key if _identity_form(key) else None


def scope_keys(entry: SessionEntry) -> list[str]:
    """The keys of an entry a ``scope_key`` may name (its identity, almost always alone)."""
    return sorted(k for k in repo_keys(entry) if _identity_form(k))


def scoped_words(keys: Sequence[str], text: str) -> str:
    """``text``'s words as each repo key's own terms: the word prefixed with the key's
    token, so a word in one repo is another term than the same word in another."""
    words = tokens(text)
    if not words:
        return ""
    return " ".join(p + (" " + p).join(words) for p in map(repo_token, keys))


def scoped_expressions(terms: Sequence[str], key: str) -> tuple[str, str | None]:
    """``match_expressions`` over the repo ``key``'s own terms (no repo conjunct: every term
    is the repo's)."""
    prefix = repo_token(key)
    scoped = [prefix + t for t in terms]
    return fts_query(scoped, "OR"), fts_query(scoped, "AND") if len(terms) > 1 else None


@functools.lru_cache(maxsize=4096)  # a few keys recur across many sessions
def repo_token(key: str) -> str:
    """One opaque word standing for a repo key (identity, toplevel path or owner/name)."""
    return "r" + hashlib.sha256(key.encode()).hexdigest()[:24]


REPO_BUCKET_BITS = 22


def repo_bucket(key: str) -> int:
    """A number below ``2**REPO_BUCKET_BITS`` standing for a repo key (from its token): the
    store keeps a repo's own terms together under it. Two repos may share one; their terms
    still differ (each is prefixed with its own token)."""
    return int(repo_token(key)[1:], 16) >> (24 * 4 - REPO_BUCKET_BITS)


def repo_short(repo: str | None) -> str | None:
    """The owner/name of a ``host/owner/name`` identity (none for a toplevel path)."""
    if not repo or repo.startswith("/"):
        return None
    parts = repo.split("/")
    return "/".join(parts[-2:]) if len(parts) >= 3 else None


def repo_keys(entry: SessionEntry) -> set[str]:
    """The keys a repo filter finds ``entry`` by: identity, toplevel path, owner/name."""
    return {k for k in (entry.repo, entry.repo_root, repo_short(entry.repo)) if k}


def matched_terms(entry: SessionEntry, terms: Sequence[str]) -> tuple[str, ...]:
    """The terms ``entry`` holds, in query order: a term is held when it is one of the words
    ``tokens`` cuts the entry's text into (looked for as a whole word in the folded text,
    rather than cutting all of it into words)."""
    text = "\n".join(
        (
            entry.title or "",
            *entry.prompts,
            entry.repo or "",
            entry.repo_root or "",
            entry.origin or "",
            entry.cwd or "",
            *entry.branches,
            *entry.prs,
        )
    )
    folded = text.lower() if text.isascii() else _fold(text)
    return tuple(t for t in terms if t in folded and _holds_word(folded, t))


def _holds_word(folded: str, term: str) -> bool:
    """Whether ``term`` is a whole word of ``folded``: not inside a longer run of the
    characters ``tokens`` keeps (``[^\\W_]``: those ``str.isalnum`` takes). The pattern
    starts with the term, so ``re`` looks for it as a literal; the character before each
    occurrence is looked at here."""
    for found in _word_end(term).finditer(folded):
        start = found.start()
        if start == 0 or not folded[start - 1].isalnum():
            return True
    return False


@functools.lru_cache(maxsize=1024)
def _word_end(term: str) -> re.Pattern[str]:
    """``term`` not followed by a character ``tokens`` keeps."""
    return re.compile(re.escape(term) + r"(?![^\W_])")


def in_repo(entry: SessionEntry, repo: str) -> bool:
    """Whether ``entry`` is in ``repo`` (an identity, toplevel path or owner/name), by the
    same keys the search filter uses."""
    return normalize_repo_query(repo) in repo_keys(entry)
