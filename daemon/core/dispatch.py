"""The fast dispatcher: send a front end's request straight to one pane, or to control.

Theory of operation
-------------------
Every request has one correct-by-default destination: control. The dispatcher is an
optimization over that default, a deterministic rule with no model call. It sends direct only
when all of these hold:

* the text is plain: one line of printable text, not multi-step ("then", "after that", ";"),
  and asks for nothing destructive or outward-facing (push, merge, delete, deploy, publish,
  ...) and no pane management (open, start, resume, hand off, ...);
* exactly one **agent** pane matches it on workstream identity: a PR the pane tracks
  (``owner/repo#N``, ``repo#N``, ``#N`` or the PR's URL), its git branch, its working
  directory (full path or last component) or its self-published title (a whole phrase).
  Shell panes are never targets (text there executes), nor exited ones. Pane ids are not
  identity: they are recycled and are not what a person means by "the auth review".

Anything else (no match, several, only a shell, risky words) goes to control, with the
reason. The rule is two steps so a decision costs a few dictionary lookups:

``RoutingIndex.build(panes)`` turns the directory's panes (``PaneFacts``) into a map from
identity key to panes (and multi-word titles by their first word), once per directory
version; the direct decision a match makes on its own is made the first time it is needed
and kept with the index. ``decide(text, index)`` splits the text in one pass in C: a byte
table turns every character no word holds into a space, leaving the runs of word
characters (``pieces``). The common case is then a few set
operations in C: every piece is a word already known harmless (``Lexicon``: a bounded memory
of pieces seen before that are one whole word, no stop word, no risky stem, no PR
reference), and exactly one of them names one agent pane: the prepared decision. Anything
else reads the words with the word pattern and takes one exact pass over them (``scan``),
which stops at the first word that keeps the request from going direct and otherwise
collects every pane its words and phrases name. Both give the same answer for the same text
and index: when every piece is one whole word, the pieces are the pattern's words.
A ``Decision``
names the route, the target with the incarnation and screen revision it was decided on
(the sender checks the incarnation again, and falls back to control if the pane changed),
the candidates and the reason.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from openbus.kernel.errors import BadRequest

MAX_DIRECT_CHARS = 2000
MAX_TITLE_WORDS = 6

# Word stems that make a request destructive or outward-facing (matched at a word's start).
RISKY = (
    "push",
    "merg",
    "delet",
    "remov",
    "deploy",
    "publish",
    "releas",
    "force",
    "destroy",
    "wipe",
    "purg",
    "reset",
    "revert",
    "rebas",
    "truncat",
    "overwrit",
    "uninstall",
    "upload",
    "submit",
    "approv",
    "close",
    "email",
    "tweet",
    "shutdown",
)
# Short risky words, matched whole.
RISKY_WORDS = frozenset({"rm", "ship", "drop", "tag", "post", "kill", "sudo"})
# Words that ask for pane or session management: control's work, never a direct send.
PANE_WORK = frozenset(
    {
        "open",
        "opening",
        "spawn",
        "start",
        "launch",
        "new",
        "window",
        "resume",
        "restart",
        "handoff",
        "hand",
        "which",
    }
)
MULTI_STEP = frozenset({"then", "afterwards", "after", "also", "next", "finally"})
GENERIC_BRANCHES = frozenset({"main", "master", "trunk", "develop", "head", "dev"})
GENERIC_DIRS = frozenset({"", "/", "~", "root", "home", "tmp", "src", "work", "code", "repo"})
AGENT_HARNESSES = frozenset({"claude", "codex", "opencode", "omp", "gemini"})
NOT_TARGETS = frozenset({"shell", "exited"})

# a word: starts and ends with a letter, digit or # ~ / + - _ (trailing punctuation is not in it)
_WORD = re.compile(r"[a-z0-9#~/](?:[a-z0-9_./#:~+-]*[a-z0-9_#~+-])?")
_PR_URL = re.compile(r"^https?://[^/]+/(?P<repo>.+?)/(?:-/)?(?:pull|merge_requests)/(?P<n>\d+)")
_PR_REF = re.compile(r"^(?:(?P<repo>[a-z0-9_.-]+(?:/[a-z0-9_.-]+)?))?[#!](?P<n>\d+)$")


class Route(enum.StrEnum):
    DIRECT = "direct"
    CONTROL = "control"


@dataclass(frozen=True)
class PaneFacts:
    """What the dispatcher knows of one pane (a directory entry, as values)."""

    pane: str
    incarnation: str
    revision: int
    harness: str
    state: str
    cwd: str | None = None
    branch: str | None = None
    title: str | None = None
    pr_links: tuple[str, ...] = ()

    @property
    def agent(self) -> bool:
        return self.harness in AGENT_HARNESSES and self.state not in NOT_TARGETS


@dataclass(frozen=True, eq=False)
class Match:
    pane: str
    kind: str  # "pr" | "branch" | "cwd" | "title"
    value: str


@dataclass(frozen=True)
class Decision:
    route: Route
    reason: str
    pane: str | None = None
    incarnation: str | None = None
    revision: int | None = None
    matched: tuple[Match, ...] = ()
    candidates: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "route": self.route.value,
            "reason": self.reason,
            "pane": self.pane,
            "incarnation": self.incarnation,
            "revision": self.revision,
            "candidates": list(self.candidates),
            "matched": [{"pane": m.pane, "kind": m.kind, "value": m.value} for m in self.matched],
        }


def pr_keys(link: str) -> tuple[str, ...]:
    """The identity keys of a PR link or reference: ``o/r#n``, ``r#n`` and ``#n``."""
    text = link.strip().lower().rstrip("/")
    found = _PR_URL.match(text) or _PR_REF.match(text)
    if found is None:
        return ()
    number = found.group("n")
    repo = (found.group("repo") or "").strip("/")
    keys = [f"#{number}"]
    if repo:
        keys.append(f"{repo}#{number}")
        tail = repo.rsplit("/", 1)[-1]
        if tail != repo:
            keys.append(f"{tail}#{number}")
    return tuple(keys)


