"""Transcript parsers: pure functions from a transcript's lines to a ``ParsedSession``.

Theory of operation
-------------------
Each parser reads the JSON lines of one transcript file in order and keeps only routing
facts: the session's id, cwd, git branches, PR links, a title, the prompts that started or
steered it, first and last timestamps, and whether it is a subagent. Lines that are not JSON
objects are skipped (a transcript being written may end in half a line).

Claude Code (observed on 2.1.197): every conversational line carries ``sessionId``, ``cwd``,
``gitBranch`` (``HEAD`` when detached: not a branch), ``timestamp`` and ``isSidechain``.
The human's prompts are ``type: user`` lines whose ``message.content`` is a string or text
blocks; tool results, meta lines and slash-command echoes are not prompts. Titles come from
``custom-title`` / ``ai-title`` / ``summary`` lines when the harness wrote them, else from
the first prompt. A subagent transcript (``<session>/subagents/agent-<id>.jsonl``, older
``agent-<id>.jsonl``) has ``isSidechain: true`` and an ``agentId``; its ``sessionId`` is the
parent's, and its first user message is the task its caller sent.

Codex (observed on 0.171.0): ``session_meta`` names the thread id, cwd, source (``exec`` for
headless runs; a ``subagent`` source for spawned threads) and, on versions that record it,
``git`` (branch, repository URL). The prompts are ``event_msg`` items of type
``UserMessage`` (older: ``user_message`` events); when a rollout has none, the user
``response_item`` messages that are not harness-injected context. The thread name comes
from ``session_index.jsonl``.

omp (observed on 18.2.0 and 18.2.3): ``<agent dir>/sessions/<cwd with / as ->/<time>_<id>.jsonl``
opens with a ``title`` line (rewritten in place when the session gets a title) and a
``session`` line (``id``, ``cwd``, ``timestamp``); ``message`` lines carry ``message.role`` and
text blocks, the human's prompts being ``role: user`` with ``attribution: user``. A session
line naming a ``parentSession`` marks a subagent (not observed: omp's tasks were not run here).
omp records no git branch; the branch comes from the repository lookup.

Gemini CLI (observed on 0.59.0 and 0.61.0): ``<home>/.gemini/tmp/<project>/chats/
session-<time>-<first 8 of the id>.jsonl`` opens with a header line (``sessionId``,
``startTime``, ``lastUpdated``, ``kind``: ``main`` or a subagent's); then message lines
(``type``: ``user`` or ``gemini``, ``content`` a string or ``text`` parts) and ``$set`` lines
updating the header (the context Gemini CLI injects at start is such a ``$set`` of messages,
not a prompt). The session's cwd is the project's ``.project_root`` file beside ``chats/``,
which the caller reads. No git branch is recorded.

OpenCode (observed on 1.18.28 and 1.18.33): one database holds every session (``opencode``
reads it); a session is its row (``id``, ``parent_id`` for a child session a task started,
``directory``, ``title``, times in epoch milliseconds), its messages (``role``, ``time``) and
their ``type: text`` parts. The human's prompts are the user messages' text parts that are not
``synthetic`` (OpenCode's own additions); ``opencode run`` records a prompt of several words in
double quotes, as it sent it. A title still OpenCode's placeholder (``New session - <time>``,
``Child session - <time>``) is no title. No git branch is recorded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from openbus.daemon.history.model import (
    MAX_PROMPT_CHARS,
    MAX_PROMPTS,
    MAX_TITLE_CHARS,
    ParsedSession,
    parse_time,
)
from openbus.kernel import json_text

PR_PATTERN = re.compile(
    r"https?://(?:www\.)?github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/pull/\d+"
    r"|https?://[A-Za-z0-9.-]+(?::\d+)?/(?:[A-Za-z0-9_.-]+/)+-/merge_requests/\d+"
)

_NOT_PROMPT_PREFIXES = (
    "<command-name>",
    "<command-message>",
    "<command-args>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
    "<system-reminder>",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
    "[Request interrupted",
    "Caveat: The messages below",
)

_CODEX_CONTEXT_PREFIXES = (
    "<environment_context>",
    "<user_instructions>",
    "<permissions instructions>",
    "<user_shell_command>",
    "<turn_aborted>",
    "# AGENTS.md instructions",
)


_loads = orjson.loads
_LoadError = orjson.JSONDecodeError


def _records(lines: Iterable[str | bytes]) -> Iterable[dict[str, Any]]:
    """Each line that is one JSON object, as that object. orjson reads a line (strict JSON, in
    compiled code, a few times faster than ``json``); a line it refuses is read as
    ``json.loads`` reads it, which takes more (a byte order mark, a lone surrogate escape,
    NaN, a UTF-16 line): so every line reads as ``json.loads`` reads it, but for numbers past
    64 bits, which come back as floats (``parse_time`` reads every number as a float)."""
    for line in lines:
        if not line:
            continue
        try:
            value = _loads(line)
        except _LoadError:
            value = _lenient(line)
        if isinstance(value, dict):
            yield value


def _lenient(text: object) -> object:
    """Text as ``json.loads`` reads it; None for what it cannot read: no text, not JSON, not
    UTF-8, or nested deeper than the decoder goes (not a reason to stop reading)."""
    if not isinstance(text, (str, bytes)):
        return None
    try:
        return json_text.loads(text)
    except ValueError:  # UnicodeDecodeError and TooDeep are ones
        return None


def split_lines(data: bytes) -> list[bytes]:
    """A transcript's lines as ``_records`` reads them: its bytes cut at each newline."""
    return data.split(b"\n")


