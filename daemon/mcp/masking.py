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


class Masker:
    def __init__(self) -> None:
        with default_settings():
            self._plugins: list[Any] = list(get_plugins())

    def _spans(self, line: str) -> list[tuple[int, int, str]]:
        spans = [(m.start(), m.end(), OPENBUS_KIND) for m in OPENBUS_TOKEN.finditer(line)]
        for plugin in self._plugins:
            kind = str(getattr(plugin, "secret_type", type(plugin).__name__))
            if isinstance(plugin, RegexBasedDetector):
                for regex in plugin.denylist:
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
