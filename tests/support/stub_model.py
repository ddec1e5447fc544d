"""A scripted model server for driving the real Claude Code and Codex CLIs in tests.

Theory of operation
-------------------
``StubModel`` is a real threaded HTTP server on 127.0.0.1 speaking just enough of two wire
protocols for the real harnesses to run full turns against it:

* the Anthropic Messages API (``HEAD /``, ``POST /v1/messages``, streamed as SSE), which is
  what Claude Code calls, including its JSON "title" side call (``output_config.format`` with a
  ``json_schema``; answered with JSON built from the schema, never consuming a script);
* the OpenAI Responses API (``POST /v1/responses``, streamed as SSE), which is what Codex calls;
* the OpenAI Chat Completions API (``POST /v1/chat/completions``, streamed as SSE chunks ending
  ``[DONE]``), what OpenCode (an ``@ai-sdk/openai-compatible`` provider) and omp (an
  ``openai-completions`` model) call; a request without tools whose system text asks for a
  title is a title side call;
* Gemini's ``POST /v1beta/models/MODEL:streamGenerateContent?alt=sse`` (and the unstreamed
  ``:generateContent`` side calls, answered from their ``responseJsonSchema`` /
  ``responseSchema`` without consuming a script, plus ``:countTokens``), what Gemini CLI calls
  when ``GOOGLE_GEMINI_BASE_URL`` points here.

It also serves a minimal MCP endpoint (``/mcp``, streamable HTTP, JSON responses only) with a
few test tools, so a test can make a harness call an MCP tool without the real daemon.

Every model request starts or continues a *turn*. A request whose last input is a tool result
for a call this server issued continues the turn that issued it; any other request starts a
new turn and takes the first queued ``Script`` whose ``match`` text occurs in the latest user
prompt (and whose ``api`` fits). A script is a list of steps run in order:

* ``hold()``: keep the response stream open (after ``message_start`` / ``response.created``)
  until the test calls ``Script.release()``; the harness looks busy meanwhile;
* ``reply(text)``: answer with text and end the turn (``{tool_result}`` in the text is replaced
  by the text of the last tool result of this turn, ``{prompt}`` by the user prompt);
* ``call_tool(name, args)``: answer with a tool call and wait for the harness to send the
  result; the next request of the turn runs the following steps.

Without a script, a turn answers ``ok``. Every request is recorded (``requests``) so a test can
assert which tools a harness offered and read the tool results it sent back.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import pytest

Api = Literal["anthropic", "openai", "chat", "gemini"]
Kind = Literal["turn", "title", "mcp", "other"]

ANTHROPIC_MODEL = "claude-opus-4-8"
DEFAULT_REPLY = "ok"
HOLD_LIMIT_SECONDS = 120.0  # a forgotten release() must not hang a test run forever
PING_INTERVAL_SECONDS = 2.0
DEFAULT_INPUT_TOKENS = 10  # the input tokens a response reports, unless its script says


def _input_tokens(script: Script | None) -> int:
    """The input tokens the next response reports: its script's next value (the last one
    again once they run out)."""
    if script is None:
        return DEFAULT_INPUT_TOKENS
    with script._usage_lock:
        index = min(script.responses, len(script.input_tokens) - 1)
        script.responses += 1
    return script.input_tokens[index]


# --------------------------------------------------------------------------- script steps


@dataclass(frozen=True)
class Reply:
    text: str


@dataclass(frozen=True)
class CallTool:
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Hold:
    pass


Step = Reply | CallTool | Hold


def reply(text: str) -> Reply:
    """Answer with ``text`` and end the turn."""
    return Reply(text)


def call_tool(name: str, args: dict[str, Any] | None = None) -> CallTool:
    """Call a tool. ``name`` is the model-facing name: ``mcp__SERVER__TOOL`` for an MCP tool on
    either harness (split into Codex's namespace ``mcp__SERVER`` + function ``TOOL``), or a
    built-in tool name such as ``Bash``."""
    return CallTool(name, dict(args or {}))


def hold() -> Hold:
    """Keep the response open until ``Script.release()``."""
    return Hold()


class Script:
    """One queued behaviour for one turn; returned by ``StubModel.script``."""

    def __init__(
        self,
        steps: Sequence[Step],
        match: str | None,
        api: Api | None,
        input_tokens: int | Sequence[int] = DEFAULT_INPUT_TOKENS,
    ) -> None:
        self.steps = list(steps)
        self.match = match
        self.api = api
        # the input tokens its responses report, in turn (a context that grows)
        given = [input_tokens] if isinstance(input_tokens, int) else list(input_tokens)
        self.input_tokens = given or [DEFAULT_INPUT_TOKENS]
        self.responses = 0
        self._usage_lock = threading.Lock()
        self.cursor = 0
        self.prompt = ""
        self.tool_results: list[str] = []
        self.started = threading.Event()  # a turn took this script
        self.holding = threading.Event()  # a response is held open right now
        self.finished = threading.Event()  # the final reply was sent
        self._release = threading.Event()

    def release(self) -> None:
        """Let a held response continue."""
        self._release.set()

    def wait_holding(self, timeout: float = 30.0) -> None:
        if not self.holding.wait(timeout):
            raise AssertionError(f"no request reached the hold of script {self.match!r}")

    def wait_finished(self, timeout: float = 30.0) -> None:
        if not self.finished.wait(timeout):
            raise AssertionError(f"script {self.match!r} did not finish")

    @property
    def last_tool_result(self) -> str | None:
        return self.tool_results[-1] if self.tool_results else None

    def _wants(self, prompt: str, api: Api) -> bool:
        if self.started.is_set():
            return False
        if self.api is not None and self.api != api:
            return False
        return self.match is None or self.match in prompt


# --------------------------------------------------------------------------- records


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    api: Api | None
    kind: Kind
    prompt: str = ""
    tool_results: list[str] = field(default_factory=list)

    @property
    def offered_tools(self) -> list[str]:
        """Model-facing tool names offered in this request; Codex namespaced tools as
        ``NAMESPACE__TOOL`` (so an MCP tool reads ``mcp__SERVER__TOOL`` for both harnesses)."""
        if not isinstance(self.body, dict):
            return []
        return list(_tool_names(self.body.get("tools") or []))


def _tool_names(tools: list[Any]) -> Iterator[str]:
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                if isinstance(inner, dict) and "name" in inner:
                    yield f"{tool.get('name')}__{inner['name']}"
        elif isinstance(tool.get("functionDeclarations"), list):  # Gemini
            for inner in tool["functionDeclarations"]:
                if isinstance(inner, dict) and "name" in inner:
                    yield str(inner["name"])
        elif "name" in tool:
            yield str(tool["name"])
        elif isinstance(tool.get("function"), dict):
            yield str(tool["function"].get("name"))


# --------------------------------------------------------------------------- parsing


def _text_of(content: Any) -> str:
    """The text of a message content (string, or blocks with text / input_text / output_text)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    parts.append(block["text"])
                elif "content" in block:
                    parts.append(_text_of(block["content"]))
        return "\n".join(p for p in parts if p)
    return ""


_CONTEXT_BLOCK = re.compile(r"^\s*<([A-Za-z_-]+)>.*</\1>\s*$", re.DOTALL)


def _prompt_text(content: Any) -> str:
    """The user's own words in a message: text blocks, without harness-injected context
    blocks such as ``<system-reminder>…</system-reminder>`` or ``<environment_context>``."""
    if isinstance(content, str):
        return "" if _CONTEXT_BLOCK.match(content) else content
    if not isinstance(content, list):
        return ""
    texts = [
        block if isinstance(block, str) else block.get("text")
        for block in content
        if isinstance(block, str) or (isinstance(block, dict) and "text" in block)
    ]
    return "\n".join(t for t in texts if isinstance(t, str) and t and not _CONTEXT_BLOCK.match(t))


def _anthropic_turn_input(body: dict[str, Any]) -> tuple[str, list[tuple[str, str]]]:
    """(latest user prompt text, [(tool_use_id, result text)] of the last message)."""
    messages = body.get("messages") or []
    results: list[tuple[str, str]] = []
    # Claude Code may append a system message after the tool results (an MCP server's
    # instructions once it connects mid-turn): the results are in the last other message
    last = next((m for m in reversed(messages) if m.get("role") != "system"), None)
    if last is not None and isinstance(last.get("content"), list):
        for block in last["content"]:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                results.append((str(block.get("tool_use_id")), _text_of(block.get("content"))))
    prompt = ""
    for message in reversed(messages):
        if message.get("role") == "user":
            prompt = _prompt_text(message.get("content"))
            if prompt:
                break
    return prompt, results


def _openai_turn_input(body: dict[str, Any]) -> tuple[str, list[tuple[str, str]]]:
    items = body.get("input") or []
    if isinstance(items, str):
        return items, []
    results: list[tuple[str, str]] = []
    for item in reversed(items):
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            results.append((str(item.get("call_id")), _text_of(item.get("output"))))
        else:
            break
    results.reverse()
    prompt = ""
    for item in reversed(items):
        is_message = isinstance(item, dict) and item.get("type", "message") == "message"
        if is_message and item.get("role") == "user":
            prompt = _prompt_text(item.get("content"))
            if prompt:
                break
    return prompt, results


def _chat_turn_input(body: dict[str, Any]) -> tuple[str, list[tuple[str, str]]]:
    messages = body.get("messages") or []
    results: list[tuple[str, str]] = []
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "tool":
            results.append((str(message.get("tool_call_id")), _text_of(message.get("content"))))
        else:
            break
    results.reverse()
    prompt = ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            prompt = _prompt_text(message.get("content"))
            if prompt:
                break
    return prompt, results


def _chat_is_title(body: dict[str, Any]) -> bool:
    """OpenCode's and omp's title side calls: no tools, a system text about a title."""
    if body.get("tools"):
        return False
    system = " ".join(
        _text_of(m.get("content"))
        for m in body.get("messages") or []
        if isinstance(m, dict) and m.get("role") == "system"
    )
    return "title" in system.lower()


def _gemini_turn_input(body: dict[str, Any]) -> tuple[str, list[tuple[str, str]]]:
    """(latest user text, [(call id or name, response JSON)] of the last user content)."""
    contents = body.get("contents") or []
    results: list[tuple[str, str]] = []
    if contents and isinstance(contents[-1], dict):
        for part in contents[-1].get("parts") or []:
            answer = part.get("functionResponse") if isinstance(part, dict) else None
            if isinstance(answer, dict):
                key = str(answer.get("id") or answer.get("name"))
                results.append((key, json.dumps(answer.get("response"))))
    prompt = ""
    for content in reversed(contents):
        if not isinstance(content, dict) or content.get("role") != "user":
            continue
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict) and "text" in p]
        prompt = _prompt_text(parts)
        if prompt:
            break
    return prompt, results