def find_prs(text: str) -> list[str]:
    if "://" not in text:  # every PR link has one
        return []
    return [m.group(0).rstrip(".") for m in PR_PATTERN.finditer(text)]


def _clean(text: str) -> str:
    return text.replace("\x00", "").strip()


def cap_prompts(prompts: list[str]) -> tuple[str, ...]:
    """At most ``MAX_PROMPTS`` (the first and last half), each at most ``MAX_PROMPT_CHARS``."""
    if len(prompts) > MAX_PROMPTS:
        half = MAX_PROMPTS // 2
        prompts = prompts[:half] + prompts[-half:]
    if max(map(len, prompts), default=0) <= MAX_PROMPT_CHARS:
        return tuple(prompts)
    return tuple(
        p if len(p) <= MAX_PROMPT_CHARS else p[: MAX_PROMPT_CHARS - 1] + "…" for p in prompts
    )


def make_title(explicit: str | None, prompts: Iterable[str]) -> str | None:
    if explicit and explicit.strip():
        text = explicit
    else:
        text = next((p for p in prompts if p.strip()), "")
    line = " ".join(text.split())
    if not line:
        return None
    return line if len(line) <= MAX_TITLE_CHARS else line[: MAX_TITLE_CHARS - 1] + "…"


# Times all written in one of these fixed-width UTC forms (Claude Code's, Codex's) order as
# their text does: the text of a transcript's times joined by newlines, one time a line.
_MS_TIME = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z"
_SECOND_TIME = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z"
_MS_TIMES = re.compile(rf"(?:{_MS_TIME}\n)*{_MS_TIME}").fullmatch
_SECOND_TIMES = re.compile(rf"(?:{_SECOND_TIME}\n)*{_SECOND_TIME}").fullmatch


def time_span(values: list[object]) -> tuple[float | None, float | None]:
    """The earliest and latest of ``values`` as ``parse_time`` reads them (None: none reads).
    When they are all strings of one of the forms above, only the least and the greatest are
    read: a string of the form that is no time (a 13th month) reads as none, so it changes
    the span only when it is the least or the greatest, and then every value is read."""
    try:
        text = "\n".join(values)  # type: ignore[arg-type]  # TypeError: not all strings
    except TypeError:
        text = ""
    if text and (_MS_TIMES(text) or _SECOND_TIMES(text)):
        least, greatest = min(values), max(values)  # type: ignore[type-var]  # all str
        first, last = parse_time(least), parse_time(greatest)
        if first is not None and last is not None:
            return first, last
    first = last = None
    for value in values:
        ts = parse_time(value)
        if ts is None:
            continue
        if first is None or ts < first:
            first = ts
        if last is None or ts > last:
            last = ts
    return first, last


