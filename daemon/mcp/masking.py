"""Masking secrets in text an agent is about to read (pane screens, titles).

Theory of operation
-------------------
Another pane's screen is text someone else typed or printed, and it can hold a key pasted a
minute ago. Before any of it leaves the daemon towards an agent, every line goes through the
plugins of ``detect-secrets`` (a maintained secret scanner: AWS, GitHub, GitLab, Slack,
Stripe, OpenAI, JWTs, private keys, basic-auth URLs, keyword assignments, high-entropy
strings, ...) with its default settings, analysing strings only (never its network
verification). Regex detectors mask their whole match; the others mask the secret value they
report. openbus's own launch tokens (``obk_...``) are masked too, whatever the scanner says.
Each masked span becomes ``[masked <kind>]``; the kinds found are reported beside the text so
the reader knows something was taken out.

Most text holds no secret, so each line is first tested cheaply: every detector regex (and
the keyword and high-entropy scanners' own patterns) is parsed once into its requirements:
sets of literals one of which any match must contain (``requirements_of``). A regex runs on a
line only when the lowercased line holds one of the needles of its first requirement and
meets the others that can rule out prose (the keyword detector, the dearest, needs one of its
keywords and a quote: a title that mentions "keys" skips it). Needles holding a shorter one
are looked for only when that one is there. In a line that is not ASCII (a TUI's screen
lines all are: borders, prompts, spinners) the four letters case-insensitive matching takes
for ASCII ones are read as those (``ASCII_KIN``, checked against ``re`` by the tests). The
answer is the same as running every detector.

The history index asks the masker once, in a pass after it writes a session, whether the
session's shown text holds anything to mask (``clean``), and keeps the answer with the masker's
``fingerprint``: a digest of every rule (detect-secrets' version and each plugin's settings and
patterns, openbus's own token pattern, this module's source). A search's hit kept clean under
the fingerprint of the masker now running is not masked again; under any other, or none, it is
(``mcp.observe``). A changed rule or detector changes the fingerprint, so no answer given under
the old rules is taken for one under the new.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detect_secrets.plugins import keyword
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.high_entropy_strings import HighEntropyStringsPlugin
from detect_secrets.settings import default_settings, get_plugins

# the standard library's own regex parser (what ``re.compile`` runs), read for needles only
_parser: Any = importlib.import_module("re._parser")
_c: Any = importlib.import_module("re._constants")

OPENBUS_TOKEN = re.compile(r"obk_[A-Za-z0-9_-]{16,}")
OPENBUS_KIND = "openbus token"
CHOSEN_KEPT = 4096  # needle sets whose detectors are kept worked out
# The letters past ASCII that a case-insensitive ``re`` pattern matches with an ASCII letter
# (its simple lowercase mapping, and its extra cases): dotted and dotless I, the Kelvin sign
# and the long s. A needle is looked for in a text with these read as the ASCII letter.
ASCII_KIN = {0x130: "i", 0x131: "i", 0x212A: "k", 0x17F: "s"}


@dataclass(frozen=True)
class Masked:
    text: str
    kinds: tuple[str, ...]  # sorted, distinct: what was masked


def _merge(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    spans.sort()
    merged: list[tuple[int, int, str]] = []
    for start, end, kind in spans:
        if merged and start <= merged[-1][1]:
            prev_start, prev_end, prev_kind = merged[-1]
            merged[-1] = (prev_start, max(prev_end, end), prev_kind)
        else:
            merged.append((start, end, kind))
    return merged


def _requirements(items: Any) -> list[frozenset[str]]:
    """Sets of lowercase ASCII literals, each of which (one of its literals) is in every match
    of the parsed sequence ``items``. A run of literal characters in the sequence is such a
    set (of one); so is a set of plain characters, and an alternation each of whose branches
    has one (the union of each branch's best); a group, or a repeat of at least one, adds its
    body's own. Zero-width items end a run, which only makes the run shorter, so it stays a
    requirement."""
    found: list[frozenset[str]] = []
    run = ""
    for op, arg in items:
        if op is _c.LITERAL and arg < 128:
            run += chr(arg).lower()
            continue
        if run:
            found.append(frozenset({run}))
            run = ""
        if op is _c.IN and arg and all(o is _c.LITERAL and c < 128 for o, c in arg):
            found.append(frozenset(chr(c).lower() for _, c in arg))  # one of a few characters
        elif op is _c.SUBPATTERN:
            found += _requirements(arg[-1])
        elif op is _c.ATOMIC_GROUP:
            found += _requirements(arg)
        elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT) and arg[0] >= 1:
            found += _requirements(arg[2])
        elif op is _c.BRANCH:
            branches = [_best(_requirements(branch)) for branch in arg[1]]
            if all(branches):
                found.append(frozenset().union(*(b for b in branches if b)))
    if run:
        found.append(frozenset({run}))
    return found


def _best(found: list[frozenset[str]]) -> frozenset[str] | None:
    """Of requirements, the one whose shortest needle is longest (then the smallest)."""
    return max(found, key=lambda needles: (min(map(len, needles)), -len(needles)), default=None)


def requirements_of(regex: re.Pattern[str]) -> list[frozenset[str]]:
    """Every requirement a text must meet (one of each set's literals, lowercased) for
    ``regex`` to match in it (``_requirements``); none when it cannot be parsed."""
    try:
        return _requirements(_parser.parse(regex.pattern, regex.flags))
    except (re.error, TypeError, ValueError, IndexError, AttributeError):
        return []


def needles_of(regex: re.Pattern[str]) -> frozenset[str] | None:
    """What a text must hold (lowercased, one of them) for ``regex`` to match in it: the
    cheapest of its requirements to look for first. None: no such test."""
    return _best(requirements_of(regex))


def _scanner_requirements(
    plugin: Any, keyword_requirements: list[frozenset[str]]
) -> list[frozenset[str]]:
    """The requirements of a detector that is not a regex one: the keyword detector's
    (``_keyword_requirements``); a high-entropy detector whose scan is its one quoted-string
    regex, that regex's; any other, none (it runs on every line)."""
    if isinstance(plugin, keyword.KeywordDetector):
        return keyword_requirements
    if (
        isinstance(plugin, HighEntropyStringsPlugin)
        and type(plugin).analyze_string is HighEntropyStringsPlugin.analyze_string
        and isinstance(getattr(plugin, "regex", None), re.Pattern)
    ):
        return requirements_of(plugin.regex)
    return []


def _keyword_requirements() -> list[frozenset[str]]:
    """What a line must hold for the keyword detector to find anything in it: each requirement
    that every pattern it applies to a plain string shares (today its keyword alternation,
    ``password``, ``secret``, ``api_key``, ..., and one of the quotes ``'"` ``, which each of
    them requires around the value). None when they share none, or a future detect-secrets
    keeps them elsewhere: the detector then runs on every line."""
    patterns = list(getattr(keyword, "QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP", ()))
    if not patterns:
        return []
    shared = set.intersection(*(set(requirements_of(p)) for p in patterns))
    return sorted(shared, key=sorted)


def _narrows(needles: frozenset[str]) -> bool:
    """Whether a requirement beyond a pattern's first can rule out ordinary prose: not when
    one of its needles is a space, or a lone letter or digit (nearly every line holds one)."""
    return not any(n.isspace() or (len(n) == 1 and n.isalnum()) for n in needles)


def _fingerprint(plugins: list[Any]) -> int | None:
    """A digest (63 bits, an SQLite integer) of everything masking's answers depend on:
    detect-secrets' version, each plugin's class, settings and patterns, openbus's token
    pattern and this module's source. None when any of it cannot be read: then no answer is
    kept for later (fail closed: everything is masked when read)."""
    digest = hashlib.sha256()
    try:
        digest.update(importlib.metadata.version("detect-secrets").encode())
        for plugin in plugins:
            kind = type(plugin)
            settings = json.dumps(plugin.json(), sort_keys=True, default=str)
            digest.update(f"\0{kind.__module__}.{kind.__qualname__}\0{settings}".encode())
            for regex in getattr(plugin, "denylist", ()):
                digest.update(f"\0{regex.pattern}\0{regex.flags}".encode())
        digest.update(f"\0{OPENBUS_TOKEN.pattern}\0".encode())
        digest.update(Path(__file__).read_bytes())
    except (
        OSError,
        ValueError,
        TypeError,
        AttributeError,
        importlib.metadata.PackageNotFoundError,
    ):
        return None
    return int.from_bytes(digest.digest()[:8], "big") >> 1


# (plugin, kind, its regexes for a regex detector else None): what runs on a line
Detectors = list[tuple[Any, str, list[re.Pattern[str]] | None]]


class Masker:
    def __init__(self) -> None:
        with default_settings():
            self._plugins: list[Any] = list(get_plugins())
        keyword_requirements = _keyword_requirements()
        self._detectors: Detectors = []
        # (detector, pattern) positions: those no text can skip, those each needle admits, and
        # of those admitted the further requirements each must meet (one needle of each set)
        self._always: set[tuple[int, int]] = set()
        self._admits: dict[str, set[tuple[int, int]]] = {}
        self._also: dict[tuple[int, int], list[frozenset[str]]] = {}
        for d, plugin in enumerate(self._plugins):
            kind = str(getattr(plugin, "secret_type", type(plugin).__name__))
            if isinstance(plugin, RegexBasedDetector):
                regexes = list(plugin.denylist)
                self._detectors.append((plugin, kind, regexes))
                tests = [requirements_of(regex) for regex in regexes]
            else:
                self._detectors.append((plugin, kind, None))
                tests = [_scanner_requirements(plugin, keyword_requirements)]
            for p, requirements in enumerate(tests):
                needles = _best(requirements)
                if needles is None:
                    self._always.add((d, p))
                    continue
                for needle in needles:
                    self._admits.setdefault(needle, set()).add((d, p))
                also = [r for r in requirements if r != needles and _narrows(r)]
                if also:
                    self._also[(d, p)] = also
        needles_looked_for = set(self._admits).union(*(n for a in self._also.values() for n in a))
        # needles holding no other are tested first; one holding another only when that one is
        # in the text (a text without "pass" holds no "password")
        self._roots: dict[str, list[str]] = {}
        for needle in sorted(needles_looked_for, key=len):
            root = next((r for r in self._roots if r in needle), None)
            if root is None:
                self._roots[needle] = []
            else:
                self._roots[root].append(needle)
        self._chosen: dict[tuple[str, ...], Detectors] = {}  # needles found -> _admitted
        self.fingerprint = _fingerprint(self._plugins)

    def clean(self, texts: Iterable[str]) -> bool:
        """Whether masking would leave every one of ``texts`` as it is (nothing found)."""
        return not any(self.mask(text).kinds for text in texts)

    def _active(self, text: str) -> Detectors:
        """The detectors (and of theirs the regexes) that can find anything in ``text``. In a
        text that is not ASCII, the four letters that case-insensitive matching takes for
        ASCII ones are read as those (``ASCII_KIN``). The detectors a set of needles admits
        are worked out once per set (``_chosen``): most texts hold one of a few such sets."""
        low = text.lower() if text.isascii() else text.translate(ASCII_KIN).lower()
        found: list[str] = []
        for root, longer in self._roots.items():
            if root in low:
                found.append(root)
                found.extend(needle for needle in longer if needle in low)
        key = tuple(found)
        chosen = self._chosen.get(key)
        if chosen is None:
            if len(self._chosen) >= CHOSEN_KEPT:
                self._chosen.clear()
            chosen = self._chosen[key] = self._admitted(found)
        return chosen

    def _admitted(self, needles: Iterable[str]) -> Detectors:
        """The detectors (and of theirs the regexes) that a text holding ``needles`` (and no
        other needle) may match: those no text skips, and those a needle admits whose further
        requirements the needles meet."""
        held = set(needles)
        keep = set(self._always)
        for needle in held:
            keep |= self._admits.get(needle, set())
        keep = {at for at in keep if all(held & also for also in self._also.get(at, ()))}
        out: Detectors = []
        for d, (plugin, kind, regexes) in enumerate(self._detectors):
            if regexes is None:
                if (d, 0) in keep:
                    out.append((plugin, kind, None))
                continue
            kept = [regex for p, regex in enumerate(regexes) if (d, p) in keep]
            if kept:
                out.append((plugin, kind, kept))
        return out

    @staticmethod
    def _spans(line: str, detectors: Detectors) -> list[tuple[int, int, str]]:
        spans = [(m.start(), m.end(), OPENBUS_KIND) for m in OPENBUS_TOKEN.finditer(line)]
        for plugin, kind, regexes in detectors:
            if regexes is not None:
                for regex in regexes:
                    spans.extend(
                        (m.start(), m.end(), kind)
                        for m in regex.finditer(line)
                        if m.end() > m.start()
                    )
                continue
            for value in plugin.analyze_string(line):
                if not value:
                    continue
                start = line.find(value)
                while start != -1:
                    spans.append((start, start + len(value), kind))
                    start = line.find(value, start + len(value))
        return spans

    def mask_line(self, line: str, detectors: Detectors | None = None) -> tuple[str, set[str]]:
        spans = self._spans(line, self._active(line) if detectors is None else detectors)
        if not spans:
            return line, set()
        out: list[str] = []
        cursor = 0
        kinds: set[str] = set()
        for start, end, kind in _merge(spans):
            out.append(line[cursor:start])
            out.append(f"[masked {kind}]")
            kinds.add(kind)
            cursor = end
        out.append(line[cursor:])
        return "".join(out), kinds

    def mask(self, text: str) -> Masked:
        kinds: set[str] = set()
        lines = []
        for line in text.split("\n"):
            masked, found = self.mask_line(line)
            lines.append(masked)
            kinds |= found
        return Masked("\n".join(lines), tuple(sorted(kinds)))

    def mask_lines(self, lines: Iterable[str]) -> Masked:
        return self.mask("\n".join(lines))


@functools.cache
def masker() -> Masker:
    """The process's one masker (every detector's patterns parsed once), shared by what
    masks: the Observe tools, the directory's masked pane reads and the history index's
    screening."""
    return Masker()