def _example_of(schema: Any) -> Any:
    """A value valid for a (simple) JSON schema, for the title side call."""
    if not isinstance(schema, dict):
        return "stub"
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if isinstance(kind, str):
        kind = kind.lower()  # Gemini's responseSchema spells types in capitals
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {name: _example_of(sub) for name, sub in props.items()}
    if kind == "array":
        return [] if not schema.get("minItems") else [_example_of(schema.get("items"))]
    if kind == "boolean":
        return False
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    return "Stub title"


# --------------------------------------------------------------------------- MCP tools


@dataclass(frozen=True)
class McpTool:
    name: str
    description: str
    handler: Callable[[dict[str, Any]], str]
    read_only: bool = False


def _echo(args: dict[str, Any]) -> str:
    return f"echo: {args.get('text', '')}"


DEFAULT_MCP_TOOLS = (McpTool("echo", "Echo the given text back (test tool).", _echo),)


# --------------------------------------------------------------------------- the server


class StubModel:
    """The running stub: ``url`` (for ANTHROPIC_BASE_URL), ``openai_base_url`` (…/v1, for a
    Codex provider), ``mcp_url``; ``script()`` to queue behaviour, ``requests`` to inspect."""

    def __init__(self, mcp_token: str | None = None) -> None:
        self._lock = threading.Lock()
        self._scripts: list[Script] = []
        self._calls: dict[str, Script] = {}
        self._ids = itertools.count(1)
        self.requests: list[RecordedRequest] = []
        self.mcp_token = mcp_token
        self.mcp_tools: list[McpTool] = list(DEFAULT_MCP_TOOLS)
        self.title = "Stub title"  # what the title side call answers
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"

    def close(self) -> None:
        self._closing.set()
        with self._lock:
            for script in self._scripts:
                script.release()
        self._server.shutdown()
        self._server.server_close()

    # ---- test API

    def script(
        self,
        *steps: Step,
        match: str | None = None,
        api: Api | None = None,
        input_tokens: int | Sequence[int] = DEFAULT_INPUT_TOKENS,
    ) -> Script:
        """Queue a behaviour for the next turn whose user prompt contains ``match``; its
        responses report ``input_tokens`` of input in their usage (a sequence: one value a
        response, in turn, the last repeated: a context that grows, as a harness's transcript
        then records it)."""
        created = Script(steps, match, api, input_tokens)
        with self._lock:
            self._scripts.append(created)
        return created

    def turns(self, api: Api | None = None) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.kind == "turn" and api in (None, r.api)]

    def mcp_calls(self, method: str | None = None) -> list[RecordedRequest]:
        """Recorded MCP requests, optionally only JSON-RPC ``method`` ones."""
        with self._lock:
            found = [r for r in self.requests if r.kind == "mcp"]
        if method is None:
            return found
        return [r for r in found if isinstance(r.body, dict) and r.body.get("method") == method]

    # ---- internals used by the handler

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):06d}stub"

    def _record(self, record: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(record)

    def _script_for(self, api: Api, prompt: str, results: list[tuple[str, str]]) -> Script | None:
        with self._lock:
            for call_id, text in results:
                script = self._calls.pop(call_id, None)
                if script is not None:
                    script.tool_results.append(text)
                    return script
            for script in self._scripts:
                if script._wants(prompt, api):
                    script.started.set()
                    script.prompt = prompt
                    return script
        return None

    def _register_call(self, call_id: str, script: Script) -> None:
        with self._lock:
            self._calls[call_id] = script

    def _plan(self, script: Script | None, emit_keepalive: Callable[[], None]) -> Step:
        """Run the script up to its next visible step (holding where it says)."""
        if script is None:
            return Reply(DEFAULT_REPLY)
        while script.cursor < len(script.steps):
            step = script.steps[script.cursor]
            script.cursor += 1
            if isinstance(step, Hold):
                script.holding.set()
                waited = 0.0
                while not script._release.wait(PING_INTERVAL_SECONDS):
                    waited += PING_INTERVAL_SECONDS
                    if self._closing.is_set() or waited >= HOLD_LIMIT_SECONDS:
                        break
                    emit_keepalive()
                script.holding.clear()
                continue
            if isinstance(step, Reply):
                script.finished.set()
                text = step.text.replace("{prompt}", script.prompt)
                return Reply(text.replace("{tool_result}", script.last_tool_result or ""))
            return step
        script.finished.set()
        return Reply(DEFAULT_REPLY)


def _make_handler(stub: StubModel) -> type[BaseHTTPRequestHandler]:
    class Handler(_StubHandler):
        pass

    Handler.stub = stub
    return Handler


class _StubHandler(BaseHTTPRequestHandler):
    stub: StubModel
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    # ---- plumbing

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_empty(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _start_sse(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _event(self, name: str, data: dict[str, Any]) -> None:
        self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    def _comment(self, text: str) -> None:
        self.wfile.write(f": {text}\n\n".encode())
        self.wfile.flush()

    def _record(self, body: Any, api: Api | None, kind: Kind, **extra: Any) -> RecordedRequest:
        headers = {key.lower(): value for key, value in self.headers.items()}
        record = RecordedRequest(self.command, self.path, headers, body, api, kind, **extra)
        self.stub._record(record)
        return record

    # ---- verbs

    def do_HEAD(self) -> None:
        self._record(None, None, "other")
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        self._record(None, None, "mcp" if path == "/mcp" else "other")
        if path == "/mcp":
            self._send_empty(405)  # no server-initiated stream; allowed by the MCP spec
        elif path in ("/", "/v1", "/v1/"):
            self._send_json(200, {"ok": True})
        elif path == "/v1/models":
            self._send_json(200, {"object": "list", "data": []})
        else:
            self._send_json(404, {"error": {"type": "not_found", "message": path}})

    def do_DELETE(self) -> None:
        self._record(None, None, "mcp" if self.path.startswith("/mcp") else "other")
        self._send_empty(200 if self.path.startswith("/mcp") else 404)

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        body = self._body()
        if path == "/mcp":
            self._mcp(body)
        elif path == "/v1/messages" and isinstance(body, dict):
            self._anthropic(body)
        elif path == "/v1/responses" and isinstance(body, dict):
            self._openai(body)
        elif path == "/v1/chat/completions" and isinstance(body, dict):
            self._chat(body)
        elif ":" in path and path.startswith("/v1beta/models/") and isinstance(body, dict):
            self._gemini(path.rsplit(":", 1)[1], body)
        else:
            self._record(body, None, "other")
            self._send_json(404, {"error": {"type": "not_found", "message": path}})

    # ---- Anthropic Messages

    def _anthropic(self, body: dict[str, Any]) -> None:
        fmt = (body.get("output_config") or {}).get("format") or {}
        prompt, results = _anthropic_turn_input(body)
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            self._record(body, "anthropic", "title", prompt=prompt)
            self._anthropic_answer(body, None, step_override=self._json_answer(fmt))
            return
        self._record(body, "anthropic", "turn", prompt=prompt, tool_results=[t for _, t in results])
        script = self.stub._script_for("anthropic", prompt, results)
        self._anthropic_answer(body, script)

    def _anthropic_answer(
        self, body: dict[str, Any], script: Script | None, step_override: Step | None = None
    ) -> None:
        message_id = self.stub._next_id("msg_")
        usage = {"input_tokens": _input_tokens(script), "output_tokens": 1}
        start: dict[str, Any] = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": body.get("model") or ANTHROPIC_MODEL,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        streaming = bool(body.get("stream"))
        if streaming:
            self._start_sse()
            self._event("message_start", {"type": "message_start", "message": start})
        step = step_override or self.stub._plan(
            script, lambda: self._event("ping", {"type": "ping"}) if streaming else None
        )
        if isinstance(step, CallTool):
            call_id = self.stub._next_id("toolu_")
            assert script is not None
            self.stub._register_call(call_id, script)
            block: dict[str, Any] = {"type": "tool_use", "id": call_id, "name": step.name}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(step.args)}
            stop_reason = "tool_use"
            full = {**block, "input": step.args}
        else:
            assert isinstance(step, Reply)
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": step.text}
            stop_reason = "end_turn"
            full = {"type": "text", "text": step.text}
        if not streaming:
            message = {**start, "content": [full], "stop_reason": stop_reason}
            self._send_json(200, message)
            return
        start_block = {**block, "input": {}} if block["type"] == "tool_use" else block
        self._event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": start_block},
        )
        self._event(
            "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
        )
        self._event("content_block_stop", {"type": "content_block_stop", "index": 0})
        self._event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        )
        self._event("message_stop", {"type": "message_stop"})

    # ---- OpenAI Responses

    def _json_answer(self, fmt: dict[str, Any]) -> Reply:
        """The answer to a side call asking for JSON (both harnesses' session titles)."""
        answer = _example_of(fmt.get("schema"))
        if isinstance(answer, dict) and "title" in answer:
            answer["title"] = self.stub.title
        return Reply(json.dumps(answer))

    def _openai(self, body: dict[str, Any]) -> None:
        prompt, results = _openai_turn_input(body)
        fmt = (body.get("text") or {}).get("format") or {}
        script: Script | None = None
        override: Step | None = None
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            self._record(body, "openai", "title", prompt=prompt)
            override = self._json_answer(fmt)
        else:
            tool_results = [t for _, t in results]
            self._record(body, "openai", "turn", prompt=prompt, tool_results=tool_results)
            script = self.stub._script_for("openai", prompt, results)
        response_id = self.stub._next_id("resp_")
        tokens = _input_tokens(script)
        base: dict[str, Any] = {
            "id": response_id,
            "object": "response",
            "model": body.get("model"),
            "status": "in_progress",
            "output": [],
        }
        self._start_sse()
        self._event("response.created", {"type": "response.created", "response": base})
        step = override or self.stub._plan(script, lambda: self._comment("keepalive"))
        if isinstance(step, CallTool):
            call_id = self.stub._next_id("call_")
            assert script is not None
            self.stub._register_call(call_id, script)
            namespace, _, function = step.name.rpartition("__")
            item: dict[str, Any] = {
                "type": "function_call",
                "id": self.stub._next_id("fc_"),
                "call_id": call_id,
                "name": function if namespace.startswith("mcp__") else step.name,
                "arguments": json.dumps(step.args),
                "status": "completed",
            }
            if namespace.startswith("mcp__"):
                item["namespace"] = namespace
            self._event(
                "response.output_item.added",
                {"type": "response.output_item.added", "output_index": 0, "item": item},
            )
        else:
            assert isinstance(step, Reply)
            item_id = self.stub._next_id("msg_")
            self._event(
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": {
                        "type": "message",
                        "id": item_id,
                        "role": "assistant",
                        "status": "in_progress",
                        "content": [],
                    },
                },
            )
            self._event(
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "item_id": item_id,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": step.text,
                },
            )
            item = {
                "type": "message",
                "id": item_id,
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": step.text, "annotations": []}],
            }
        self._event(
            "response.output_item.done",
            {"type": "response.output_item.done", "output_index": 0, "item": item},
        )
        done = {
            **base,
            "status": "completed",
            "output": [item],
            "usage": {
                "input_tokens": tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": tokens + 5,
            },
        }
        self._event("response.completed", {"type": "response.completed", "response": done})

    # ---- OpenAI Chat Completions

    def _data(self, payload: Any) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self.wfile.write(f"data: {text}\n\n".encode())
        self.wfile.flush()

    def _chat(self, body: dict[str, Any]) -> None:
        prompt, results = _chat_turn_input(body)
        script: Script | None = None
        override: Step | None = None
        if _chat_is_title(body):
            self._record(body, "chat", "title", prompt=prompt)
            override = Reply(self.stub.title)
        else:
            tool_results = [t for _, t in results]
            self._record(body, "chat", "turn", prompt=prompt, tool_results=tool_results)
            script = self.stub._script_for("chat", prompt, results)
        chunk_id = self.stub._next_id("chatcmpl-")
        model = body.get("model")

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            self._data(
                {
                    "id": chunk_id,
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": model,
                    "choices": [choice],
                    **extra,
                }
            )

        self._start_sse()
        chunk({"role": "assistant", "content": ""})
        step = override or self.stub._plan(script, lambda: self._comment("keepalive"))
        if isinstance(step, CallTool):
            call_id = self.stub._next_id("call_")
            assert script is not None
            self.stub._register_call(call_id, script)
            function = {"name": step.name, "arguments": json.dumps(step.args)}
            call = {"index": 0, "id": call_id, "type": "function", "function": function}
            chunk({"tool_calls": [call]})
            finish = "tool_calls"
        else:
            assert isinstance(step, Reply)
            chunk({"content": step.text})
            finish = "stop"
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        chunk({}, finish, usage=usage)
        self._data("[DONE]")

    # ---- Gemini generateContent

    def _gemini(self, method: str, body: dict[str, Any]) -> None:
        if method == "countTokens":
            self._record(body, "gemini", "other")
            self._send_json(200, {"totalTokens": 10})
            return
        prompt, results = _gemini_turn_input(body)
        config = body.get("generationConfig") or {}
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        usage = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}
        if method != "streamGenerateContent":  # side calls (next speaker, routing, titles)
            self._record(body, "gemini", "title", prompt=prompt)
            answer = _example_of(schema) if schema is not None else self.stub.title
            if isinstance(answer, dict) and "title" in answer:
                answer["title"] = self.stub.title
            text = answer if isinstance(answer, str) else json.dumps(answer)
            candidate = {"content": {"role": "model", "parts": [{"text": text}]}}
            self._send_json(
                200,
                {
                    "candidates": [{**candidate, "finishReason": "STOP", "index": 0}],
                    "usageMetadata": usage,
                },
            )
            return
        self._record(body, "gemini", "turn", prompt=prompt, tool_results=[t for _, t in results])
        script = self.stub._script_for("gemini", prompt, results)
        self._start_sse()
        step = self.stub._plan(script, lambda: self._comment("keepalive"))
        if isinstance(step, CallTool):
            call_id = self.stub._next_id("call_")
            assert script is not None
            self.stub._register_call(call_id, script)
            self.stub._register_call(step.name, script)  # older versions answer by name only
            part: dict[str, Any] = {
                "functionCall": {"id": call_id, "name": step.name, "args": step.args}
            }
        else:
            assert isinstance(step, Reply)
            part = {"text": step.text}
        candidate = {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP"}
        self._data({"candidates": [{**candidate, "index": 0}], "usageMetadata": usage})

    # ---- MCP (streamable HTTP, JSON responses)

    def _mcp(self, body: Any) -> None:
        self._record(body, None, "mcp")
        token = self.stub.mcp_token
        if token is not None and self.headers.get("Authorization") != f"Bearer {token}":
            self._send_json(401, {"error": "unauthorized"})
            return
        if not isinstance(body, dict) or "method" not in body:
            self._send_json(400, {"error": "not a JSON-RPC request"})
            return
        if "id" not in body:  # a notification
            self._send_empty(202)
            return
        method = body["method"]
        result: dict[str, Any]
        headers: dict[str, str] = {}
        if method == "initialize":
            requested = (body.get("params") or {}).get("protocolVersion") or "2025-06-18"
            result = {
                "protocolVersion": requested,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "stub-mcp", "version": "1.0.0"},
            }
            headers["Mcp-Session-Id"] = self.stub._next_id("mcpsession")
        elif method == "tools/list":
            result = {
                "tools": [
                    {
                        "name": tool.name,
                        "description": tool.description,
                        "inputSchema": {
                            "type": "object",
                            "properties": {"text": {"type": "string"}},
                        },
                        "annotations": {"readOnlyHint": tool.read_only},
                    }
                    for tool in self.stub.mcp_tools
                ]
            }
        elif method == "tools/call":
            params = body.get("params") or {}
            tool = next((t for t in self.stub.mcp_tools if t.name == params.get("name")), None)
            if tool is None:
                result = {
                    "content": [{"type": "text", "text": f"unknown tool {params.get('name')}"}],
                    "isError": True,
                }
            else:
                text = tool.handler(params.get("arguments") or {})
                result = {"content": [{"type": "text", "text": text}], "isError": False}
        elif method in ("prompts/list", "resources/list", "resources/templates/list"):
            key = {"prompts/list": "prompts", "resources/list": "resources"}.get(
                method, "resourceTemplates"
            )
            result = {key: []}
        elif method == "ping":
            result = {}
        else:
            self._send_json(
                200,
                {
                    "jsonrpc": "2.0",
                    "id": body["id"],
                    "error": {"code": -32601, "message": f"method not found: {method}"},
                },
            )
            return
        self._send_json(200, {"jsonrpc": "2.0", "id": body["id"], "result": result}, headers)


@contextmanager
def running_stub_model(mcp_token: str | None = None) -> Iterator[StubModel]:
    stub = StubModel(mcp_token=mcp_token)
    try:
        yield stub
    finally:
        stub.close()


@pytest.fixture
def stub_model() -> Iterator[StubModel]:
    """A running ``StubModel`` on 127.0.0.1 (stopped after the test)."""
    with running_stub_model() as stub:
        yield stub