class _Acc:
    """Accumulates the facts every parser shares, and makes the session of them."""

    def __init__(self) -> None:
        self.branches: list[str] = []
        self.prs: list[str] = []
        self.prompts: list[str] = []
        self.times: list[object] = []  # every time value seen, in order (``time_span``)
        self.cwd: str | None = None

    def time(self, value: object) -> None:
        if value is not None:
            self.times.append(value)

    def branch(self, value: object) -> None:
        if isinstance(value, str) and value and value != "HEAD" and value not in self.branches:
            self.branches.append(value)

    def text(self, value: str) -> None:
        for pr in find_prs(value):
            if pr not in self.prs:
                self.prs.append(pr)

    def prompt(self, value: str) -> None:
        text = _clean(value)
        if text:
            self.prompts.append(text)
            self.text(text)

    def session(
        self,
        harness: str,
        session_id: str,
        *,
        title: str | None,
        parent: str | None = None,
        subagent: bool | None = None,
        origin: str | None = None,
    ) -> ParsedSession:
        """The session read: the title given, else the first prompt; a subagent when it has a
        parent, unless the transcript says otherwise."""
        prompts = cap_prompts(self.prompts)
        first, last = time_span(self.times)
        return ParsedSession(
            harness=harness,
            session_id=session_id,
            cwd=self.cwd,
            branches=tuple(self.branches),
            prs=tuple(self.prs),
            title=make_title(title, prompts),
            prompts=prompts,
            started=first,
            last_active=last,
            subagent=bool(parent) if subagent is None else subagent,
            parent_session_id=parent or None,
            origin=origin,
        )


# --------------------------------------------------------------------------- Claude Code


def _claude_prompt(rec: Mapping[str, Any]) -> str | None:
    if rec.get("isMeta") or rec.get("isCompactSummary") or rec.get("isVisibleInTranscriptOnly"):
        return None
    if "toolUseResult" in rec:
        return None
    message = rec.get("message")
    if not isinstance(message, dict) or message.get("role", "user") != "user":
        return None
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts: list[str] = []
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_result":
                return None
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
        text = "\n".join(parts)
    else:
        return None
    stripped = text.lstrip()
    if not stripped or stripped.startswith(_NOT_PROMPT_PREFIXES):
        return None
    return text


def _claude_assistant_text(rec: Mapping[str, Any]) -> Iterable[str]:
    message = rec.get("message")
    if not isinstance(message, dict):
        return
    content = message.get("content")
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                text = block.get("text")
                if isinstance(text, str):
                    yield text


# a tuple, not a set: a line's "type" may be any JSON value, a list too
_CLAUDE_CONVERSATION = ("user", "assistant", "system", "attachment", "progress")
_NOTHING = object()


def claude_file_session_id(name: str) -> tuple[str, bool]:
    """The session id a Claude transcript's file name gives, and whether it is a subagent's."""
    stem = name[:-6] if name.endswith(".jsonl") else name
    if stem.startswith("agent-"):
        return stem[len("agent-") :], True
    return stem, False