def words(text: str) -> list[str]:
    """The text's words, lower-cased, without trailing punctuation."""
    return _WORD.findall(text.lower())


# Keeps the bytes a word may hold, lower-cases ASCII letters; every other byte (a separator,
# or any byte of a non-ASCII character, none of which is in a word) becomes a space.
_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_./#:~+-")
_SPACED = bytes(
    c if c in _WORD_BYTES else c + 32 if 0x41 <= c <= 0x5A else 0x20 for c in range(256)
)


def pieces(text: str) -> list[str]:
    """The runs of word characters in the lower-cased text: where the pattern finds its words
    (no word spans two runs, so the words are the runs' words in order). ASCII text is
    lower-cased by the same byte table; any other is lower-cased first (a few non-ASCII
    letters lower-case to ASCII ones)."""
    if text.isascii():
        return text.encode("ascii").translate(_SPACED).decode("ascii").split()
    lowered = text.lower().encode("utf-8", "surrogatepass")
    return lowered.translate(_SPACED).decode("ascii").split()


# The words that keep a request from going direct, each with why: whole words, and risky stems
# keyed by their first four letters (a word is risky when it starts with a stem).
_STOP_WORDS: dict[str, str] = {
    **{w: "steps" for w in MULTI_STEP},
    **{w: "pane" for w in PANE_WORK},
    **{w: "risky" for w in RISKY_WORDS},
}
_STEMS: dict[str, tuple[str, ...]] = {}
for _stem in RISKY:
    _STEMS.setdefault(_stem[:4], ())
    _STEMS[_stem[:4]] += (_stem,)
_PR_MARKS = ("#", "/pull/", "/merge_requests/")
_STOP_REASONS = {
    "risky": "asks for something destructive or outward-facing ({!r})",
    "pane": "pane or session management ({!r}) is control's work",
    "steps": "several steps ({!r}): control sequences them",
}


