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
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from detect_secrets.plugins import keyword
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.settings import default_settings, get_plugins

OPENBUS_TOKEN = re.compile(r"obk_[A-Za-z0-9_-]{16,}")
OPENBUS_KIND = "openbus token"


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


def _keyword_prefilter() -> re.Pattern[str] | None:
    """A cheap test a line must pass before the keyword detector can find anything in it.

    Every pattern the keyword detector applies to a plain string has its keyword alternation
    (``password``, ``secret``, ``api_key``, ...) as a required piece, so a line in which that
    alternation (case-insensitively) matches nowhere cannot yield a finding. If a future
    detect-secrets builds its patterns otherwise, there is no prefilter (None) and the
    detector runs on every line as before."""
    needle = getattr(keyword, "DENYLIST_REGEX", None)
    patterns = getattr(keyword, "QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP", None)
    if not isinstance(needle, str) or not patterns:
        return None
    if not all(needle in getattr(p, "pattern", "") for p in patterns):
        return None
    return re.compile(needle, re.IGNORECASE)


_SCOPED_FLAGS = ((re.IGNORECASE, "i"), (re.MULTILINE, "m"), (re.DOTALL, "s"), (re.VERBOSE, "x"))
_NUMBERED_REFERENCE = re.compile(r"\\[1-9]|\(\?P=|\(\?\(")


def _any_of(regexes: Iterable[re.Pattern[str]]) -> re.Pattern[str] | None:
    """One pattern matching wherever any of ``regexes`` matches (each keeps its own flags).

    Used only as a test before running the detectors one by one: a line it finds nothing in
    holds no match of any of them (a match of one is a match of the alternation). None when
    the patterns cannot be combined faithfully (back references, flags that cannot be
    scoped, a pattern that does not compile inside a group)."""
    parts = []
    for regex in regexes:
        text = regex.pattern
        flags = regex.flags & ~re.UNICODE
        if not isinstance(text, str) or _NUMBERED_REFERENCE.search(text):
            return None
        letters = ""
        for flag, letter in _SCOPED_FLAGS:
            if flags & flag:
                letters += letter
                flags &= ~flag
        if flags:
            return None
        tail = "\n" if "x" in letters else ""  # a verbose pattern may end in a # comment
        parts.append(f"(?{letters}:{text}{tail})" if letters else f"(?:{text})")
    try:
        return re.compile("|".join(parts))
    except re.error:
        return None


class Masker:
    def __init__(self) -> None:
        with default_settings():
            self._plugins: list[Any] = list(get_plugins())
        keyword_gate = _keyword_prefilter()
        # (plugin, kind, regexes for a regex detector else None, a prefilter or None)
        self._detectors: list[tuple[Any, str, list[Any] | None, re.Pattern[str] | None]] = []
        for plugin in self._plugins:
            kind = str(getattr(plugin, "secret_type", type(plugin).__name__))
            if isinstance(plugin, RegexBasedDetector):
                self._detectors.append((plugin, kind, list(plugin.denylist), None))
            else:
                gate = keyword_gate if isinstance(plugin, keyword.KeywordDetector) else None
                self._detectors.append((plugin, kind, None, gate))
        self._regex_gate = _any_of(r for _, _, rs, _ in self._detectors for r in rs or ())

    def _spans(self, line: str) -> list[tuple[int, int, str]]:
        spans = [(m.start(), m.end(), OPENBUS_KIND) for m in OPENBUS_TOKEN.finditer(line)]
        regex_hit = self._regex_gate is None or self._regex_gate.search(line) is not None
        for plugin, kind, regexes, gate in self._detectors:
            if regexes is not None:
                if not regex_hit:
                    continue
                for regex in regexes:
                    spans.extend(
                        (m.start(), m.end(), kind)
                        for m in regex.finditer(line)
                        if m.end() > m.start()
                    )
                continue
            if gate is not None and gate.search(line) is None:
                continue
            for value in plugin.analyze_string(line):
                if not value:
                    continue
                start = line.find(value)
                while start != -1:
                    spans.append((start, start + len(value), kind))
                    start = line.find(value, start + len(value))
        return spans

    def mask_line(self, line: str) -> tuple[str, set[str]]:
        spans = self._spans(line)
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