def parse_claude(lines: Iterable[str | bytes], *, file_name: str) -> ParsedSession | None:
    """One Claude Code transcript file (top-level session or subagent) as a ParsedSession."""
    file_id, subagent_by_name = claude_file_session_id(file_name)
    acc = _Acc()
    session_id: str | None = None
    agent_id: str | None = None
    sidechain = False
    custom_title: str | None = None
    ai_title: str | None = None
    summary: str | None = None
    seen_conversation = False
    last_branch: object = _NOTHING  # the branch of the line before (most lines repeat it)
    times = acc.times.append
    prompts: list[tuple[object, str]] = []  # (timestamp, prompt), put in time order below
    for rec in _records(lines):
        get = rec.get
        kind = get("type")
        if kind not in _CLAUDE_CONVERSATION:
            if kind == "custom-title" and isinstance(get("customTitle"), str):
                custom_title = rec["customTitle"]
            elif kind == "ai-title":
                value = get("aiTitle") or get("title")
                if isinstance(value, str):
                    ai_title = value
            elif kind == "summary" and isinstance(get("summary"), str):
                summary = rec["summary"]
            continue
        seen_conversation = True
        if session_id is None and isinstance(get("sessionId"), str):
            session_id = rec["sessionId"]
        if not sidechain and get("isSidechain") is True:
            sidechain = True
        if agent_id is None and isinstance(get("agentId"), str) and rec["agentId"]:
            agent_id = rec["agentId"]
        cwd = get("cwd")
        if cwd and isinstance(cwd, str):
            acc.cwd = cwd
        branch = get("gitBranch")
        if branch != last_branch:
            acc.branch(branch)
            last_branch = branch
        stamp = get("timestamp")
        if stamp is not None:  # as ``acc.time``
            times(stamp)
        if kind == "user":
            prompt = None if "toolUseResult" in rec else _claude_prompt(rec)  # a tool's result
            if prompt is not None:
                prompts.append((stamp, prompt))
        elif kind == "assistant":
            for text in _claude_assistant_text(rec):
                acc.text(text)
    if not seen_conversation:
        return None
    # Claude Code can append a turn's records before the previous turn's (a prompt sent as
    # the turn before ends): its ISO timestamps (one format) give the order the prompts came
    if all(isinstance(at, str) for at, _ in prompts):
        prompts.sort(key=lambda item: str(item[0]))
    for _, prompt in prompts:
        acc.prompt(prompt)
    subagent = subagent_by_name or (sidechain and agent_id is not None)
    if subagent:
        own_id = agent_id or file_id
        parent = session_id if session_id != own_id else None
    else:
        own_id = file_id or session_id or ""
        parent = None
    if not own_id:
        return None
    return acc.session(
        "claude",
        own_id,
        title=custom_title or ai_title or summary,
        parent=parent,
        subagent=subagent,
    )


# --------------------------------------------------------------------------- Codex


def parse_codex_thread_names(lines: Iterable[str | bytes]) -> dict[str, str]:
    """``session_index.jsonl``: thread id to its latest thread name."""
    names: dict[str, str] = {}
    for rec in _records(lines):
        thread = rec.get("id")
        name = rec.get("thread_name")
        if isinstance(thread, str) and isinstance(name, str) and name.strip():
            names[thread] = name
    return names