def _stop(token: str) -> str | None:
    """Why the word ``token`` keeps a request from going direct, or None."""
    kind = _STOP_WORDS.get(token)
    if kind is not None:
        return _STOP_REASONS[kind].format(token)
    risky = _STEMS.get(token[:4])
    if risky is not None and any(token.startswith(s) for s in risky):
        return _STOP_REASONS["risky"].format(token)
    return None


class Lexicon:
    """Pieces of text known to be harmless words: each one whole word (so the pieces of a
    text made of them are its words), no stop word, no risky stem, no PR reference.

    A piece is judged once, the first time a request holds it; a request made only of known
    pieces is then checked in one set operation. Bounded: past ``limit`` pieces it starts
    again empty. It changes no answer, only how soon it comes.
    """

    def __init__(self, limit: int = 1 << 16) -> None:
        self.limit = limit
        self.harmless: set[str] = set()

    def all_harmless(self, pieces: list[str]) -> bool:
        known = self.harmless
        if known.issuperset(pieces):
            return True
        every = True
        for piece in pieces:
            if piece in known:
                continue
            if (
                _WORD.fullmatch(piece) is None
                or _stop(piece) is not None
                or any(mark in piece for mark in _PR_MARKS)
            ):
                every = False
                continue
            if len(known) >= self.limit:
                known.clear()
            known.add(piece)
        return every


LEXICON = Lexicon()


@dataclass
class RoutingIndex:
    """Identity key -> the panes it names; built once per directory version.

    Each match's direct decision (what it decides alone) is made once, when first needed,
    and kept (``direct``), so a request naming one pane costs its split, a set operation
    and a lookup.
    """

    panes: dict[str, PaneFacts] = field(default_factory=dict)
    keys: dict[str, list[Match]] = field(default_factory=dict)
    titles: dict[str, list[tuple[tuple[str, ...], Match]]] = field(default_factory=dict)
    direct: dict[Match, Decision] = field(default_factory=dict)
    # every word that names something: an identity key (its matches), or a multi-word
    # title's first word (None: the phrase is read by ``scan``)
    named: dict[str, list[Match] | None] = field(default_factory=dict)

    @classmethod
    def build(cls, panes: Iterable[PaneFacts]) -> RoutingIndex:
        index = cls()
        for facts in panes:
            index.panes[facts.pane] = facts
            for link in facts.pr_links:
                for key in pr_keys(link):
                    index._add(key, Match(facts.pane, "pr", link))
            branch = (facts.branch or "").strip().lower()
            if branch and branch not in GENERIC_BRANCHES:
                index._add(branch, Match(facts.pane, "branch", facts.branch or ""))
                tail = branch.rsplit("/", 1)[-1]
                if tail != branch and tail not in GENERIC_BRANCHES:
                    index._add(tail, Match(facts.pane, "branch", facts.branch or ""))
            cwd = (facts.cwd or "").strip().rstrip("/").lower()
            if cwd:
                index._add(cwd, Match(facts.pane, "cwd", facts.cwd or ""))
                base = cwd.rsplit("/", 1)[-1]
                if base not in GENERIC_DIRS:
                    index._add(base, Match(facts.pane, "cwd", facts.cwd or ""))
            title = tuple(words(facts.title or ""))
            match = Match(facts.pane, "title", facts.title or "")
            if len(title) == 1:
                index._add(title[0], match)
            elif 1 < len(title) <= MAX_TITLE_WORDS:
                index.titles.setdefault(title[0], []).append((title, match))
        index.named = {**index.keys, **dict.fromkeys(index.titles)}
        return index

    def _add(self, key: str, match: Match) -> None:
        found = self.keys.setdefault(key, [])
        if all(m.pane != match.pane for m in found):
            found.append(match)

    def decision(self, match: Match) -> Decision | None:
        """The direct decision ``match`` makes alone (None: its pane is no agent)."""
        known = self.direct.get(match)
        if known is not None:
            return known
        facts = self.panes[match.pane]
        if facts.agent:
            known = self.direct[match] = Decision(
                Route.DIRECT,
                f"one agent pane matches: {match.pane} by {match.kind} {match.value}",
                pane=match.pane,
                incarnation=facts.incarnation,
                revision=facts.revision,
                matched=(match,),
                candidates=(match.pane,),
            )
        return known

    def quick(self, pieces: list[str], lexicon: Lexicon = LEXICON) -> Decision | None:
        """The common case in a few set operations: every piece a known harmless word, and
        exactly one of them naming one agent pane (no phrase to read); None sends the
        request to ``scan``."""
        if not lexicon.harmless.issuperset(pieces) and not lexicon.all_harmless(pieces):
            return None
        named = self.named
        hits = named.keys() & pieces
        if len(hits) != 1:
            return None
        found = named[hits.pop()]
        if found is None or len(found) != 1:
            return None
        known = self.direct.get(found[0])
        return known if known is not None else self.decision(found[0])

    def scan(self, tokens: list[str]) -> tuple[str | None, list[Match]]:
        """One pass over the text's words: the first that keeps it from going direct (why),
        else every match of its words and phrases, one per pane (the first found)."""
        keys, titles = self.keys, self.titles
        out: dict[str, Match] = {}
        for start, token in enumerate(tokens):
            reason = _stop(token)
            if reason is not None:
                return reason, []
            found = keys.get(token)
            if found is not None:
                for m in found:
                    out.setdefault(m.pane, m)
            if any(mark in token for mark in _PR_MARKS):
                for key in pr_keys(token):
                    for m in keys.get(key, ()):
                        out.setdefault(m.pane, m)
            phrases = titles.get(token)
            if phrases is not None:
                for phrase, m in phrases:
                    if tuple(tokens[start : start + len(phrase)]) == phrase:
                        out.setdefault(m.pane, m)
        return None, list(out.values())