def _codex_texts(content: object, kinds: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") in kinds:
                text = block.get("text")
                if isinstance(text, str):
                    out.append(text)
    return out


def _codex_subagent(meta: Mapping[str, Any]) -> tuple[bool, str | None]:
    source = meta.get("source")
    if isinstance(source, dict) and "subagent" in source:
        parent: str | None = None
        sub = source.get("subagent")
        if isinstance(sub, dict):
            spawn = sub.get("thread_spawn")
            if isinstance(spawn, dict) and isinstance(spawn.get("parent_thread_id"), str):
                parent = spawn["parent_thread_id"]
        return True, parent
    if meta.get("thread_source") in ("subagent", "spawned"):
        parent_id = meta.get("parent_thread_id")
        return True, parent_id if isinstance(parent_id, str) else None
    return False, None


def parse_codex(
    lines: Iterable[str | bytes], *, thread_names: Mapping[str, str] | None = None
) -> ParsedSession | None:
    """One Codex rollout file as a ParsedSession (None without a ``session_meta`` line)."""
    acc = _Acc()
    meta: dict[str, Any] | None = None
    event_prompts: list[str] = []
    item_prompts: list[str] = []
    origin: str | None = None
    for rec in _records(lines):
        kind = rec.get("type")
        payload = rec.get("payload")
        acc.time(rec.get("timestamp"))
        if not isinstance(payload, dict):
            continue
        if kind == "session_meta":
            if meta is None:
                meta = payload
                acc.time(payload.get("timestamp"))
            if isinstance(payload.get("cwd"), str):
                acc.cwd = payload["cwd"]
            git = payload.get("git")
            if isinstance(git, dict):
                acc.branch(git.get("branch"))
                if isinstance(git.get("repository_url"), str):
                    origin = git["repository_url"]
        elif kind == "turn_context":
            if isinstance(payload.get("cwd"), str):
                acc.cwd = payload["cwd"]
            git = payload.get("git")
            if isinstance(git, dict):
                acc.branch(git.get("branch"))
        elif kind == "event_msg":
            ptype = payload.get("type")
            if ptype == "user_message" and isinstance(payload.get("message"), str):
                event_prompts.append(payload["message"])
            elif ptype == "agent_message" and isinstance(payload.get("message"), str):
                acc.text(payload["message"])
            elif ptype == "item_completed":
                item = payload.get("item")
                if isinstance(item, dict) and item.get("type") == "UserMessage":
                    text = "\n".join(_codex_texts(item.get("content"), ("text",)))
                    event_prompts.append(text)
        elif kind == "response_item" and payload.get("type") == "message":
            role = payload.get("role")
            if role == "user":
                text = "\n".join(_codex_texts(payload.get("content"), ("input_text",)))
                if not text.lstrip().startswith(_CODEX_CONTEXT_PREFIXES):
                    item_prompts.append(text)
            elif role == "assistant":
                for text in _codex_texts(payload.get("content"), ("output_text",)):
                    acc.text(text)
    if meta is None:
        return None
    session_id = meta.get("id") or meta.get("session_id")
    if not isinstance(session_id, str) or not session_id:
        return None
    for prompt in event_prompts or item_prompts:
        acc.prompt(prompt)
    subagent, parent = _codex_subagent(meta)
    name = (thread_names or {}).get(session_id)
    return acc.session(
        "codex", session_id, title=name, parent=parent, subagent=subagent, origin=origin
    )


# --------------------------------------------------------------------------- omp


def _text_parts(content: object) -> list[str]:
    """The text of a message's content: a string, or its text blocks (omp's ``type: text``,
    Gemini CLI's untyped ``{"text": ...}`` parts)."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [
        block["text"]
        for block in content
        if isinstance(block, dict)
        and block.get("type", "text") == "text"
        and isinstance(block.get("text"), str)
    ]


def parse_omp(lines: Iterable[str | bytes]) -> ParsedSession | None:
    """One omp session file as a ParsedSession (None without a ``session`` line)."""
    acc = _Acc()
    session: dict[str, Any] | None = None
    title: str | None = None
    for rec in _records(lines):
        kind = rec.get("type")
        acc.time(rec.get("timestamp"))
        if kind == "title" and isinstance(rec.get("title"), str):
            title = rec["title"].strip() or title
        elif kind == "session" and session is None:
            session = rec
            if isinstance(rec.get("cwd"), str):
                acc.cwd = rec["cwd"]
        elif kind == "message" and isinstance(rec.get("message"), dict):
            message = rec["message"]
            texts = _text_parts(message.get("content"))
            if message.get("role") == "user" and message.get("attribution", "user") == "user":
                acc.prompt("\n".join(texts))
            elif message.get("role") == "assistant":
                for text in texts:
                    acc.text(text)
    if session is None:
        return None
    session_id = session.get("id")
    if not isinstance(session_id, str) or not session_id:
        return None
    parent = session.get("parentSession")
    return acc.session(
        "omp", session_id, title=title, parent=parent if isinstance(parent, str) else None
    )


# --------------------------------------------------------------------------- Gemini CLI


def parse_gemini(lines: Iterable[str | bytes], *, cwd: str | None) -> ParsedSession | None:
    """One Gemini CLI chat file as a ParsedSession (None without a header line)."""
    acc = _Acc()
    acc.cwd = cwd
    header: dict[str, Any] | None = None
    summary: str | None = None
    for rec in _records(lines):
        if header is None:
            if not isinstance(rec.get("sessionId"), str):
                return None
            header = rec
            acc.time(rec.get("startTime"))
            acc.time(rec.get("lastUpdated"))
            continue
        update = rec.get("$set")
        if isinstance(update, dict):
            acc.time(update.get("lastUpdated"))
            if isinstance(update.get("summary"), str):
                summary = update["summary"].strip() or summary
            continue
        acc.time(rec.get("timestamp"))
        texts = _text_parts(rec.get("content"))
        if rec.get("type") == "user":
            acc.prompt("\n".join(texts))
        elif rec.get("type") == "gemini":
            for text in texts:
                acc.text(text)
    if header is None or not header["sessionId"]:
        return None
    kind = header.get("kind")
    return acc.session(
        "gemini",
        header["sessionId"],
        title=summary,
        subagent=isinstance(kind, str) and kind != "main",
    )


# --------------------------------------------------------------------------- OpenCode

_OPENCODE_PLACEHOLDER = re.compile(r"^(New|Child) session - \d{4}-\d\d-\d\dT")


def _json_object(text: object) -> dict[str, Any]:
    value = _lenient(text)
    return value if isinstance(value, dict) else {}


def parse_opencode(
    session: Mapping[str, Any],
    messages: Iterable[tuple[str, str]],
    parts: Iterable[tuple[str, str]],
) -> ParsedSession | None:
    """One OpenCode session (its row, its messages' and text parts' JSON) as a ParsedSession
    (None without an id)."""
    session_id = session.get("id")
    if not isinstance(session_id, str) or not session_id:
        return None
    acc = _Acc()
    directory = session.get("directory")
    acc.cwd = directory if isinstance(directory, str) and directory else None
    acc.time(session.get("time_created"))
    acc.time(session.get("time_updated"))
    roles: dict[str, str] = {}
    for message_id, data in messages:
        message = _json_object(data)
        role = message.get("role")
        if isinstance(role, str):
            roles[message_id] = role
        times = message.get("time")
        if isinstance(times, dict):
            acc.time(times.get("created"))
    prompt_of: dict[str, list[str]] = {}
    for message_id, data in parts:
        part = _json_object(data)
        text = part.get("text")
        if part.get("type") != "text" or not isinstance(text, str):
            continue
        role = roles.get(message_id)
        if role == "user" and not part.get("synthetic") and not part.get("ignored"):
            prompt_of.setdefault(message_id, []).append(text)
        elif role == "assistant":
            acc.text(text)
    for texts in prompt_of.values():  # in the order their first parts came
        acc.prompt("\n".join(texts))
    title = session.get("title")
    if not isinstance(title, str) or _OPENCODE_PLACEHOLDER.match(title):
        title = None
    parent = session.get("parent_id")
    return acc.session(
        "opencode", session_id, title=title, parent=parent if isinstance(parent, str) else None
    )


def resume_argv(harness: str, session_id: str, *, subagent: bool) -> tuple[str, ...] | None:
    """The exact command that resumes a top-level session; subagents have none."""
    if subagent:
        return None
    if harness == "claude":
        return ("claude", "--resume", session_id)
    if harness == "codex":
        return ("codex", "resume", session_id)
    if harness == "omp":
        return ("omp", "--resume", session_id)
    if harness == "gemini":  # run in the session's cwd: Gemini CLI looks in that project
        return ("gemini", "--resume", session_id)
    if harness == "opencode":
        return ("opencode", "--session", session_id)
    return None