def _text_refusal(text: str, stripped: str) -> str | None:
    """Why the shape of ``text`` keeps it from going direct, or None."""
    if len(text) > MAX_DIRECT_CHARS:
        return f"longer than {MAX_DIRECT_CHARS} characters: control reads it"
    if "\n" in stripped:
        return "more than one line: control reads it"
    if ";" in text or "&&" in text:
        return "several steps: control sequences them"
    return None


def decide(text: object, index: RoutingIndex, lexicon: Lexicon = LEXICON) -> Decision:
    """Where a front end's request goes: one agent pane, or control (the default)."""
    if not isinstance(text, str) or not (stripped := text.strip()):
        raise BadRequest("a request needs some text", field="text")
    # the common case first: a text ``_text_refusal`` passes, named by one identity word
    if (
        len(text) <= MAX_DIRECT_CHARS
        and "\n" not in stripped
        and ";" not in text
        and "&&" not in text
    ):
        known = index.quick(pieces(text), lexicon)
        if known is not None:
            return known
    return _decide(text, stripped, index, lexicon)


def _decide(text: str, stripped: str, index: RoutingIndex, lexicon: Lexicon) -> Decision:
    refusal = _text_refusal(text, stripped)
    if refusal is None:
        runs = pieces(text)
        # pieces all known harmless are the pattern's words; else the pattern reads them
        tokens = runs if lexicon.harmless.issuperset(runs) else _WORD.findall(text.lower())
        refusal, matched = index.scan(tokens)
    if refusal is not None:
        return Decision(Route.CONTROL, refusal)
    if len(matched) == 1:
        known = index.decision(matched[0])
        if known is not None:
            return known
    agents = [m for m in matched if index.panes[m.pane].agent]
    if not agents:
        if matched:
            named = ", ".join(f"{m.pane} ({index.panes[m.pane].state})" for m in matched)
            return Decision(
                Route.CONTROL,
                f"only panes that are not agents match: {named}",
                matched=tuple(matched),
            )
        return Decision(Route.CONTROL, "no pane's workstream matches: control works it out")
    if len(agents) > 1:
        named = ", ".join(f"{m.pane} ({m.kind} {m.value})" for m in agents)
        return Decision(
            Route.CONTROL,
            f"ambiguous: {len(agents)} panes match ({named})",
            matched=tuple(agents),
            candidates=tuple(m.pane for m in agents),
        )
    (only,) = agents
    known = index.decision(only)
    assert known is not None  # an agent's match
    return known
